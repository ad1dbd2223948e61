//! Text shared by several commands: `--json` as it is printed, the trials table (`trials`,
//! `best`), the GPU table (`gpus`, `status`), a study's objectives. Each table is built as a
//! string, so that what a person reads is tested without a database.

use super::csv;
use crate::store::{GpuRow, Study, TrialView};
use crate::units;
use serde_json::Value;
use std::fmt::Write;

/// `--json`: pretty-printed, one document.
pub(super) fn print_json(v: &impl serde::Serialize) {
    println!("{}", serde_json::to_string_pretty(v).expect("serializable"));
}

/// "loss MINIMIZE, latency_ms MAXIMIZE".
pub(super) fn objectives_text(study: &Study) -> String {
    study
        .directions
        .iter()
        .enumerate()
        .map(|(i, d)| format!("{} {}", study.objective_name(i), d.as_optuna()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A trial's value, or its values as `[a, b]` in a study with several objectives.
fn values_text(t: &TrialView) -> String {
    match &t.values {
        Some(Value::Array(vs)) => format!(
            "[{}]",
            vs.iter()
                .map(csv::value_text)
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Some(_) => String::new(),
        None => csv::value_text(&t.value),
    }
}

/// Trials one per line (number, state, value(s), params), a failed one's reason under it.
pub(super) fn trials_table(trials: &[TrialView]) -> String {
    let column = if trials.iter().any(|t| t.values.is_some()) {
        "values"
    } else {
        "value"
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>6}  {:<8}  {:>14}  {:>9}  params",
        "number", "state", column, "duration"
    );
    for t in trials {
        let _ = writeln!(
            out,
            "{:>6}  {:<8}  {:>14}  {:>9}  {}",
            t.number,
            t.state,
            values_text(t),
            csv::duration_s(t).map_or("-".into(), |d| format!("{d:.1}s")),
            Value::Object(t.params.clone())
        );
        if let Some(step) = csv::pruned_step(t) {
            let _ = writeln!(out, "        pruned at step {step}");
        }
        if !t.user_attrs.is_empty() {
            let attrs = Value::Object(t.user_attrs.clone());
            let _ = writeln!(out, "        user attrs {attrs}");
        }
        if let Some(reason) = &t.fail_reason {
            let kind = t.fail_kind.as_deref().unwrap_or("fail");
            let _ = writeln!(out, "        {kind} {reason}");
        }
        if let Some(reason) = &t.reason {
            let _ = writeln!(out, "        {reason}");
        }
    }
    out
}

/// `head`, `sep` and `tail` on one line where they fit in [`WIDTH`]; else `tail` on lines of its own,
/// indented and wrapped at word boundaries (a word longer than a line is left whole).
fn wrapped(out: &mut String, head: &str, sep: &str, tail: &str) {
    if head.chars().count() + sep.len() + tail.chars().count() <= WIDTH {
        let _ = writeln!(out, "{head}{sep}{tail}");
        return;
    }
    let _ = writeln!(out, "{head}");
    let indent = "      ";
    let mut line = String::new();
    for word in tail.split_whitespace() {
        if !line.is_empty() && indent.len() + line.len() + 1 + word.len() > WIDTH {
            let _ = writeln!(out, "{indent}{line}");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        let _ = writeln!(out, "{indent}{line}");
    }
}

/// A MiB column's cell: whole MiB, or "-" for no reading.
fn mib(v: Option<u64>) -> String {
    v.map_or("-".into(), |b| units::whole_mib(b).to_string())
}

/// The GPUs as the daemon last read them: one line per device, the next trial's expected peak
/// in words (the same for every device, said once), and when they were read.
/// The widest line `gpus` writes (a wait longer than its room wraps onto lines of its own).
const WIDTH: usize = 100;
/// The name column: a longer card name goes on a line of its own, whole.
const NAME: usize = 22;

/// `gpus`'s table; `runs(host)`: whether that host's daemon runs (a row of one that does not
/// is its last reading, and nothing of it runs or waits).
pub(super) fn gpus_table(rows: &[GpuRow], runs: impl Fn(&str) -> bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:>4}  {:<NAME$} {:>9} {:>9} {:>9} {:>5} {:>7} {:>4}  {:>10}  wait",
        "gpu", "name", "total MiB", "free MiB", "used MiB", "util", "running", "PAR", "next trial"
    );
    for r in rows {
        let name = r.name.as_deref().unwrap_or("-");
        let live = runs(&r.host);
        let (device, name) = if name.chars().count() > NAME {
            let _ = writeln!(out, "{:>4}  {name}", r.device);
            (String::new(), "")
        } else {
            (r.device.to_string(), name)
        };
        let dash = |v: String| if live { v } else { "-".to_owned() };
        let figures = format!(
            "{device:>4}  {name:<NAME$} {:>9} {:>9} {:>9} {:>5} {:>7} {:>4}  {:>10}",
            mib(r.total),
            mib(r.free),
            mib(r.used),
            r.util_gpu.map_or("-".into(), |u| format!("{u}%")),
            dash(r.running.to_string()),
            dash(r.par_estimate.map_or("-".into(), |p| p.to_string())),
            dash(r.expected_peak.map_or("-".into(), units::format_mib)),
        );
        let wait = match (&r.error, live) {
            (_, false) => "its daemon does not run: the last reading".to_owned(),
            (Some(e), true) => format!("NVML error: {e}"),
            (None, true) => r.wait.clone().unwrap_or_else(|| "admits".into()),
        };
        wrapped(&mut out, &figures, "  ", &wait);
    }
    if let Some(why) = rows.iter().find_map(|r| r.expected_why.as_deref()) {
        wrapped(&mut out, "next trial's expected peak:", " ", why);
    }
    // Said where it is not NVML's list of processes (`gpu::source`).
    let by_nvml = crate::gpu::source::Source::Processes.to_string();
    for r in rows {
        if let Some(s) = r.source.as_deref().filter(|s| *s != by_nvml) {
            wrapped(&mut out, &format!("gpu {}:", r.device), " ", s);
        }
    }
    if let Some(r) = rows.first() {
        let _ = writeln!(out, "(read at {})", r.updated_at);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn trial(number: i64, state: &str, value: Value, values: Option<Value>) -> TrialView {
        TrialView {
            trial_id: number + 1,
            number,
            state: state.into(),
            value,
            values,
            params: json!({"x": 1.5, "opt": "adam"})
                .as_object()
                .unwrap()
                .clone(),
            ..TrialView::default()
        }
    }

    #[test]
    fn the_trials_table_has_a_value_column_and_a_failed_trial_s_reason_under_it() {
        let failed = TrialView {
            fail_kind: Some("exit".into()),
            fail_reason: Some("exit code 1".into()),
            ..trial(1, "FAIL", Value::Null, None)
        };
        let complete = TrialView {
            datetime_start: Some("2026-01-01 10:00:00.000000".into()),
            datetime_complete: Some("2026-01-01 10:00:01.500000".into()),
            ..trial(0, "COMPLETE", json!(0.25), None)
        };
        let pruned = TrialView {
            step: Some(3),
            user_attrs: json!({"note": "n4"}).as_object().unwrap().clone(),
            ..trial(2, "PRUNED", Value::Null, None)
        };
        let text = trials_table(&[complete, failed, pruned]);
        assert_eq!(
            text,
            "number  state              value   duration  params\n     \
             0  COMPLETE            0.25       1.5s  {\"x\":1.5,\"opt\":\"adam\"}\n     \
             1  FAIL                              -  {\"x\":1.5,\"opt\":\"adam\"}\n        \
             exit exit code 1\n     \
             2  PRUNED                            -  {\"x\":1.5,\"opt\":\"adam\"}\n        \
             pruned at step 3\n        \
             user attrs {\"note\":\"n4\"}\n"
        );
    }

    #[test]
    fn the_trials_table_of_several_objectives_shows_each_trial_s_values() {
        let t = trial(3, "COMPLETE", Value::Null, Some(json!([0.5, "inf"])));
        let text = trials_table(&[t]);
        assert!(
            text.starts_with("number  state             values   duration  params\n"),
            "{text}"
        );
        assert!(
            text.contains("  COMPLETE      [0.5, inf]          -  {"),
            "{text}"
        );
    }

    #[test]
    fn the_gpu_table_shows_mib_the_wait_or_the_nvml_error_and_the_estimate_once() {
        let read = GpuRow {
            device: 0,
            name: Some("NVIDIA H100 80GB HBM3 with a long name".into()),
            total: Some(80 << 30),
            free: Some((40 << 30) + 5),
            used: Some(40 << 30),
            util_gpu: Some(87),
            running: 2,
            par_estimate: Some(3),
            expected_peak: Some(6 << 30),
            wait: Some("memory: needs 6.0 GiB".into()),
            expected_why: Some("prior 6.0 GiB × 1.15".into()),
            updated_at: "2026-12-01 21:40:00".into(),
            ..GpuRow::default()
        };
        let broken = GpuRow {
            device: 1,
            error: Some("Unknown Error".into()),
            expected_why: Some("said once".into()),
            ..GpuRow::default()
        };
        let idle = GpuRow {
            device: 2,
            ..GpuRow::default()
        };
        let stopped = GpuRow {
            host: "gone".into(),
            device: 3,
            running: 1,
            par_estimate: Some(1),
            ..GpuRow::default()
        };
        let text = gpus_table(&[read, broken, idle, stopped], |h| h != "gone");
        let lines: Vec<&str> = text.lines().collect();
        let expected = [
            " gpu  name                   total MiB  free MiB  used MiB  util running  PAR  next trial  wait",
            "   0  NVIDIA H100 80GB HBM3 with a long name",
            "                                 81920     40960     40960   87%       2    3    6144 MiB",
            "      memory: needs 6.0 GiB",
            "   1  -                              -         -         -     -       0    -           -",
            "      NVML error: Unknown Error",
            "   2  -                              -         -         -     -       0    -           -  admits",
            "   3  -                              -         -         -     -       -    -           -",
            "      its daemon does not run: the last reading",
            "next trial's expected peak: prior 6.0 GiB × 1.15",
            "(read at 2026-12-01 21:40:00)",
        ];
        assert_eq!(lines, expected);
        assert!(lines.iter().all(|l| l.chars().count() <= WIDTH));
    }

    #[test]
    fn the_gpu_table_says_where_memory_per_trial_comes_from_where_it_is_not_nvmls_processes() {
        use crate::gpu::source::{Blind, Source};
        let row = |device: u32, source: Source| GpuRow {
            device,
            source: Some(source.to_string()),
            ..GpuRow::default()
        };
        let text = gpus_table(
            &[
                row(0, Source::Processes),
                row(1, Source::Frameworks(Blind::NoProcessOfOurs)),
            ],
            |_| true,
        );
        let said = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            said.contains(
                "gpu 1: memory from the workers' frameworks: NVML lists no process of ours \
                 (container PID namespace?)"
            ),
            "{text}"
        );
        assert!(!text.contains("gpu 0:"), "{text}");
        assert!(text.lines().all(|l| l.chars().count() <= WIDTH), "{text}");
    }

    #[test]
    fn objectives_are_named_with_their_directions() {
        use crate::study::Direction;
        let study = Study {
            id: 1,
            name: "s".into(),
            directions: vec![Direction::Minimize, Direction::Maximize],
            metric_names: Some(vec!["loss".into(), "fps".into()]),
        };
        assert_eq!(objectives_text(&study), "loss MINIMIZE, fps MAXIMIZE");
        let unnamed = Study {
            metric_names: None,
            ..study
        };
        assert_eq!(
            objectives_text(&unnamed),
            "values_0 MINIMIZE, values_1 MAXIMIZE"
        );
    }
}
