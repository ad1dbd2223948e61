#!/usr/bin/env python3
"""What Optuna 5.0's multi-objective TPE does, for the tests in ``multi.rs`` to compare with.

Run with the test venv's Python and write the result next to this script::

    .venv/bin/python src/sampler/tpe/optuna_multi_golden.py > src/sampler/tpe/optuna_multi_golden.json

Two kinds of case:

- ``split``: loss rows (several objectives, values on a coarse grid so that ties, copies and
  whole ranks that do not fit are common; some infinite) and ``n_below``, with the rows that
  Optuna's ``_split_complete_trials_multi_objective`` puts below (indices, in row order).
- ``acquisition``: a study of several objectives (COMPLETE trials, some infeasible by a
  constraint) and a few points; per param, what Optuna's independent TPE (the default with
  several objectives) scores each point by: ``log l(x)`` and ``log g(x)`` of the estimators
  ``TPESampler._sample`` builds for that param (the split of ``_split_trials`` with
  ``gamma(n) = ceil(0.1 n)``, below weighted uniformly, above with the fading weights).

NumPy's ``argsort`` is made stable while this runs, as for the Parzen estimator's golden
values in ``parzen.rs``: the kernels of equal observations get their bandwidths in the order the
sort leaves them, which NumPy's default sort leaves arbitrary and sweepd takes as trial order;
with the fading weights that order changes ``g(x)`` of a param with few values.
"""

import json
import math
import random
import sys
import warnings

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers._tpe.sampler import (
    _split_complete_trials_multi_objective,
    _split_trials,
    default_gamma_multiobjective,
)
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial

_argsort = np.argsort


def _stable_argsort(a, *args, **kwargs):
    kwargs["kind"] = "stable"
    return _argsort(a, *args, **kwargs)


np.argsort = _stable_argsort
optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.simplefilter("ignore")

SPACE = {
    "x": FloatDistribution(0.0, 1.0),
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "n": IntDistribution(1, 9, step=2),
    "s": FloatDistribution(0.0, 1.0, step=0.25),
    "c": CategoricalDistribution(["a", "b", "c"]),
}


def external(params):
    return {k: (SPACE[k].choices.index(v) if k == "c" else v) for k, v in params.items()}


def random_params(rng):
    return {
        "x": rng.random(),
        "lr": math.exp(rng.uniform(math.log(1e-4), math.log(1e-1))),
        "n": rng.choice([1, 3, 5, 7, 9]),
        "s": rng.choice([0.0, 0.25, 0.5, 0.75, 1.0]),
        "c": rng.choice(["a", "b", "c"]),
    }


class _Study:
    """What `_split_complete_trials_multi_objective` reads of a study."""

    def __init__(self, m):
        self.directions = [StudyDirection.MINIMIZE] * m


def split_case(rng, n, m, n_below, infinite):
    rows = [[float(rng.randint(0, 5)) for _ in range(m)] for _ in range(n)]
    if infinite:
        rows[rng.randrange(n)][rng.randrange(m)] = math.inf
    trials = [create_trial(state=TrialState.COMPLETE, values=r) for r in rows]
    for i, t in enumerate(trials):
        t.number = i
    below, _ = _split_complete_trials_multi_objective(trials, _Study(m), n_below)
    return {"rows": [["inf" if math.isinf(v) else v for v in r] for r in rows],
            "n_below": n_below, "below": sorted(t.number for t in below)}


def acquisition_case(seed, n, directions):
    rng = random.Random(seed)
    sampler = optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(directions=directions, sampler=sampler)
    trials = []
    for _ in range(n):
        p = random_params(rng)
        g = 1 + abs(math.log10(p["lr"]) + 2) + abs(p["n"] - 5) / 4 + "abc".index(p["c"]) * 0.3
        values = [p["x"] * g, (1 - p["x"]) * g, p["s"] + g][: len(directions)]
        # Round some values so that ranks hold ties; flip a maximized one.
        values = [round(v, 1) if rng.random() < 0.3 else v for v in values]
        values = [-v if d == "maximize" else v for v, d in zip(values, directions)]
        constraints = [p["s"] - 0.8] if rng.random() < 0.5 else []
        attrs = {"constraints:k0": constraints[0]} if constraints else {}
        study.add_trial(create_trial(state=TrialState.COMPLETE, params=p, distributions=SPACE,
                                     values=values, system_attrs=attrs))
        trials.append({"params": external(p), "values": values, "constraints": constraints})
    points = [random_params(rng) for _ in range(6)]
    all_trials = study._get_trials(deepcopy=False,
                                   states=[TrialState.COMPLETE, TrialState.PRUNED])
    n_counted = len(all_trials)
    below, above = _split_trials(study, all_trials, default_gamma_multiobjective(n_counted))
    scores = {}
    for name, dist in SPACE.items():
        space = {name: dist}
        l = sampler._build_parzen_estimator(study, space, below, handle_below=True)
        g = sampler._build_parzen_estimator(study, space, above, handle_below=False)
        xs = {name: np.array([dist.to_internal_repr(p[name]) for p in points])}
        scores[name] = {"below": l.log_pdf(xs).tolist(), "above": g.log_pdf(xs).tolist()}
    return {"seed": seed, "directions": directions, "trials": trials,
            "points": [external(p) for p in points],
            "below": sorted(t.number for t in below), "scores": scores}


def main():
    rng = random.Random(0)
    splits = []
    for _ in range(120):
        m = rng.choice([2, 2, 3])
        n = rng.randint(2, 40)
        n_below = rng.choice([1, default_gamma_multiobjective(n), rng.randint(1, n)])
        splits.append(split_case(rng, n, m, n_below, infinite=rng.random() < 0.2))
    golden = {
        "optuna": optuna.__version__,
        "split": splits,
        "acquisition": [
            acquisition_case(1, 40, ["minimize", "maximize"]),
            acquisition_case(2, 300, ["minimize", "minimize"]),
            acquisition_case(3, 60, ["minimize", "maximize", "minimize"]),
        ],
    }
    json.dump(golden, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
