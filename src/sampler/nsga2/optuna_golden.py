#!/usr/bin/env python3
"""What Optuna 5.0's NSGA-II does, for the tests in ``tests.rs`` to compare sweepd's with.

Run with the test venv's Python and write the result next to this script::

    .venv/bin/python src/sampler/nsga2/optuna_golden.py > src/sampler/nsga2/optuna_golden.json

Two kinds of case:

- ``replay``: a whole study run by Optuna's ``NSGAIISampler`` (ask/tell, in-memory storage):
  every trial's params, values, constraints and the generation Optuna gave it, and the parent
  population Optuna chose for each generation (trial numbers). sweepd's sampler, told the same
  trials in the same order, must give every trial the same generation and every generation
  the same parents.
- ``children``: Optuna's ``NSGAIIChildGenerationStrategy`` (the defaults: uniform crossover
  0.9/0.5, mutation 1/n, no mutation operator) called ``n`` times on a fixed parent population;
  for each child, where each param came from (the index of the parent whose value it is; for
  the categorical, whose choices several parents share, the choice; ``"m"`` when the param was
  mutated, i.e. left to be drawn at random), counted, and which parents the numbers came from
  together. sweepd's children of the same parents must come from the same places as often,
  within sampling error.
"""

import json
import math
import sys
import warnings
from collections import Counter

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers._lazy_random_state import LazyRandomState
from optuna.samplers.nsgaii._child_generation_strategy import NSGAIIChildGenerationStrategy
from optuna.samplers.nsgaii._crossovers._uniform import UniformCrossover
from optuna.trial import TrialState, create_trial

optuna.logging.set_verbosity(optuna.logging.ERROR)
warnings.simplefilter("ignore")

# The space of every case, as sweepd's tests build it (`space()` in tests.rs).
SPACE = {
    "x": FloatDistribution(0.0, 1.0),
    "lr": FloatDistribution(1e-4, 1e-1, log=True),
    "n": IntDistribution(1, 9, step=2),
    "s": FloatDistribution(0.0, 1.0, step=0.25),
    "c": CategoricalDistribution(["a", "b", "c"]),
}


def external(params):
    """Params as the tests read them: numbers, a categorical as its choice's index."""
    return {k: (SPACE[k].choices.index(v) if k == "c" else v) for k, v in params.items()}


def objectives(p):
    """Two objectives (minimize, maximize) with a trade-off in x; the others add noise-free
    structure so that domination is common."""
    x, lr, n, s, c = p["x"], p["lr"], p["n"], p["s"], p["c"]
    g = 1 + abs(math.log10(lr) + 2) + abs(n - 5) / 4 + s + "abc".index(c) * 0.5
    return [x * g, (1 - x * x) / g]


def zdt2(p):
    """ZDT2's non-convex front in x, its g from the other params (minimize, maximize)."""
    g = 1 + 9 * (math.log10(p["lr"]) + 4) / 3 / 4 + (p["n"] - 1) / 8 + p["s"] + "abc".index(p["c"])
    return [p["x"], -g * (1 - (p["x"] / g) ** 2)]


def replay(seed, population, trials, constrained, objective=objectives):
    sampler = optuna.samplers.NSGAIISampler(population_size=population, seed=seed)
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=sampler)
    out = []
    for _ in range(trials):
        trial = study.ask(SPACE)
        p = trial.params
        constraints = []
        if constrained:
            # Ties in violation are common (n is an int), as are feasible trials.
            constraints = [float(p["n"] - 5), p["s"] - 0.75]
            for i, v in enumerate(constraints):
                trial.set_constraint("k%d" % i, v)
        values = objective(p)
        study.tell(trial, values)
        out.append({"params": external(p), "values": values, "constraints": constraints})
    key = "NSGAIISampler:generation"
    for t in study.trials:
        out[t.number]["generation"] = t.system_attrs[key]
    attrs = study._storage.get_study_system_attrs(study._study_id)
    number_of = {t._trial_id: t.number for t in study.trials}
    parents = {}
    for k, ids in attrs.items():
        if k.startswith("NSGAIISampler:parent:"):
            parents[k.rsplit(":", 1)[1]] = sorted(number_of[i] for i in ids)
    return {"seed": seed, "population": population, "constrained": constrained,
            "trials": out, "parents": parents}


