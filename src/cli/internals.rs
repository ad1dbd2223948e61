//! `sweepd internals --json`, hidden from `--help`: the constants and defaults the bench scripts
//! (`bench/benchlib.py`) compute their bounds and write their text with, printed from their
//! definitions so that no script keeps a copy that could drift. Not a user interface: a name
//! goes when what it names goes, and the bench that reads it then fails naming it.

use crate::config::{GpuConfig, SamplerConfig};
use crate::gpu::memory_model::{
    BOLD_PRIOR_SHARE, BOLD_QUANTILE, CAP_GROWTH, MIN_MEASURED, PRIOR_MARGIN,
};
use crate::sampler::gp::MAX_FIT_TRIALS as GP_MAX_FIT_TRIALS;
use crate::sampler::tpe::HISTORY_WINDOW;
use serde_json::{json, Value};

/// `consts` by their Rust names; `defaults` by their config table and key, sizes in bytes and
/// durations in seconds.
pub(super) fn internals() -> Value {
    let gpu = GpuConfig::default();
    let sampler = SamplerConfig::default();
    json!({
        "consts": {
            "MIN_MEASURED": MIN_MEASURED,
            "PRIOR_MARGIN": PRIOR_MARGIN,
            "BOLD_QUANTILE": BOLD_QUANTILE,
            "BOLD_PRIOR_SHARE": BOLD_PRIOR_SHARE,
            "CAP_GROWTH": CAP_GROWTH,
            "HISTORY_WINDOW": HISTORY_WINDOW,
            "GP_MAX_FIT_TRIALS": GP_MAX_FIT_TRIALS,
        },
        "defaults": {
            "gpu": {
                "headroom": gpu.headroom,
                "trial_memory": gpu.trial_memory,
                "max_par_per_device": gpu.max_par_per_device,
                "poll_interval": gpu.poll_interval.as_secs_f64(),
                "idle_worker_timeout": gpu.idle_worker_timeout.as_secs_f64(),
                "caps": gpu.caps,
            },
            "sampler": {
                "n_startup_trials": sampler.n_startup_trials,
                "n_ei_candidates": sampler.n_ei_candidates,
                "population_size": sampler.population_size,
                "crossover_prob": sampler.crossover_prob,
                "swapping_prob": sampler.swapping_prob,
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::internals;
    use crate::config::{GpuConfig, SamplerConfig};
    use crate::gpu::memory_model::{
        BOLD_PRIOR_SHARE, BOLD_QUANTILE, CAP_GROWTH, MIN_MEASURED, PRIOR_MARGIN,
    };
    use crate::sampler::gp::MAX_FIT_TRIALS as GP_MAX_FIT_TRIALS;
    use crate::sampler::tpe::HISTORY_WINDOW;
    use serde_json::{json, Value};

    fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
        path.split('.')
            .fold(v, |v, key| v.get(key).unwrap_or(&Value::Null))
    }

    /// The names `bench/benchlib.py` reads (and, under caps, the small prior's share, the re-run
    /// growth and the quantile aimed at, for a bench of issue 41's design), each with the value
    /// of what it names.
    #[test]
    fn internals_prints_every_name_the_benches_read_with_its_value() {
        let (gpu, sampler) = (GpuConfig::default(), SamplerConfig::default());
        let printed = internals();
        for (name, want) in [
            ("consts.MIN_MEASURED", json!(MIN_MEASURED)),
            ("consts.PRIOR_MARGIN", json!(PRIOR_MARGIN)),
            ("consts.BOLD_QUANTILE", json!(BOLD_QUANTILE)),
            ("consts.BOLD_PRIOR_SHARE", json!(BOLD_PRIOR_SHARE)),
            ("consts.CAP_GROWTH", json!(CAP_GROWTH)),
            ("defaults.gpu.caps", json!(gpu.caps)),
            ("consts.HISTORY_WINDOW", json!(HISTORY_WINDOW)),
            ("consts.GP_MAX_FIT_TRIALS", json!(GP_MAX_FIT_TRIALS)),
            ("defaults.gpu.headroom", json!(gpu.headroom)),
            ("defaults.gpu.trial_memory", json!(gpu.trial_memory)),
            (
                "defaults.gpu.max_par_per_device",
                json!(gpu.max_par_per_device),
            ),
            (
                "defaults.gpu.poll_interval",
                json!(gpu.poll_interval.as_secs_f64()),
            ),
            (
                "defaults.gpu.idle_worker_timeout",
                json!(gpu.idle_worker_timeout.as_secs_f64()),
            ),
            (
                "defaults.sampler.n_startup_trials",
                json!(sampler.n_startup_trials),
            ),
            (
                "defaults.sampler.n_ei_candidates",
                json!(sampler.n_ei_candidates),
            ),
            (
                "defaults.sampler.population_size",
                json!(sampler.population_size),
            ),
            (
                "defaults.sampler.crossover_prob",
                json!(sampler.crossover_prob),
            ),
            (
                "defaults.sampler.swapping_prob",
                json!(sampler.swapping_prob),
            ),
        ] {
            assert_eq!(at(&printed, name), &want, "{name} in {printed:#}");
        }
    }
}
