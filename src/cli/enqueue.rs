//! `sweepd enqueue --param NAME=VALUE … | --file PARAMS.jsonl [--skip-if-exists]`: trials
//! with chosen params, added as Optuna's `study.enqueue_trial` adds them (a WAITING trial with
//! the `fixed_params` system attribute), each value checked against the study's space first:
//! the config's `[params]`, else the distribution the study's trials last used for the name.
//! A daemon starts WAITING trials before it samples new ones, so they run next.

use super::args::StudyArg;
use super::error::CliError;
use super::open::{open_study_to_steer, Opened};
use super::render::print_json;
use crate::store::{Enqueued, Repeats};
use crate::study::enqueue::{assignment, from_json, from_text, repeats};
use crate::study::Distribution;
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use std::path::Path;

/// The params of each trial to add, as the person wrote them.
pub(super) enum Given<'a> {
    /// `--param name=value`, repeated: one trial.
    Params(&'a [String]),
    /// `--file`: one trial per line, each a JSON object.
    File(&'a Path),
}

pub(super) async fn enqueue(
    arg: &StudyArg,
    given: Given<'_>,
    skip_if_exists: bool,
    json: bool,
) -> Result<(), CliError> {
    let raw = read(&given)?;
    let opened = open_study_to_steer(arg).await?;
    let dists = distributions(&opened, &raw).await?;
    let sets = checked(&raw, &dists).map_err(CliError::Usage)?;
    let room = budget_room(&opened, sets.len()).await?;
    let skip: Option<&Repeats> = skip_if_exists.then_some(&repeats);
    let done = opened.store.enqueue(&opened.study, &sets, skip).await?;
    let unknown: Vec<&String> = raw
        .iter()
        .flat_map(|r| r.iter().map(|(name, _)| name))
        .filter(|name| !dists.contains_key(*name))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if json {
        let trials: Vec<Value> = sets
            .iter()
            .zip(&done)
            .map(|(params, d)| match d {
                Enqueued::Added { trial_id, number } => {
                    json!({"trial": number, "trial_id": trial_id, "params": params, "state": "WAITING"})
                }
                Enqueued::Skipped { like } => json!({"skipped": true, "like": like, "params": params}),
            })
            .collect();
        print_json(
            &json!({"study": opened.study.name, "trials": trials, "unknown_params": unknown}),
        );
        return Ok(());
    }
    for (params, d) in sets.iter().zip(&done) {
        let shown = Value::Object(params.clone());
        match d {
            Enqueued::Added { number, .. } => {
                println!("enqueued trial {number} (WAITING): {shown}")
            }
            Enqueued::Skipped { like } => {
                println!("skipped {shown}: trial {like} has these params (--skip-if-exists)")
            }
        }
    }
    if done.iter().any(|d| matches!(d, Enqueued::Added { .. })) {
        println!("a daemon starts WAITING trials before it samples new ones");
    }
    for name in unknown {
        println!(
            "note: no trial of the study has used `{name}` yet: the objective's suggest checks \
             the value given"
        );
    }
    if let Some(note) = room {
        println!("note: {note}");
    }
    Ok(())
}

/// Each trial's `(name, value)` pairs as given: values from `--param` still text, from
/// `--file` JSON.
type Raw = Vec<Vec<(String, RawValue)>>;

#[derive(Debug, Clone, PartialEq)]
enum RawValue {
    Text(String),
    Json(Value),
}

fn read(given: &Given) -> Result<Raw, CliError> {
    match given {
        Given::Params(params) => {
            let mut one = Vec::new();
            for p in *params {
                let (name, value) = assignment(p).map_err(CliError::Usage)?;
                if one.iter().any(|(n, _)| n == name) {
                    return Err(CliError::Usage(format!("--param {name} is given twice")));
                }
                one.push((name.to_owned(), RawValue::Text(value.to_owned())));
            }
            Ok(vec![one])
        }
        Given::File(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::Usage(format!("--file {}: {e}", path.display())))?;
            lines(&text).map_err(|e| CliError::Usage(format!("{}:{e}", path.display())))
        }
    }
}

/// A JSON-lines file: one object per non-blank line; an error names its line.
fn lines(text: &str) -> Result<Raw, String> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(Value::Object(map)) => out.push(
                map.into_iter()
                    .map(|(k, v)| (k, RawValue::Json(v)))
                    .collect(),
            ),
            Ok(other) => {
                return Err(format!(
                    "{}: a line is one trial's params as a JSON object, not {other}",
                    i + 1
                ))
            }
            Err(e) => return Err(format!("{}: not JSON: {e}", i + 1)),
        }
    }
    if out.is_empty() {
        return Err(" no params: one JSON object per line, e.g. {\"lr\": 0.001}".to_owned());
    }
    Ok(out)
}

