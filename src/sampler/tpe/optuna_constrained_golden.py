#!/usr/bin/env python3
"""What Optuna 5.0's TPE puts "below" in a study whose objective sets constraints, for the test
in ``split.rs`` to compare sweepd's split with.

Run with the test venv's Python and write the result next to this script::

    .venv/bin/python src/sampler/tpe/optuna_constrained_golden.py \
        > src/sampler/tpe/optuna_constrained_golden.json

Each case is a study of COMPLETE and PRUNED trials (pruned ones all at the same step: sweepd
ranks pruned trials by value alone, a documented difference) whose constraints were set as
``trial.set_constraint`` sets them (the ``constraints:<key>`` system attributes, two keys, some
trials violating one or both; in four cases nearly all), minimized or maximized. Optuna's ``_split_trials`` is called
with ``n_below`` = its ``default_gamma`` of the trial count, as ``TPESampler`` calls it; the
case records every trial and the numbers Optuna put below.
"""

import json
import math
import random
import sys
import warnings

import optuna
from optuna.samplers._tpe.sampler import _split_trials, default_gamma
from optuna.trial import TrialState, create_trial

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.simplefilter("ignore")


def case(seed):
    rng = random.Random(seed)
    direction = "minimize" if seed % 2 == 0 else "maximize"
    study = optuna.create_study(direction=direction)
    n = rng.randint(8, 80)
    trials = []
    for number in range(n):
        pruned = rng.random() < 0.25
        cons = {}
        for key in ("a", "b"):
            # About a third of the trials violate each; in the last cases nearly all do, so
            # that pruned and infeasible trials (by total violation) fill "below".
            low = -1.0 if seed < 8 else -0.05
            cons[key] = round(rng.uniform(low, 0.5 if seed < 8 else 1.0), 4)
        value = round(rng.uniform(-10.0, 10.0), 4)
        system_attrs = {"constraints:" + k: v for k, v in cons.items()}
        if pruned:
            t = create_trial(state=TrialState.PRUNED, intermediate_values={5: value},
                             system_attrs=system_attrs)
        else:
            t = create_trial(state=TrialState.COMPLETE, value=value, system_attrs=system_attrs)
        study.add_trial(t)
        trials.append({"number": number, "state": "PRUNED" if pruned else "COMPLETE",
                       "value": value, "constraints": cons})
    frozen = study.get_trials(deepcopy=False)
    assert all(t.constraints == trials[t.number]["constraints"] for t in frozen)
    below, _ = _split_trials(study, frozen, default_gamma(len(frozen)))
    return {"direction": direction, "trials": trials,
            "below": sorted(t.number for t in below)}


def main():
    cases = [case(seed) for seed in range(12)]
    json.dump({"optuna": optuna.__version__, "cases": cases}, sys.stdout, indent=None)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
