//! Every problem a config file can have: each named by its key, said in words a person can act
//! on, and located at its line; and the values at each refused bound that are accepted. Split
//! from `tests.rs` (whole files through `Config::parse`), whose helpers it uses.

use super::tests::{cfg, only_problem, parsed, with, PX};
use super::*;
use rstest::rstest;

// ---- every problem a file can have: one table

/// A worker table with an unknown key, at line 5, column 1.
const UNKNOWN_KEY: &str = "[study]\nname = \"s\"\n[worker]\ncommand = [\"w\"]\ncolour = \"red\"\n";
/// A worker table with a string where an integer belongs, at line 5, column 11.
const WRONG_TYPE: &str = "[study]\nname = \"s\"\n[worker]\ncommand = [\"w\"]\nmax_par = \"four\"\n";
/// A float param with low above high, `low` at line 7, column 8.
const LOW_ABOVE_HIGH: &str = "[study]\nname = \"s\"\n[worker]\ncommand = [\"w\"]\n\
                              [params.lr]\ntype = \"float\"\nlow =  0.5\nhigh = 0.1\n";

/// The one problem in `text`: it names `key` and its message says each of `says`.
#[rstest]
// TOML and serde errors: they stop the parse, so each is the only problem.
#[case::unknown_key_naming_its_table(UNKNOWN_KEY.into(), "worker.colour", &["unknown field `colour`", "expected one of"])]
#[case::unknown_key_in_a_param_table(cfg("", "", &format!("{PX}colour = 1\n")), "params.x.colour", &["unknown field `colour`"])]
#[case::unknown_key_in_an_inline_table(cfg("", "", "[params]\nx = { type = \"float\", hue = 1 }\n"), "params.x.hue", &[])]
#[case::unknown_top_level_table(cfg("", "", &format!("{PX}[extra]\na = 1\n")), "extra", &["unknown field `extra`"])]
#[case::unknown_key_in_gpu_table(with("", "[gpu]\nheadrom = 1\n"), "gpu.headrom", &["unknown field `headrom`"])]
#[case::unknown_key_in_allocator_table(with("", "[worker.allocator]\ncuda = \"x\"\n"), "worker.allocator.cuda", &[])]
#[case::wrong_type_naming_the_key(WRONG_TYPE.into(), "worker.max_par", &["invalid type"])]
#[case::wrong_type_in_an_array(cfg("", "", PX).replace("[\"w\"]", "[\"w\", 3]"), "worker.command", &[])]
#[case::wrong_type_for_a_table(format!("study = 5\n{PX}"), "study", &[])]
// Serde's derived structs would otherwise take the fields by position.
#[case::array_written_for_a_table(format!("study = [\"s\"]\n{PX}"), "study", &["expected a table"])]
#[case::array_written_for_a_param_table(cfg("", "", "[params]\nx = [\"float\", 0, 1]\n"), "params.x", &[])]
#[case::array_of_tables_where_a_table_is_expected(cfg("", "", PX).replace("[study]", "[[study]]"), "study", &[])]
// [study] and [worker] are required, with their required keys.
#[case::missing_study_name(cfg("", "", PX).replace("name = \"s\"\n", ""), "study.name", &[])]
#[case::empty_study_name(cfg("", "", PX).replace("\"s\"", "\"\""), "study.name", &[])]
#[case::missing_study_table(format!("[worker]\ncommand = [\"w\"]\n{PX}"), "study", &[])]
#[case::missing_worker_table(format!("[study]\nname = \"s\"\n{PX}"), "worker", &[])]
#[case::missing_command(cfg("", "", PX).replace("command = [\"w\"]", ""), "worker.command", &[])]
// [study]
#[case::zero_n_trials(cfg("n_trials = 0", "", PX), "study.n_trials", &[])]
#[case::negative_seed(cfg("seed = -1", "", PX), "study.seed", &[])]
#[case::unknown_direction_listing_allowed_values(cfg("direction = \"up\"", "", PX), "study.direction", &["\"minimize\", \"maximize\""])]
#[case::unknown_sampler_listing_allowed_values(cfg("sampler = \"cmaes\"", "", PX), "study.sampler", &["\"random\", \"grid\", \"tpe\", \"nsga2\""])]
#[case::unparseable_study_timeout(cfg("timeout = \"soon\"", "", PX), "study.timeout", &[])]
// [study]'s budgets beside n_trials.
#[case::zero_gpu_hours(cfg("gpu_hours = 0", "", &format!("{PX}[gpu]\n")), "study.gpu_hours", &["greater than 0"])]
#[case::gpu_hours_not_a_number(cfg("gpu_hours = \"10h\"", "", &format!("{PX}[gpu]\n")), "study.gpu_hours", &["must be a number"])]
#[case::gpu_hours_without_gpus(cfg("gpu_hours = 10", "", PX), "study.gpu_hours", &["CPU-only", "[gpu]"])]
#[case::zero_patience(cfg("patience = 0", "", PX), "study.patience", &["between 1 and 1000000"])]
#[case::negative_min_delta(cfg("patience = 5\nmin_delta = -0.1", "", PX), "study.min_delta", &["relative"])]
#[case::min_delta_without_patience(cfg("min_delta = 0.01", "", PX), "study.min_delta", &["needs `patience`"])]
#[case::patience_with_several_objectives(cfg("directions = [\"minimize\", \"maximize\"]\npatience = 5", "", PX), "study.patience", &["one objective", "Pareto front"])]
// Several objectives.
#[case::direction_and_directions(cfg("direction = \"minimize\"\ndirections = [\"minimize\", \"maximize\"]", "", PX), "study.directions", &["exclusive"])]
#[case::no_directions(cfg("directions = []", "", PX), "study.directions", &["at least one"])]
#[case::unknown_second_direction(cfg("directions = [\"minimize\", \"up\"]", "", PX), "study.directions[1]", &["\"minimize\", \"maximize\""])]
#[case::a_metric_name_per_objective(cfg("directions = [\"minimize\", \"maximize\"]\nmetric_names = [\"loss\"]", "", PX), "study.metric_names", &["names 1 metrics but `directions` gives 2 objectives"])]
#[case::metric_names_for_one_direction(cfg("metric_names = [\"a\", \"b\"]", "", PX), "study.metric_names", &["`direction` (one objective) gives 1 objective:"])]
#[case::metric_name_twice(cfg("directions = [\"minimize\", \"maximize\"]\nmetric_names = [\"a\", \"a\"]", "", PX), "study.metric_names[1]", &["named twice"])]
#[case::empty_metric_name(cfg("directions = [\"minimize\", \"maximize\"]\nmetric_names = [\"a\", \" \"]", "", PX), "study.metric_names[1]", &["empty"])]
#[case::gp_with_several_objectives(cfg("directions = [\"minimize\", \"maximize\"]\nsampler = \"gp\"", "", PX), "study.sampler", &["GP sampler optimizes one objective", "the study has 2"])]
#[case::pruner_with_several_objectives(cfg("directions = [\"minimize\", \"maximize\"]", "", &format!("{PX}[pruner]\ntype = \"median\"\n")), "pruner.type", &["not supported with several objectives", "the study has 2"])]
// The search space.
#[case::grid_without_params(cfg("sampler = \"grid\"", "", ""), "study.sampler", &["static space", "[params.NAME]"])]
#[case::group_without_multivariate(cfg("", "", &format!("[sampler]\nmultivariate = false\ngroup = true\n{PX}")), "sampler.group", &["multivariate = true"])]
#[case::low_not_below_high(LOW_ABOVE_HIGH.into(), "params.lr.low", &[])]
#[case::int_low_equal_to_high(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 3\nhigh = 3\n"), "params.n.low", &[])]
#[case::missing_bound(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\n"), "params.x.high", &[])]
#[case::non_integer_int_bound(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0.5\nhigh = 4\n"), "params.n.low", &["integer"])]
#[case::string_int_bound(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = \"4\"\n"), "params.n.high", &[])]
#[case::non_numeric_float_bound(cfg("", "", "[params.x]\ntype = \"float\"\nlow = \"0\"\nhigh = 1\n"), "params.x.low", &[])]
#[case::non_finite_float_bound(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\nhigh = inf\n"), "params.x.high", &[])]
#[case::float_log_with_non_positive_low(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nlog = true\n"), "params.x.log", &[])]
#[case::int_log_with_non_positive_low(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 8\nlog = true\n"), "params.n.log", &[])]
#[case::log_with_step_on_float(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 1\nhigh = 2\nlog = true\nstep = 0.5\n"), "params.x.step", &["log"])]
#[case::int_log_with_step_other_than_one(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 1\nhigh = 9\nlog = true\nstep = 2\n"), "params.n.step", &[])]
#[case::zero_float_step(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nstep = 0\n"), "params.x.step", &[])]
#[case::negative_int_step(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 4\nstep = -2\n"), "params.n.step", &[])]
#[case::float_step_not_dividing_the_range(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nstep = 0.3\n"), "params.x.step", &["does not divide"])]
#[case::float_step_not_dividing_the_range_in_decimals(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0.1\nhigh = 0.30000000000000004\nstep = 0.1\n"), "params.x.step", &["does not divide", "lower high to 0.3"])]
#[case::float_step_of_10_pow_28_steps(cfg("", "", "[params.x]\ntype = \"float\"\nlow = 0\nhigh = 1\nstep = 1e-30\n"), "params.x.step", &["decimal.InvalidOperation"])]
#[case::int_high_past_2_pow_53(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 3864557551897539457\n"), "params.n.high", &["2^53"])]
#[case::int_low_past_minus_2_pow_53(cfg("", "", "[params.n]\ntype = \"int\"\nlow = -9007199254740993\nhigh = 0\n"), "params.n.low", &["2^53"])]
#[case::int_step_not_dividing_the_range(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 5\nstep = 2\n"), "params.n.step", &[])]
#[case::categorical_without_choices(cfg("", "", "[params.c]\ntype = \"categorical\"\n"), "params.c.choices", &[])]
#[case::categorical_with_no_choice(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = []\n"), "params.c.choices", &[])]
#[case::array_choice(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = [\"a\", [1, 2]]\n"), "params.c.choices", &[])]
#[case::table_choice(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = [\"a\", { a = 1 }]\n"), "params.c.choices", &[])]
#[case::datetime_choice(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = [\"a\", 1979-05-27T07:32:00Z]\n"), "params.c.choices", &[])]
#[case::nan_choice(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = [\"a\", nan]\n"), "params.c.choices", &[])]
#[case::duplicate_choices(cfg("", "", "[params.c]\ntype = \"categorical\"\nchoices = [1, \"a\", 1.0]\n"), "params.c.choices", &["duplicate"])]
#[case::choices_on_a_float(cfg("", "", &format!("{PX}choices = [1]\n")), "params.x.choices", &[])]
#[case::choices_on_an_int(cfg("", "", "[params.n]\ntype = \"int\"\nlow = 0\nhigh = 1\nchoices = [1]\n"), "params.n.choices", &[])]
#[case::unknown_param_type(cfg("", "", "[params.x]\ntype = \"double\"\n"), "params.x.type", &["\"float\", \"int\", \"categorical\""])]
#[case::missing_param_type(cfg("", "", "[params.x]\nlow = 1\n"), "params.x.type", &[])]
#[case::reserved_param_name(cfg("", "", &PX.replace("[params.x]", "[params.\"sweepd:x\"]")), "params.\"sweepd:x\"", &["sweepd:"])]
#[case::empty_param_name(cfg("", "", &PX.replace("[params.x]", "[params.\"\"]")), "params.\"\"", &[])]
#[case::grid_with_continuous_float(cfg("sampler = \"grid\"", "", PX), "params.x", &["grid sampler needs a `step`"])]
#[case::grid_over_a_million_points(cfg("sampler = \"grid\"", "", "[params.a]\ntype = \"int\"\nlow = 0\nhigh = 999\n[params.b]\ntype = \"int\"\nlow = 0\nhigh = 1000\n"), "study.sampler", &[])]
// [storage]
#[case::postgresql_url_with_a_space(cfg("", "", &format!("[storage]\nurl = \"postgresql://u:secret@h/my db\"\n{PX}")), "storage.url", &["percent-encode"])]
#[case::zero_host_timeout(cfg("", "", &format!("[storage]\nhost_timeout = \"0s\"\n{PX}")), "storage.host_timeout", &["greater than zero"])]
#[case::mysql_storage(cfg("", "", &format!("[storage]\nurl = \"mysql://h/db\"\n{PX}")), "storage.url", &["only sqlite://"])]
#[case::storage_without_a_scheme(cfg("", "", &format!("[storage]\nurl = \"sweepd.db\"\n{PX}")), "storage.url", &["only sqlite://"])]
// [worker]
#[case::empty_command(cfg("", "", PX).replace("[\"w\"]", "[]"), "worker.command", &[])]
#[case::empty_program(cfg("", "", PX).replace("[\"w\"]", "[\"\", \"x\"]"), "worker.command", &[])]
#[case::unknown_mode_listing_allowed_values(cfg("", "mode = \"forking\"", PX), "worker.mode", &["\"persistent\", \"oneshot\""])]
#[case::missing_cwd(cfg("", "cwd = \"nope\"", PX), "worker.cwd", &["nope"])]
#[case::unparseable_trial_timeout(cfg("", "trial_timeout = \"1 fortnight\"", PX), "worker.trial_timeout", &[])]
#[case::zero_shutdown_grace(cfg("", "shutdown_grace = \"0s\"", PX), "worker.shutdown_grace", &["greater than zero"])]
#[case::startup_timeout_of_1ns(cfg("", "startup_timeout = \"1ns\"", PX), "worker.startup_timeout", &["too short", "at least 1s"])]
#[case::startup_timeout_of_500ms(cfg("", "startup_timeout = \"500ms\"", PX), "worker.startup_timeout", &["at least 1s"])]
#[case::pythonpath_without_the_helper(cfg("", "", &format!("{PX}[worker.env]\nPYTHONPATH = \"/nonexistent/lib\"\n")), "worker.env.PYTHONPATH", &["sweepd_worker.py", "/python:/nonexistent/lib"])]
#[case::empty_pythonpath(cfg("", "", &format!("{PX}[worker.env]\nPYTHONPATH = \"\"\n")), "worker.env.PYTHONPATH", &["import sweepd_worker"])]
#[case::zero_startup_timeout(cfg("", "startup_timeout = \"0m\"", PX), "worker.startup_timeout", &[])]
#[case::zero_heartbeat_timeout(with("heartbeat_timeout = \"0s\"", ""), "worker.heartbeat_timeout", &[])]
#[case::zero_max_par(cfg("", "max_par = 0", PX), "worker.max_par", &[])]
#[case::max_par_above_1024(cfg("", "max_par = 1025", PX), "worker.max_par", &[])]
#[case::negative_recycle_after(cfg("", "recycle_after = -1", PX), "worker.recycle_after", &[])]
#[case::zero_recycle_on_growth(with("recycle_on_growth = 0", ""), "worker.recycle_on_growth", &[])]
#[case::recycle_on_growth_in_an_unknown_unit(with("recycle_on_growth = \"1 parsec\"", ""), "worker.recycle_on_growth", &[])]
#[case::log_max_bytes_below_4kib(with("log_max_bytes = 4095", ""), "worker.log_max_bytes", &["4 KiB"])]
#[case::log_max_total_below_log_max_bytes(with("log_max_bytes = \"10MiB\"\nlog_max_total = \"5MiB\"", ""), "worker.log_max_total", &[])]
#[case::default_log_max_total_below_log_max_bytes(with("log_max_bytes = \"2GiB\"", ""), "worker.log_max_total", &["default"])]
#[case::env_value_of_a_wrong_type(cfg("", "", &format!("[worker.env]\nX = [1]\n{PX}")), "worker.env.X", &[])]
#[case::env_name_with_equals(cfg("", "", &format!("[worker.env]\n\"A=B\" = \"x\"\n{PX}")), "worker.env.\"A=B\"", &[])]
#[case::empty_env_name(cfg("", "", &format!("[worker.env]\n\"\" = \"x\"\n{PX}")), "worker.env.\"\"", &[])]
#[case::unknown_allocator_preset(with("", "[worker.allocator]\npreset = \"tuned\"\n"), "worker.allocator.preset", &["\"default\", \"none\""])]
#[case::unknown_pytorch_allocator_key(with("", "[worker.allocator]\npytorch = \"expandable_segments:True,max_splt_size_mb:64\"\n"), "worker.allocator.pytorch", &["\"max_splt_size_mb\""])]
#[case::pytorch_allocator_entry_without_a_value(with("", "[worker.allocator]\npytorch = \"expandable_segments\"\n"), "worker.allocator.pytorch", &[])]
#[case::pytorch_allocator_stray_comma(with("", "[worker.allocator]\npytorch = \"expandable_segments:True,\"\n"), "worker.allocator.pytorch", &[])]
#[case::pytorch_allocator_empty_value(with("", "[worker.allocator]\npytorch = \"backend:\"\n"), "worker.allocator.pytorch", &[])]
#[case::pytorch_allocator_unbalanced_bracket(with("", "[worker.allocator]\npytorch = \"roundup_power2_divisions:[256:1\"\n"), "worker.allocator.pytorch", &[])]
// Sizes.
#[case::size_in_an_unknown_unit(with("", "[gpu]\nheadroom = \"1 GiX\"\n"), "gpu.headroom", &["unknown unit"])]
#[case::negative_size_in_bytes(with("", "[gpu]\nheadroom = -1\n"), "gpu.headroom", &[])]
#[case::negative_size_with_a_unit(with("", "[gpu]\nheadroom = \"-1GiB\"\n"), "gpu.headroom", &[])]
#[case::size_of_a_wrong_type(with("", "[gpu]\nheadroom = 1.5\n"), "gpu.headroom", &["must be a size"])]
// [gpu]
#[case::unknown_devices_keyword(with("", "[gpu]\ndevices = \"some\"\n"), "gpu.devices", &["\"all\", \"none\""])]
#[case::devices_of_a_wrong_type(with("", "[gpu]\ndevices = 0\n"), "gpu.devices", &["list of device indices"])]
#[case::device_index_of_a_wrong_type(with("", "[gpu]\ndevices = [0, \"1\"]\n"), "gpu.devices", &[])]
#[case::empty_device_list(with("", "[gpu]\ndevices = []\n"), "gpu.devices", &[])]
#[case::negative_device_index(with("", "[gpu]\ndevices = [0, -1]\n"), "gpu.devices", &[])]
#[case::duplicate_device_index(with("", "[gpu]\ndevices = [1, 0, 1]\n"), "gpu.devices", &["duplicate device index 1"])]
#[case::zero_trial_memory(with("", "[gpu]\ntrial_memory = 0\n"), "gpu.trial_memory", &["greater than zero"])]
#[case::zero_max_par_per_device(with("", "[gpu]\nmax_par_per_device = 0\n"), "gpu.max_par_per_device", &[])]
#[case::max_par_per_device_above_1024(with("", "[gpu]\nmax_par_per_device = 1025\n"), "gpu.max_par_per_device", &[])]
#[case::zero_gpus_per_trial(with("", "[gpu]\ngpus_per_trial = 0\n"), "gpu.gpus_per_trial", &[])]
#[case::multi_gpu_trials_until_they_are_supported(with("", "[gpu]\ndevices = [0, 1]\ngpus_per_trial = 2\n"), "gpu.gpus_per_trial", &["not supported yet"])]
#[case::poll_interval_below_50ms(with("", "[gpu]\npoll_interval = \"10ms\"\n"), "gpu.poll_interval", &["at least 50ms"])]
#[case::missing_nvml_lib(with("", "[gpu]\nnvml_lib = \"no/libnvidia-ml.so\"\n"), "gpu.nvml_lib", &["does not exist"])]
#[case::empty_nvml_lib(with("", "[gpu]\nnvml_lib = \"\"\n"), "gpu.nvml_lib", &[])]
#[case::zero_idle_worker_timeout(with("", "[gpu]\nidle_worker_timeout = \"0s\"\n"), "gpu.idle_worker_timeout", &["greater than zero"])]
#[case::idle_worker_timeout_over_a_day(with("", "[gpu]\nidle_worker_timeout = \"2d\"\n"), "gpu.idle_worker_timeout", &["too long"])]
#[case::empty_memory_group(with("", "[gpu]\nmemory_group = \" \"\n"), "gpu.memory_group", &["must not be empty"])]
#[case::memory_group_without_declared_params(cfg("", "", "[gpu]\nmemory_group = \"resnet\"\n"), "gpu.memory_group", &["[params.NAME]"])]
// [retry]
#[case::negative_oom_retries(with("", "[retry]\noom = -1\n"), "retry.oom", &[])]
#[case::negative_cuda_fatal_retries(with("", "[retry]\ncuda_fatal = -1\n"), "retry.cuda_fatal", &[])]
#[case::negative_crash_retries(with("", "[retry]\ncrash = -1\n"), "retry.crash", &[])]
#[case::retries_past_u32(with("", "[retry]\noom = 4294967296\n"), "retry.oom", &["at most 4294967295"])]
#[case::zero_breaker_threshold(with("", "[retry]\nbreaker_threshold = 0\n"), "retry.breaker_threshold", &["at least 1"])]
#[case::max_backoff_below_backoff(with("", "[retry]\nbreaker_backoff = \"10m\"\nbreaker_max_backoff = \"5m\"\n"), "retry.breaker_max_backoff", &[])]
#[case::default_max_backoff_below_backoff(with("", "[retry]\nbreaker_backoff = \"1h\"\n"), "retry.breaker_max_backoff", &["default"])]
#[case::zero_breaker_backoff(with("", "[retry]\nbreaker_backoff = \"0s\"\n"), "retry.breaker_backoff", &[])]
#[case::oom_admission_factor_zero(with("", "[retry]\noom_admission_factor = 0\n"), "retry.oom_admission_factor", &[])]
#[case::oom_admission_factor_one(with("", "[retry]\noom_admission_factor = 1\n"), "retry.oom_admission_factor", &[])]
#[case::oom_admission_factor_above_one(with("", "[retry]\noom_admission_factor = 1.5\n"), "retry.oom_admission_factor", &[])]
#[case::oom_admission_factor_negative(with("", "[retry]\noom_admission_factor = -0.5\n"), "retry.oom_admission_factor", &[])]
#[case::oom_admission_factor_float_zero(with("", "[retry]\noom_admission_factor = 0.0\n"), "retry.oom_admission_factor", &[])]
#[case::oom_admission_factor_string(with("", "[retry]\noom_admission_factor = \"half\"\n"), "retry.oom_admission_factor", &[])]
#[case::unparseable_oom_recovery(with("", "[retry]\noom_recovery = \"soon\"\n"), "retry.oom_recovery", &[])]
// [sampler]
#[case::zero_n_ei_candidates(with("", "[sampler]\nn_ei_candidates = 0\n"), "sampler.n_ei_candidates", &[])]
#[case::negative_n_startup_trials(with("", "[sampler]\nn_startup_trials = -1\n"), "sampler.n_startup_trials", &[])]
#[case::negative_sampler_seed(with("", "[sampler]\nseed = -3\n"), "sampler.seed", &[])]
#[case::population_of_one(with("", "[sampler]\npopulation_size = 1\n"), "sampler.population_size", &["between 2 and"])]
#[case::crossover_prob_above_one(with("", "[sampler]\ncrossover_prob = 1.5\n"), "sampler.crossover_prob", &["between 0 and 1"])]
#[case::swapping_prob_negative(with("", "[sampler]\nswapping_prob = -0.1\n"), "sampler.swapping_prob", &[])]
#[case::mutation_prob_as_text(with("", "[sampler]\nmutation_prob = \"low\"\n"), "sampler.mutation_prob", &["must be a number"])]
// [pruner]
#[case::unknown_pruner_type(with("", "[pruner]\ntype = \"pbt\"\nmin_resource = 1\n"), "pruner.type", &["\"none\", \"median\", \"asha\", \"hyperband\""])]
#[case::asha_key_on_median(with("", "[pruner]\ntype = \"median\"\nmin_resource = 2\n"), "pruner.min_resource", &["\"asha\""])]
#[case::median_key_on_asha(with("", "[pruner]\ntype = \"asha\"\nn_warmup_steps = 2\n"), "pruner.n_warmup_steps", &[])]
#[case::median_key_on_none(with("", "[pruner]\ntype = \"none\"\ninterval_steps = 2\n"), "pruner.interval_steps", &[])]
#[case::pruner_key_without_a_type(with("", "[pruner]\nreduction_factor = 4\n"), "pruner.reduction_factor", &["set `type`"])]
#[case::negative_n_warmup_steps(with("", "[pruner]\ntype = \"median\"\nn_warmup_steps = -1\n"), "pruner.n_warmup_steps", &[])]
#[case::zero_interval_steps(with("", "[pruner]\ntype = \"median\"\ninterval_steps = 0\n"), "pruner.interval_steps", &[])]
#[case::negative_median_n_startup_trials(with("", "[pruner]\ntype = \"median\"\nn_startup_trials = -1\n"), "pruner.n_startup_trials", &[])]
#[case::zero_min_resource(with("", "[pruner]\ntype = \"asha\"\nmin_resource = 0\n"), "pruner.min_resource", &[])]
#[case::reduction_factor_below_two(with("", "[pruner]\ntype = \"asha\"\nreduction_factor = 1\n"), "pruner.reduction_factor", &["at least 2 (got 1)"])]
#[case::hyperband_key_on_asha(with("", "[pruner]\ntype = \"asha\"\nmax_resource = 27\n"), "pruner.max_resource", &["of pruner type \"hyperband\"", "type \"asha\""])]
#[case::bootstrap_count_on_median(with("", "[pruner]\ntype = \"median\"\nbootstrap_count = 2\n"), "pruner.bootstrap_count", &["\"hyperband\""])]
#[case::shared_key_on_median_names_both_types(with("", "[pruner]\ntype = \"median\"\nreduction_factor = 2\n"), "pruner.reduction_factor", &["pruner types \"asha\" and \"hyperband\""])]
#[case::min_early_stopping_rate_on_hyperband(with("", "[pruner]\ntype = \"hyperband\"\nmin_early_stopping_rate = 1\n"), "pruner.min_early_stopping_rate", &["bracket k the rate k"])]
#[case::hyperband_max_resource_as_other_text(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = \"max\"\n"), "pruner.max_resource", &["\"auto\""])]
#[case::hyperband_max_resource_as_float(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = 27.0\n"), "pruner.max_resource", &["not float"])]
#[case::hyperband_max_resource_zero(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = 0\n"), "pruner.max_resource", &["at least 1 (got 0)"])]
#[case::hyperband_max_resource_below_min_resource(with("", "[pruner]\ntype = \"hyperband\"\nmin_resource = 5\nmax_resource = 4\n"), "pruner.max_resource", &["below min_resource (5)", "never prune"])]
#[case::hyperband_max_resource_past_any_step(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = 2147483649\n"), "pruner.max_resource", &["at most 2147483648"])]
#[case::hyperband_bootstrap_with_auto(with("", "[pruner]\ntype = \"hyperband\"\nbootstrap_count = 2\n"), "pruner.bootstrap_count", &["max_resource` unset", "number of steps"])]
#[case::hyperband_bootstrap_with_auto_written(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = \"auto\"\nbootstrap_count = 1\n"), "pruner.bootstrap_count", &["max_resource = \"auto\""])]
#[case::hyperband_negative_bootstrap_count(with("", "[pruner]\ntype = \"hyperband\"\nmax_resource = 9\nbootstrap_count = -1\n"), "pruner.bootstrap_count", &["must not be negative"])]
#[case::hyperband_reduction_factor_below_two(with("", "[pruner]\ntype = \"hyperband\"\nreduction_factor = 1\n"), "pruner.reduction_factor", &["at least 2 (got 1)"])]
#[case::hyperband_zero_min_resource(with("", "[pruner]\ntype = \"hyperband\"\nmin_resource = 0\n"), "pruner.min_resource", &[])]
#[case::negative_min_early_stopping_rate(with("", "[pruner]\ntype = \"asha\"\nmin_early_stopping_rate = -1\n"), "pruner.min_early_stopping_rate", &[])]
// [metrics]
#[case::metrics_on_every_ipv4_address(with("", "[metrics]\nlisten = \"0.0.0.0:9464\"\n"), "metrics.listen", &["allow_remote"])]
#[case::metrics_on_a_lan_address(with("", "[metrics]\nlisten = \"192.168.1.5:9464\"\n"), "metrics.listen", &["allow_remote"])]
#[case::metrics_on_every_ipv6_address(with("", "[metrics]\nlisten = \"[::]:9464\"\n"), "metrics.listen", &["allow_remote"])]
#[case::metrics_remote_with_allow_remote_false(with("", "[metrics]\nlisten = \"10.0.0.1:9464\"\nallow_remote = false\n"), "metrics.listen", &[])]
#[case::metrics_on_a_host_name(with("", "[metrics]\nlisten = \"localhost:9464\"\n"), "metrics.listen", &["127.0.0.1:9464"])]
#[case::metrics_port_without_an_address(with("", "[metrics]\nlisten = \"9464\"\n"), "metrics.listen", &[])]
#[case::metrics_port_zero(with("", "[metrics]\nlisten = \"127.0.0.1:0\"\n"), "metrics.listen", &[])]
// [notify]
#[case::notify_without_command(with("", "[notify]\nevents = [\"finished\"]\n"), "notify.command", &["missing"])]
#[case::notify_empty_command(with("", "[notify]\ncommand = []\n"), "notify.command", &["no shell"])]
#[case::notify_empty_program(with("", "[notify]\ncommand = [\"\", \"x\"]\n"), "notify.command", &["program"])]
#[case::notify_unknown_event(with("", "[notify]\ncommand = [\"n\"]\nevents = [\"done\"]\n"), "notify.events[0]", &["unknown event \"done\"", "\"finished\", \"breaker\", \"fatal\", \"device_lost\", \"summary\""])]
#[case::notify_event_twice(with("", "[notify]\ncommand = [\"n\"]\nevents = [\"fatal\", \"fatal\"]\n"), "notify.events[1]", &["twice"])]
#[case::notify_summary_without_its_period(with("", "[notify]\ncommand = [\"n\"]\nevents = [\"summary\"]\n"), "notify.events[0]", &["summary_every"])]
#[case::notify_summary_every_left_out_of_events(with("", "[notify]\ncommand = [\"n\"]\nevents = [\"fatal\"]\nsummary_every = \"6h\"\n"), "notify.summary_every", &["leaves out \"summary\""])]
#[case::notify_summary_every_second(with("", "[notify]\ncommand = [\"n\"]\nsummary_every = \"1s\"\n"), "notify.summary_every", &["at least 1m"])]
#[case::notify_timeout_of_an_hour(with("", "[notify]\ncommand = [\"n\"]\ntimeout = \"1h\"\n"), "notify.timeout", &["at most 10m"])]
#[case::notify_unknown_key(with("", "[notify]\ncommand = [\"n\"]\nurl = \"x\"\n"), "notify.url", &["unknown field `url`"])]
fn rejects(#[case] text: String, #[case] key: &str, #[case] says: &[&str]) {
    let p = only_problem(&text, key);
    for s in says {
        assert!(p.message.contains(s), "should say {s:?}: {}", p.message);
    }
}