/// The distribution the study knows for each name given: the config's `[params]`, else the
/// one the study's trials last used.
async fn distributions(
    opened: &Opened,
    raw: &Raw,
) -> Result<BTreeMap<String, Distribution>, CliError> {
    let mut out = BTreeMap::new();
    let mut rest = Vec::new();
    for name in raw.iter().flat_map(|r| r.iter().map(|(n, _)| n)) {
        let spec = opened.config.as_ref().and_then(|c| c.space.get(name));
        match spec {
            Some(s) => {
                out.insert(name.clone(), s.dist.clone());
            }
            None if !rest.contains(name) => rest.push(name.clone()),
            None => {}
        }
    }
    out.extend(
        opened
            .store
            .latest_distributions(&opened.study, &rest)
            .await?,
    );
    Ok(out)
}

/// Each trial's params in external form, each checked against its distribution; every value
/// outside the space is named.
fn checked(
    raw: &Raw,
    dists: &BTreeMap<String, Distribution>,
) -> Result<Vec<Map<String, Value>>, String> {
    let mut sets = Vec::new();
    let mut problems = Vec::new();
    for (i, trial) in raw.iter().enumerate() {
        let mut params = Map::new();
        for (name, value) in trial {
            let dist = dists.get(name);
            let v = match value {
                RawValue::Text(t) => from_text(name, t, dist),
                RawValue::Json(j) => from_json(name, j, dist),
            };
            match v {
                Ok(v) => {
                    params.insert(name.clone(), v);
                }
                Err(e) if raw.len() > 1 => problems.push(format!("line {}: {e}", i + 1)),
                Err(e) => problems.push(e),
            }
        }
        sets.push(params);
    }
    if problems.is_empty() {
        Ok(sets)
    } else {
        Err(format!("nothing enqueued: {}", problems.join("; ")))
    }
}

/// Refuses a study whose `n_trials` is spent (an enqueued trial would never start), and notes
/// when the budget has room for fewer trials than are added. Without a config the budget is
/// unknown: nothing is said.
async fn budget_room(opened: &Opened, adding: usize) -> Result<Option<String>, CliError> {
    let Some(n) = opened.config.as_ref().and_then(|c| c.study.n_trials) else {
        return Ok(None);
    };
    let c = opened.store.counts(&opened.study).await?;
    let finished = c.finished();
    if finished >= n {
        return Err(CliError::Refused(format!(
            "study `{}` is finished: its budget n_trials = {n} is spent ({finished} trials \
             finished), so an enqueued trial would never start; raise [study] n_trials first",
            opened.study.name
        )));
    }
    let room = n - finished;
    let ahead = c.running + c.waiting;
    Ok((ahead + adding as u64 > room).then(|| {
        format!(
            "n_trials = {n} has room for {room} more trial(s), {ahead} of them running or \
             waiting already: raise [study] n_trials to run every trial enqueued"
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_params_file_is_one_json_object_per_line() {
        let raw = lines("{\"lr\": 0.001, \"opt\": \"adam\"}\n\n{\"n\": 4}\n").unwrap();
        assert_eq!(raw.len(), 2);
        assert_eq!(raw[0][0], ("lr".into(), RawValue::Json(json!(0.001))));
        assert_eq!(raw[1], [("n".into(), RawValue::Json(json!(4)))]);
        assert_eq!(
            lines("{\"lr\": 1}\n[1, 2]\n").unwrap_err(),
            "2: a line is one trial's params as a JSON object, not [1,2]"
        );
        assert!(lines("{\"lr\": \n")
            .unwrap_err()
            .starts_with("1: not JSON: "));
        assert!(lines("\n \n").unwrap_err().contains("no params"));
    }

    #[test]
    fn every_value_outside_the_space_is_named_and_nothing_is_enqueued() {
        let dists: BTreeMap<String, Distribution> = [(
            "n".to_owned(),
            Distribution::Int {
                low: 0,
                high: 10,
                step: 2,
                log: false,
            },
        )]
        .into();
        let raw = lines("{\"n\": 4, \"new\": \"x\"}\n{\"n\": 3}\n{\"n\": 12}\n").unwrap();
        assert_eq!(
            checked(&raw, &dists).unwrap_err(),
            "nothing enqueued: line 2: param `n` = 3 is outside the search space: n is an int \
             from 0 to 10, step 2; line 3: param `n` = 12 is outside the search space: n is an \
             int from 0 to 10, step 2"
        );
        let ok = checked(&lines("{\"n\": 4.0, \"new\": \"x\"}").unwrap(), &dists).unwrap();
        assert_eq!(Value::Object(ok[0].clone()), json!({"n": 4, "new": "x"}));
    }
}
