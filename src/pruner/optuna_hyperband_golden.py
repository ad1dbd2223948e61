#!/usr/bin/env python3
"""What Optuna 5.0's ``HyperbandPruner`` does, for ``src/pruner/golden.rs`` to compare sweepd's
with.

Run with the test venv's Python and write the result next to this script::

    .venv/bin/python src/pruner/optuna_hyperband_golden.py > src/pruner/optuna_hyperband_golden.json

Three kinds of case:

- ``brackets``: the number of brackets and each bracket's trial allocation budget Optuna derives
  from (min_resource, max_resource, reduction_factor), over ratios near powers of the factor
  (where the floating-point logarithm lands either side of an integer), and the bracket Optuna
  assigns trial numbers 0..N of a study name to (crc32 of ``"{study_name}_{number}"``).
- ``studies``: whole studies run by Optuna (ask/tell, in-memory storage), several trials running
  at once and reporting in an interleaved order (every step, or with gaps, NaN now and then,
  some trials failing), ``trial.report`` then ``trial.should_prune`` for each report. Every
  event (``["s", number]`` a trial started, ``["r", number, step, value, pruned]`` a report and
  Optuna's answer, ``["f", number, state]`` a trial told), is recorded: sweepd's pruner, told
  the same events in the same order, must answer the same at every step. Each trial's bracket (as Optuna
  assigns it once it has its brackets) is recorded too.
- ``sampler_view``: how many trials Optuna 5.0's ``TPESampler`` reads when the pruner is a
  ``HyperbandPruner``, against how many the study holds and how many are in the trial's own
  bracket. (The sampler is handed the bracket's ``_BracketStudy``, but that filters
  ``get_trials`` only, and TPE reads ``_get_trials``: it sees every trial.)

A NaN value is written as the string ``"nan"`` (JSON has no NaN).
"""

import binascii
import json
import math
import random
import sys
import warnings

import optuna
from optuna.pruners import HyperbandPruner
from optuna.samplers import TPESampler
from optuna.trial import TrialState

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.simplefilter("ignore")


def enc(v):
    return "nan" if isinstance(v, float) and math.isnan(v) else v


class _Numbered:
    """What ``_get_bracket_id`` reads of a trial: its number."""

    def __init__(self, number):
        self.number = number


def brackets_case(min_resource, max_resource, reduction_factor, names, n):
    pruner = HyperbandPruner(min_resource=min_resource, max_resource=max_resource,
                             reduction_factor=reduction_factor)
    out = {"min_resource": min_resource, "max_resource": max_resource,
           "reduction_factor": reduction_factor}
    study = optuna.create_study(study_name="x")
    pruner._try_initialization(study)
    out["n_brackets"] = pruner._n_brackets
    out["budgets"] = pruner._trial_allocation_budgets
    out["ids"] = {}
    if pruner._pruners:
        for name in names:
            study = optuna.create_study(study_name=name)
            out["ids"][name] = [pruner._get_bracket_id(study, _Numbered(k)) for k in range(n)]
    return out


def brackets_cases():
    names = ["hb", "study", "my-study_2", "étude-研究", ""]
    cases = [brackets_case(1, 27, 3, names, 300), brackets_case(1, 81, 3, names, 300),
             brackets_case(2, 100, 2, names, 300), brackets_case(3, 300, 4, names, 300),
             brackets_case(1, 1, 3, names, 50), brackets_case(5, 2, 3, names, 50)]
    # The number of brackets and the budgets near powers of the factor, no ids.
    for rf in range(2, 11):
        for mn in (1, 3):
            for k in range(0, 12):
                for d in (-1, 0, 1):
                    mx = mn * rf ** k + d
                    if mx >= 1 and mx < 2 ** 40:
                        cases.append(brackets_case(mn, mx, rf, [], 0))
    return cases


def curve(rng, steps):
    """A noisy decreasing curve with a trial-specific floor and speed, NaN now and then."""
    floor, speed = rng.uniform(0.0, 1.0), rng.uniform(0.05, 1.0)
    out = []
    for s in range(steps):
        v = round(floor + math.exp(-speed * s) + rng.gauss(0, 0.02), 4)
        out.append(float("nan") if rng.random() < 0.01 else v)
    return out