/// Where the one problem of `text` points: the line that starts with `line_start`, and the
/// column if given.
#[rstest]
#[case::unknown_key_at_the_key(UNKNOWN_KEY.into(), "worker.colour", "colour", Some(1))]
#[case::wrong_type_at_the_value(WRONG_TYPE.into(), "worker.max_par", "max_par", Some(11))]
#[case::array_of_tables_at_its_header(cfg("", "", PX).replace("[study]", "[[study]]"), "study", "[[study]]", None)]
#[case::missing_key_at_its_tables_header(cfg("", "", PX).replace("name = \"s\"\n", ""), "study.name", "[study]", None)]
#[case::low_above_high_at_low(LOW_ABOVE_HIGH.into(), "params.lr.low", "low", Some(8))]
#[case::duplicate_choice_at_the_duplicate(
    cfg(
        "",
        "",
        "[params.c]\ntype = \"categorical\"\nchoices = [1, \"a\", 1.0]\n"
    ),
    "params.c.choices",
    "choices",
    Some(20)
)]
#[case::negative_device_index_at_the_index(
    with("", "[gpu]\ndevices = [0, -1]\n"),
    "gpu.devices",
    "devices",
    Some(15)
)]
fn problem_points_at(
    #[case] text: String,
    #[case] key: &str,
    #[case] line_start: &str,
    #[case] column: Option<usize>,
) {
    let lines: Vec<usize> = (1..)
        .zip(text.lines())
        .filter(|(_, l)| l.starts_with(line_start))
        .map(|(n, _)| n)
        .collect();
    assert_eq!(lines.len(), 1, "one line starts with {line_start:?}");
    let p = only_problem(&text, key);
    assert_eq!(p.line, Some(lines[0]), "{p}");
    if column.is_some() {
        assert_eq!(p.column, column, "{p}");
    }
}

#[test]
fn low_not_below_high_says_both() {
    let p = only_problem(LOW_ABOVE_HIGH, "params.lr.low");
    assert_eq!(p.message, "low (0.5) must be less than high (0.1)");
}

/// A check of a parsed config (rstest binds case arguments untyped).
type Check = fn(&Config) -> bool;

fn check(f: Check) -> Check {
    f
}

/// Values at the bound a `rejects` case crosses are accepted.
#[rstest]
#[case::one_gpu_per_trial_of_two_devices(with("", "[gpu]\ndevices = [0, 1]\ngpus_per_trial = 1\n"), check(|c| c.gpu.gpus_per_trial == 1))]
#[case::poll_interval_of_50ms(with("", "[gpu]\npoll_interval = \"50ms\"\n"), check(|c| c.gpu.poll_interval == Duration::from_millis(50)))]
#[case::log_max_bytes_of_4kib(with("log_max_bytes = \"4KiB\"", ""), check(|c| c.worker.log_max_bytes == 4096))]
fn accepts_the_bound(#[case] text: String, #[case] check: Check) {
    assert!(check(&parsed(&text)));
}
