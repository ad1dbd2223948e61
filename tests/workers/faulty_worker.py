#!/usr/bin/env python3
"""A sweepd test worker whose misbehaviour is chosen by environment variables.

All are optional; N is a trial *number*.

SWEEPD_TEST_SLEEP=S       seconds per trial (default 0.02)
SWEEPD_TEST_CHATTY=1      every trial prints 2000 lines to stdout and 2000 to
                          stderr (some looking like protocol messages) and
                          200 KB without a newline to stdout, then goes on
SWEEPD_TEST_EXIT_ON=N     os._exit(3) in the middle of trial N (after one report)
SWEEPD_TEST_GARBAGE_ON=N  during trial N, write "this is not json\\n" straight
                          onto the protocol channel, then go on normally
SWEEPD_TEST_HANG_ON=N     sleep forever in trial N
SWEEPD_TEST_CLOSE_ON=N    close the protocol channel in trial N, then sleep forever
SWEEPD_TEST_RAISE_ON=N    raise ValueError("rejected param in trial N") in trial N
SWEEPD_TEST_NAN_ON=N      return float("nan") from trial N
SWEEPD_TEST_FORK=1        every trial forks a child that ignores SIGTERM and
                          sleeps 3600 s (to test process-group kills)
SWEEPD_TEST_RECORD=PATH   append "pid trial_number" to PATH for every trial
SWEEPD_TEST_TARGET_X=T    the term of param x is (x - T)^2 instead of x^2
SWEEPD_TEST_OFFSET=V      V is added to every value (and so to every report)
SWEEPD_TEST_GATE=PATH     every trial waits until PATH exists, then runs
SWEEPD_TEST_OPEN=PATH     every trial creates PATH as it starts (see gate.py)

The value is the sum of squares of the numeric params plus len(str(p)) for
every other param; the trial reports 3 steps (the last one is the value).
"""

import os
import signal
import sys
import time

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import sweepd_worker  # noqa: E402

import gate  # noqa: E402

# Read before serve(), which removes SWEEPD_FD from the environment.
CHANNEL_FD = os.environ.get("SWEEPD_FD")

STEPS = 3


def _env_number(name):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    return int(raw)


SLEEP = float(os.environ.get("SWEEPD_TEST_SLEEP") or 0.02)
CHATTY = os.environ.get("SWEEPD_TEST_CHATTY") == "1"
FORK = os.environ.get("SWEEPD_TEST_FORK") == "1"
RECORD = os.environ.get("SWEEPD_TEST_RECORD")
EXIT_ON = _env_number("SWEEPD_TEST_EXIT_ON")
GARBAGE_ON = _env_number("SWEEPD_TEST_GARBAGE_ON")
HANG_ON = _env_number("SWEEPD_TEST_HANG_ON")
CLOSE_ON = _env_number("SWEEPD_TEST_CLOSE_ON")
RAISE_ON = _env_number("SWEEPD_TEST_RAISE_ON")
NAN_ON = _env_number("SWEEPD_TEST_NAN_ON")
TARGET_X = float(os.environ.get("SWEEPD_TEST_TARGET_X") or 0.0)
OFFSET = float(os.environ.get("SWEEPD_TEST_OFFSET") or 0.0)


def value_of(params):
    total = OFFSET
    for name, value in params.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if name == "x":
                value = value - TARGET_X
            total += float(value) ** 2
        else:
            total += len(str(value))
    return total


def chatter(number):
    fake = '{"type":"result","trial_id":0,"value":-1e9}'
    for i in range(2000):
        if i % 100 == 0:
            print(fake)
            sys.stderr.write(fake + "\n")
        else:
            print("trial %d stdout line %d" % (number, i))
            sys.stderr.write("trial %d stderr line %d\n" % (number, i))
    sys.stdout.write("x" * (200 * 1024))
    sys.stdout.flush()
    sys.stderr.flush()


def fork_sleeper():
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(3600)
        finally:
            os._exit(0)


def objective(trial):
    number = trial.number
    if RECORD:
        fd = os.open(RECORD, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, ("%d %s\n" % (os.getpid(), number)).encode())
        finally:
            os.close(fd)
    gate.pass_gate()
    if FORK:
        fork_sleeper()
    if CHATTY:
        chatter(number)
    if number == HANG_ON:
        while True:
            time.sleep(3600)
    if number == CLOSE_ON and CHANNEL_FD is not None:
        # Only in the first attempt: the retry of this trial gets a new number.
        os.close(int(CHANNEL_FD))
        while True:
            time.sleep(3600)

    value = value_of(trial.params)
    for step in range(STEPS):
        time.sleep(SLEEP / STEPS)
        trial.report(value + (STEPS - 1 - step), step)
        if step == 0:
            if number == EXIT_ON:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(3)
            if number == GARBAGE_ON and CHANNEL_FD is not None:
                os.write(int(CHANNEL_FD), b"this is not json\n")
            if number == RAISE_ON:
                raise ValueError("rejected param in trial %s" % (number,))
        if trial.should_prune():
            raise sweepd_worker.TrialPruned()
    if number == NAN_ON:
        return float("nan")
    return value


if __name__ == "__main__":
    sweepd_worker.serve(objective)
