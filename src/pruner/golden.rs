//! sweepd's Hyperband against Optuna 5.0's own: `optuna_hyperband_golden.py` beside this file ran
//! Optuna's `HyperbandPruner` and wrote what it did to `optuna_hyperband_golden.json` (see the
//! script for the cases). The same brackets, the same trials in them, and the same answer to
//! every report of whole studies replayed event by event.

use super::hyperband::{bracket_budget, bracket_of, crc32, n_brackets};
use super::*;
use crate::config::MaxResource;
use serde_json::Value;

/// What Optuna 5.0's Hyperband did, written by `optuna_hyperband_golden.py` (see there).
const OPTUNA_GOLDEN: &str = include_str!("optuna_hyperband_golden.json");

fn golden() -> Value {
    serde_json::from_str(OPTUNA_GOLDEN).expect("the golden data is JSON")
}

fn int(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("an integer: {v}"))
}

#[test]
fn crc32_is_pythons_binascii_crc32() {
    let g = golden();
    assert_eq!(i64::from(crc32(b"123456789")), int(&g["crc32_check"]));
    assert_eq!(crc32(b""), 0);
}

#[test]
fn brackets_and_budgets_are_optunas() {
    let g = golden();
    let cases = g["brackets"].as_array().unwrap();
    assert!(cases.len() > 500, "{}", cases.len());
    let mut with_ids = 0;
    for c in cases {
        let (min, max) = (int(&c["min_resource"]), int(&c["max_resource"]));
        let rf = u32::try_from(int(&c["reduction_factor"])).unwrap();
        let want = int(&c["n_brackets"]).max(0) as usize;
        let n = n_brackets(min, max, rf);
        assert_eq!(n, want, "n_brackets of min {min} max {max} factor {rf}");
        let budgets: Vec<u64> = (0..n).map(|k| bracket_budget(n, k, rf)).collect();
        let want: Vec<u64> = c["budgets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap())
            .collect();
        assert_eq!(budgets, want, "budgets of min {min} max {max} factor {rf}");
        for (name, ids) in c["ids"].as_object().unwrap() {
            with_ids += 1;
            for (number, id) in ids.as_array().unwrap().iter().enumerate() {
                assert_eq!(
                    bracket_of(name, number as i64, &budgets),
                    Some(int(id) as usize),
                    "bracket of trial {number} of {name:?} (min {min} max {max} factor {rf})"
                );
            }
        }
    }
    assert!(with_ids >= 20, "{with_ids}");
}

/// One golden study's pruner, as `[pruner]` would configure it.
fn pruner_of(case: &Value) -> Pruner {
    let max_resource = match &case["max_resource_given"] {
        v if v == "auto" => MaxResource::Auto,
        v => MaxResource::Steps(int(v)),
    };
    let kind = PrunerKind::Hyperband {
        min_resource: int(&case["min_resource"]),
        max_resource,
        reduction_factor: u32::try_from(int(&case["reduction_factor"])).unwrap(),
        bootstrap_count: case["bootstrap_count"].as_u64().unwrap_or(0) as usize,
    };
    let direction = match case["direction"].as_str().unwrap() {
        "minimize" => Direction::Minimize,
        _ => Direction::Maximize,
    };
    Pruner::new(kind, direction, case["name"].as_str().unwrap())
}

fn value(v: &Value) -> f64 {
    match v {
        Value::String(s) if s == "nan" => f64::NAN,
        _ => v.as_f64().unwrap_or_else(|| panic!("a value: {v}")),
    }
}

#[test]
fn whole_studies_replayed_prune_at_the_steps_optuna_pruned() {
    let g = golden();
    let studies = g["studies"].as_array().unwrap();
    assert!(studies.len() >= 8);
    let (mut reports, mut pruned) = (0, 0);
    for case in studies {
        let name = case["name"].as_str().unwrap();
        let mut p = pruner_of(case);
        for (i, e) in case["events"].as_array().unwrap().iter().enumerate() {
            let e = e.as_array().unwrap();
            let number = int(&e[1]);
            match e[0].as_str().unwrap() {
                "s" => {}
                "r" => {
                    let (step, want) = (int(&e[2]), int(&e[4]) == 1);
                    let got = p.report(number, step, value(&e[3]));
                    assert_eq!(
                        got, want,
                        "{name}: event {i}, trial {number} at step {step}: sweepd pruned {got}, \
                         Optuna {want}"
                    );
                    reports += 1;
                    pruned += usize::from(want);
                }
                "f" => p.finish(number, e[2] == "COMPLETE"),
                other => panic!("unknown event {other}"),
            }
        }
        let Algo::Hyperband(h) = &p.algo else {
            unreachable!()
        };
        let want_n = case["n_brackets"].as_i64().map_or(0, |n| n.max(0) as usize);
        match &h.brackets {
            Some(b) => {
                assert_eq!(b.max_resource, int(&case["max_resource"]), "{name}");
                assert_eq!(b.sha.len(), want_n, "{name}");
            }
            None => assert!(case["n_brackets"].is_null(), "{name}: no brackets made"),
        }
        for (number, id) in case["brackets"].as_array().unwrap().iter().enumerate() {
            assert_eq!(
                p.bracket(number as i64),
                Some(int(id) as usize),
                "{name}: trial {number}"
            );
        }
    }
    assert!(
        reports > 5000 && pruned > 500,
        "{reports} reports, {pruned} pruned"
    );
}

#[test]
fn optunas_tpe_reads_every_trial_of_a_hyperband_study_not_its_bracket() {
    // Why sweepd's samplers are not told about brackets: Optuna 5.0's TPE, handed the
    // trial's `_BracketStudy`, still reads the whole study.
    let g = golden();
    let view = g["sampler_view"].as_array().unwrap();
    assert!(view.len() >= 20);
    for v in view {
        assert_eq!(v["sampler_reads"], v["study_holds"], "{v}");
    }
    assert!(
        view.iter()
            .any(|v| int(&v["own_bracket"]) < int(&v["study_holds"])),
        "a bracket filter would have left trials out"
    );
}