def study_case(name, seed, n_trials, par, steps, pruner_kw, direction="minimize", gaps=False,
               fail_p=0.0, varying_length=False):
    rng = random.Random(seed)
    pruner = HyperbandPruner(**pruner_kw)
    study = optuna.create_study(study_name=name, direction=direction, pruner=pruner,
                                sampler=optuna.samplers.RandomSampler(seed=seed))
    events = []
    running = []  # [trial, curve, next index into its steps, steps it reports at]
    started = 0
    while started < n_trials or running:
        while len(running) < par and started < n_trials:
            t = study.ask()
            n = steps if not varying_length else rng.randint(steps // 2, steps)
            at = sorted(rng.sample(range(n), max(1, n // 3))) if gaps else list(range(n))
            if gaps and at[-1] != n - 1:
                at.append(n - 1)
            c = curve(rng, n)
            if direction == "maximize":
                c = [-v for v in c]
            running.append([t, c, 0, at])
            started += 1
            events.append(["s", t.number])
        i = rng.randrange(len(running))
        t, c, k, at = running[i]
        step = at[k]
        value = c[step]
        t.report(value, step)
        prune = t.should_prune()
        events.append(["r", t.number, step, enc(value), int(prune)])
        running[i][2] += 1
        if prune:
            study.tell(t, state=TrialState.PRUNED)
            events.append(["f", t.number, "PRUNED"])
            running.pop(i)
        elif running[i][2] == len(at):
            study.tell(t, value if not math.isnan(value) else 1e9)
            events.append(["f", t.number, "COMPLETE"])
            running.pop(i)
        elif rng.random() < fail_p:
            study.tell(t, state=TrialState.FAIL)
            events.append(["f", t.number, "FAIL"])
            running.pop(i)
    out = dict(pruner_kw, name=name, direction=direction, events=events)
    out["max_resource_given"] = pruner_kw.get("max_resource", "auto")
    # As the pruner settled it ("auto" until it could).
    out["max_resource"] = pruner._max_resource
    out["n_brackets"] = pruner._n_brackets
    out["brackets"] = ([pruner._get_bracket_id(study, t) for t in study.trials]
                       if pruner._pruners else [])
    return out


def studies():
    return [
        study_case("hb-fixed", 1, 100, 4, 27, dict(min_resource=1, max_resource=27,
                                                   reduction_factor=3)),
        study_case("hb-auto", 2, 100, 4, 30, dict(min_resource=1, reduction_factor=3)),
        study_case("hb-auto-many-first", 3, 80, 8, 20, dict(min_resource=1, reduction_factor=2)),
        study_case("hb-gaps", 4, 100, 3, 100, dict(min_resource=3, max_resource=100,
                                                   reduction_factor=4), gaps=True),
        study_case("hb-bootstrap", 5, 100, 4, 40, dict(min_resource=2, max_resource=40,
                                                       reduction_factor=2, bootstrap_count=2)),
        study_case("hb-max", 6, 100, 4, 27, dict(min_resource=1, max_resource=27,
                                                 reduction_factor=3), direction="maximize"),
        study_case("hb-fail", 7, 100, 5, 27, dict(min_resource=1, max_resource=27,
                                                  reduction_factor=3), fail_p=0.03),
        study_case("hb-auto-varying", 8, 100, 4, 40, dict(min_resource=1, reduction_factor=3),
                   varying_length=True, gaps=True),
        study_case("hb-auto-below-min", 9, 20, 2, 4, dict(min_resource=10, reduction_factor=3)),
        study_case("hb-étude", 10, 60, 3, 9, dict(min_resource=1, max_resource=9,
                                                  reduction_factor=3)),
    ]


def sampler_view():
    seen = []
    original = TPESampler._sample

    def spy(self, study, trial, search_space):
        all_trials = study._storage.get_all_trials(study._study_id, deepcopy=False)
        seen.append({"number": trial.number,
                     "sampler_reads": len(study._get_trials(deepcopy=False, use_cache=True)),
                     "study_holds": len(all_trials),
                     "own_bracket": len(study.get_trials(deepcopy=False))})
        return original(self, study, trial, search_space)

    TPESampler._sample = spy
    try:
        pruner = HyperbandPruner(min_resource=1, max_resource=27, reduction_factor=3)
        study = optuna.create_study(study_name="view", pruner=pruner,
                                    sampler=TPESampler(seed=1, n_startup_trials=3))

        def objective(t):
            x = t.suggest_float("x", 0, 1)
            for s in range(27):
                t.report(x + 1 / (s + 1), s)
                if t.should_prune():
                    raise optuna.TrialPruned()
            return x

        study.optimize(objective, n_trials=30)
    finally:
        TPESampler._sample = original
    return seen


def main():
    out = {"optuna": optuna.__version__, "crc32_check": binascii.crc32(b"123456789"),
           "brackets": brackets_cases(), "studies": studies(), "sampler_view": sampler_view()}
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