# Parents of the `children` cases: distinct values per param, so that a child's value names
# the parent it came from. Values (minimize, maximize): 0 and 2 are on the front, 0 dominates
# 3, 1 dominates 4, ...
PARENTS = [
    ({"x": 0.1, "lr": 1e-4, "n": 1, "s": 0.0, "c": "a"}, [1.0, 5.0]),
    ({"x": 0.3, "lr": 1e-3, "n": 3, "s": 0.25, "c": "b"}, [2.0, 3.0]),
    ({"x": 0.5, "lr": 1e-2, "n": 5, "s": 0.5, "c": "c"}, [0.5, 2.0]),
    ({"x": 0.7, "lr": 3e-2, "n": 7, "s": 0.75, "c": "a"}, [4.0, 4.0]),
    ({"x": 0.9, "lr": 1e-1, "n": 9, "s": 1.0, "c": "b"}, [5.0, 1.0]),
]
# With constraints: 2 and 4 feasible, 0 and 1 violated by the same amount, 3 the most.
CONSTRAINTS = [[0.5], [0.25, 0.25], [0.0], [2.0], [-1.0]]


def source(name, value):
    """The index of the parent whose value `value` is (crossover untransforms numbers, so a
    log value comes back within rounding)."""
    for i, (p, _) in enumerate(PARENTS):
        want = p[name]
        if value == want or (not isinstance(want, str)
                             and math.isclose(value, want, rel_tol=1e-9, abs_tol=0.0)):
            return i
    raise AssertionError("%s=%r is no parent's" % (name, value))


def children(n, constrained, seed=0):
    study = optuna.create_study(directions=["minimize", "maximize"])
    parents = []
    for i, (p, v) in enumerate(PARENTS):
        attrs = {}
        if constrained:
            attrs = {"constraints:k%d" % j: c for j, c in enumerate(CONSTRAINTS[i])}
        parents.append(create_trial(state=TrialState.COMPLETE, params=p, distributions=SPACE,
                                    values=v, system_attrs=attrs))
    for i, t in enumerate(parents):
        # Trial numbers name trials in the crowding sort and nowhere here, but keep them apart.
        t.number = i
        t._trial_id = i
    strategy = NSGAIIChildGenerationStrategy(
        crossover_prob=0.9, mutation=None, mutation_prob=None, swapping_prob=0.5,
        crossover=UniformCrossover(0.5), constraints_func=None, rng=LazyRandomState(seed))
    per_param = {name: Counter() for name in SPACE}
    mutated = Counter()
    contributors = Counter()
    for _ in range(n):
        child = strategy(study, SPACE, parents)
        mutated[len(SPACE) - len(child)] += 1
        srcs = set()
        for name in SPACE:
            if name not in child:
                per_param[name]["m"] += 1
            elif name == "c":
                per_param[name][child[name]] += 1
            else:
                i = source(name, child[name])
                per_param[name][str(i)] += 1
                srcs.add(i)
        contributors[",".join(str(i) for i in sorted(srcs))] += 1
    return {
        "constrained": constrained,
        "n": n,
        "parents": [{"params": external(p), "values": v,
                     "constraints": CONSTRAINTS[i] if constrained else []}
                    for i, (p, v) in enumerate(PARENTS)],
        "per_param": {k: dict(sorted(c.items())) for k, c in per_param.items()},
        "mutated": {str(k): c for k, c in sorted(mutated.items())},
        "contributors": dict(sorted(contributors.items())),
    }


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    golden = {
        "optuna": optuna.__version__,
        "replay": [
            replay(seed=1, population=6, trials=60, constrained=False),
            replay(seed=2, population=4, trials=40, constrained=False),
            replay(seed=3, population=6, trials=60, constrained=True),
            # Larger pools, a front like the benchmark's ZDT2.
            replay(seed=4, population=20, trials=200, constrained=False, objective=zdt2),
        ],
        "children": [children(n, constrained=False), children(n, constrained=True)],
    }
    json.dump(golden, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
