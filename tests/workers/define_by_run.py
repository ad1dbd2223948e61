#!/usr/bin/env python3
"""Objectives written exactly as for Optuna, for sweepd's define-by-run tests.

Run as a sweepd worker (persistent or oneshot), it serves the objective named by
SWEEPD_TEST_OBJECTIVE (default "models") with ``sweepd_worker.serve``, each trial
first passing the files of SWEEPD_TEST_OPEN / SWEEPD_TEST_GATE (see gate.py); imported,
it is what tests/py/optuna_replay.py hands to Optuna's own ``study.optimize``
with the same params enqueued. Every value is a function of the params alone, so
the two runs must record the same trials.

Objectives:
  models     a branch per model, each with its own params (svc / forest / mlp);
             the mlp takes n_layers, then one n_units_l{i} per layer; then a shared
             lr, asked for twice; user attrs; a report per step; pruned by the
             objective itself when a step's value is too high, and in trials
             3, 8, 13, ... (so that every run has pruned trials).
  conflict   "x" suggested as a float in even trials and as something else in odd
             ones (trial.number % 6 picks what): Optuna refuses the conflicts.
"""

import math
import os
import sys

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

try:
    import optuna

    TrialPruned = optuna.TrialPruned
except ImportError:  # the helper understands any exception class named TrialPruned
    import sweepd_worker

    TrialPruned = sweepd_worker.TrialPruned


def models(trial):
    model = trial.suggest_categorical("model", ["svc", "forest", "mlp"])
    if model == "svc":
        c = trial.suggest_float("svc_c", 1e-3, 1e3, log=True)
        kernel = trial.suggest_categorical("svc_kernel", ["rbf", "linear", None])
        score = abs(math.log10(c) - 1.0) + (0.5 if kernel == "linear" else 0.0)
    elif model == "forest":
        depth = trial.suggest_int("rf_max_depth", 2, 32, log=True)
        n_estimators = trial.suggest_int("rf_n_estimators", 10, 200, step=10)
        score = abs(depth - 8) / 8.0 + n_estimators / 1000.0
    else:
        n_layers = trial.suggest_int("n_layers", 1, 3)
        units = [trial.suggest_int("n_units_l%d" % i, 4, 128, log=True) for i in range(n_layers)]
        dropout = trial.suggest_float("dropout", 0.0, 0.5, step=0.1)
        score = sum(abs(math.log2(u) - 5.0) for u in units) / n_layers + dropout
    lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
    # The same name again (another range, even): Optuna keeps the first value.
    if trial.suggest_float("lr", 1e-4, 1e-2, log=True) != lr:
        raise AssertionError("a repeated suggest returned another value")
    trial.set_user_attr("model", model)
    trial.set_user_attr("config", {"lr": lr, "tags": [model, 1, None, True, 0.1]})
    value = score
    for step in range(4):
        value = score + abs(math.log10(lr) + 3.0) / (step + 1)
        trial.report(value, step)
        if step == 2 and (value > 4.0 or trial.number % 5 == 3):
            raise TrialPruned()
    return value


def conflict(trial):
    kind = trial.number % 6
    if kind in (0, 2, 4):
        x = trial.suggest_float("x", 0.0, 1.0)
    elif kind == 1:
        x = trial.suggest_int("x", 0, 10)  # another kind
    elif kind == 3:
        x = trial.suggest_float("x", 0.1, 1.0, log=True)  # another log
    else:
        x = trial.suggest_float("x", 0.0, 2.0)  # another range: allowed
    c = trial.suggest_categorical("c", ["a", "b"] if kind != 5 else ["a", "b", "c"])
    return float(x) + (0.0 if c == "a" else 1.0)


OBJECTIVES = {"models": models, "conflict": conflict}


if __name__ == "__main__":
    import gate
    import sweepd_worker

    objective = OBJECTIVES[os.environ.get("SWEEPD_TEST_OBJECTIVE", "models")]

    def gated(trial):
        # Only as a worker: Optuna's replay of the same objective has no gate to pass.
        gate.pass_gate()
        return objective(trial)

    sweepd_worker.serve(gated)
