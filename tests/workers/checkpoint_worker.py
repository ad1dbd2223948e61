"""A training loop that resumes from its checkpoint (tests/resume.rs).

Each step saves the step reached in `trial.checkpoint_dir`; on start it reads it back and goes
on from there. Each attempt appends one JSON line to $RESUME_LOG when it starts (its pid, the
step it starts from, what the helper says of the attempts it replaces and of the study's best
value) and one per step. A trial's value is its `x` plus the step it started from.
"""

import json
import os
import time

import sweepd_worker
from optuna.storages import RetryFailedTrialCallback

STEPS = int(os.environ.get("RESUME_STEPS", "40"))


def log(line):
    with open(os.environ["RESUME_LOG"], "a") as f:
        f.write(json.dumps(line) + "\n")


def objective(trial):
    x = trial.suggest_float("x", 0.0, 1.0)
    path = os.path.join(trial.checkpoint_dir, "step")
    start = 0
    if os.path.exists(path):
        with open(path) as f:
            start = int(f.read())
    try:
        best = trial.study.best_value
    except ValueError:
        best = None
    log({"event": "start", "number": trial.number, "pid": os.getpid(), "start": start,
         "best": best,
         "retry_history": RetryFailedTrialCallback.retry_history(trial),
         "failed_trial": RetryFailedTrialCallback.retried_trial_number(trial),
         "study": trial.study.study_name, "checkpoint_dir": trial.checkpoint_dir,
         "env": os.environ.get("SWEEPD_CHECKPOINT_DIR")})
    for step in range(start, STEPS):
        time.sleep(0.05)
        with open(path + ".tmp", "w") as f:
            f.write(str(step + 1))
        os.replace(path + ".tmp", path)
        log({"event": "step", "number": trial.number, "step": step + 1})
        trial.report(x + step, step)
    return x + float(start)


if __name__ == "__main__":
    sweepd_worker.serve(objective)
