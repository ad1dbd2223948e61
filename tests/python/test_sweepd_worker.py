"""Tests for python/sweepd_worker.py, playing the sweepd side of the protocol.

Run with:  .venv/bin/python -m unittest discover -s tests/python -v

The tests of the Optuna trial API compare with Optuna itself: they need the
venv's ``optuna`` and are skipped without it.
"""

import json
import math
import os
import random
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
import warnings

try:
    import optuna
    import optuna.distributions as optuna_distributions
except ImportError:  # the tests that compare with Optuna are skipped
    optuna = None

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PYTHON_DIR = os.path.join(ROOT, "python")
FAULTY_WORKER = os.path.join(ROOT, "tests", "workers", "faulty_worker.py")
OLD_ORDER_WORKER = os.path.join(ROOT, "tests", "workers", "old_report_order_worker.py")
QUADRATIC_WORKER = os.path.join(ROOT, "examples", "quadratic_worker.py")
ONESHOT_TRAIN = os.path.join(ROOT, "examples", "oneshot_train.py")
PROTOCOL_DOC = os.path.join(ROOT, "docs", "protocol.md")

TIMEOUT = 20.0

sys.path.insert(0, PYTHON_DIR)
import sweepd_worker  # noqa: E402


# A worker whose behaviour depends on the params it is given.
GENERIC_WORKER = r'''
import os, sys, json, time
import sweepd_worker

class CustomError(Exception):
    pass

def objective(trial):
    p = trial.params
    mode = p.get("mode", "ok")
    print("user stdout: trial %s mode %s" % (trial.number, mode), flush=True)
    sys.stderr.write("user stderr: trial %s\n" % (trial.number,))
    if mode == "introspect":
        fd = int(p["fd"])
        return {
            "inheritable": os.get_inheritable(fd),
            "env_fd": os.environ.get("SWEEPD_FD"),
            "argv": sys.argv[1:],
            "params": p,
            "id": trial.id,
            "number": trial.number,
        }
    pruned_seen = []
    for step in range(int(p.get("steps", 3))):
        trial.report(float(p.get("x", 0.0)) + step, step)
        pruned_seen.append(trial.should_prune())
        if trial.should_prune() and mode != "ignore_prune":
            raise sweepd_worker.TrialPruned()
    if mode == "raise":
        raise ValueError("bad x: %s" % (p.get("x"),))
    if mode == "raise_custom":
        raise CustomError("custom failure")
    if mode == "raise_huge":
        raise RuntimeError("y" * (3 << 20))
    if mode == "nan":
        return float("nan")
    if mode == "inf":
        return float("-inf")
    if mode == "int":
        return 7
    if mode == "bool":
        return True
    if mode == "list":
        return [1, 2]
    if mode == "sleep":
        time.sleep(float(p.get("seconds", 60)))
    if mode == "sysexit":
        sys.exit(5)
    if mode == "optuna_style_prune":
        class TrialPruned(Exception):
            pass
        raise TrialPruned()
    return float(p.get("x", 0.0)) ** 2

if __name__ == "__main__":
    sweepd_worker.serve(objective)
'''


class FakeSampler(object):
    """sweepd's side of a suggest: what a sweepd speaking protocol 2 does, in miniature.

    A name sampled up front (in the trial's params) is answered with that value; any other
    name is sampled at random from the distribution the worker sent, read with Optuna's own
    json_to_distribution. A distribution that conflicts with the study's earlier use of the
    name is refused with Optuna's check_distribution_compatibility and its message. Asking
    again in the same trial gets the same value.
    """

    def __init__(self, seed=0, choose=None):
        self.rng = random.Random(seed)
        self.study = {}       # name -> the first distribution the study saw for it
        self.values = {}      # (trial_id, name) -> value answered
        self.choose = choose or {}   # name -> fn(trial_id) -> value, to steer the branches

    def answer(self, trial_id, params, name, distribution):
        dist = optuna_distributions.json_to_distribution(json.dumps(distribution))
        if name in self.study:
            try:
                optuna_distributions.check_distribution_compatibility(self.study[name], dist)
            except ValueError as exc:
                return {"error": str(exc)}
        else:
            self.study[name] = dist
        key = (trial_id, name)
        if key not in self.values:
            if name in params:
                self.values[key] = params[name]
            elif name in self.choose:
                self.values[key] = self.choose[name](trial_id)
            else:
                self.values[key] = self.sample(dist)
        return {"value": self.values[key]}

    def sample(self, dist):
        rng = self.rng
        if isinstance(dist, optuna_distributions.CategoricalDistribution):
            return rng.choice(dist.choices)
        if isinstance(dist, optuna_distributions.IntDistribution):
            if dist.log:
                return rng.randint(dist.low, dist.high)
            return dist.low + dist.step * rng.randint(0, (dist.high - dist.low) // dist.step)
        if dist.log:
            return min(max(math.exp(rng.uniform(math.log(dist.low), math.log(dist.high))),
                           dist.low), dist.high)
        if dist.step is not None:
            k = rng.randint(0, int(round((dist.high - dist.low) / dist.step)))
            return min(dist.low + k * dist.step, dist.high)
        return rng.uniform(dist.low, dist.high)


def _default_sigint():
    # A suite started in the background by a shell without job control (`cmd &` in a script,
    # `nohup`) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler:
    # the workers here start as sweepd would start them from a terminal or a unit.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


class FakeSweepd(object):
    """Launches a worker over a socketpair and speaks the sweepd side."""

    def __init__(self, test, script, mode="persistent", env=None, args=(),
                 channel=True, protocol=2, sampler=None):
        self.test = test
        self.protocol = protocol
        # sweepd's side of suggest (protocol 2); what the worker sent for the last trial.
        self.sampler = sampler if sampler is not None else FakeSampler()
        self.suggests = []
        self.user_attrs = []
        self.tmp = tempfile.mkdtemp(prefix="sweepd-test-")
        test.addCleanup(shutil.rmtree, self.tmp, True)
        self.stdout_path = os.path.join(self.tmp, "stdout")
        self.stderr_path = os.path.join(self.tmp, "stderr")
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": PYTHON_DIR,
            "SWEEPD_MODE": mode,
            "SWEEPD_WORKER_ID": "0",
            "SWEEPD_STUDY": "test-study",
            "SWEEPD_PROTOCOL": str(protocol),
        }
        if env:
            full_env.update(env)
        pass_fds = ()
        self.sock = None
        self.child_fd = None
        if channel:
            parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock = parent
            self.sock.settimeout(TIMEOUT)
            self.reader = parent.makefile("rb")
            self.child_fd = child.fileno()
            full_env["SWEEPD_FD"] = str(self.child_fd)
            pass_fds = (self.child_fd,)
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, script] + list(args),
                env=full_env, pass_fds=pass_fds, stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, cwd=self.tmp, start_new_session=True,
                preexec_fn=_default_sigint,
            )
        if channel:
            child.close()
        test.addCleanup(self.cleanup)

    def cleanup(self):
        # The worker leads its own process group; kill the group even after
        # the worker exited, in case it left children behind.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        if self.sock is not None:
            self.reader.close()
            self.sock.close()

    def send(self, msg):
        self.sock.sendall(json.dumps(msg).encode("utf-8") + b"\n")

    def recv_raw(self):
        line = self.reader.readline()
        self.test.assertTrue(line.endswith(b"\n"), "expected a full line, got %r" % (line,))
        self.test.assertLessEqual(len(line), sweepd_worker.MAX_LINE_BYTES)
        return line

    def recv(self):
        line = self.recv_raw()
        # Strict JSON: bare NaN/Infinity would be a protocol violation.
        def reject(name):
            raise AssertionError("non-standard JSON constant %s in %r" % (name, line[:200]))
        msg = json.loads(line.decode("utf-8"), parse_constant=reject)
        self.test.assertIsInstance(msg, dict)
        return msg

    def expect_ready(self, protocol=None):
        msg = self.recv()
        expected = protocol if protocol is not None else min(self.protocol, 2)
        self.test.assertEqual(msg, {"type": "ready", "pid": self.proc.pid, "protocol": expected})
        return msg

    def run_trial(self, trial_id, number, params, prune_at=None, extra=None):
        """Send a trial, answer its reports and suggests; return (reports, final message).

        The suggest and user_attr messages of the trial are left in self.suggests and
        self.user_attrs.
        """
        msg = {"type": "trial", "trial_id": trial_id, "number": number, "params": params}
        msg.update(extra or {})
        self.send(msg)
        return self.serve_trial(trial_id, params, prune_at)

    def serve_trial(self, trial_id, params, prune_at=None):
        """Answer a running trial's reports and suggests until its outcome arrives."""
        reports = []
        self.suggests = []
        self.user_attrs = []
        while True:
            msg = self.recv()
            if msg["type"] == "suggest":
                self.test.assertGreaterEqual(self.protocol, 2, "a suggest under protocol 1")
                self.test.assertEqual(sorted(msg), ["distribution", "name", "trial_id", "type"])
                self.test.assertEqual(msg["trial_id"], trial_id)
                self.suggests.append(msg)
                answer = {"type": "param", "trial_id": trial_id, "name": msg["name"]}
                answer.update(self.sampler.answer(trial_id, params, msg["name"],
                                                  msg["distribution"]))
                self.send(answer)
                continue
            if msg["type"] == "user_attr":
                self.test.assertGreaterEqual(self.protocol, 2, "a user_attr under protocol 1")
                self.test.assertEqual(sorted(msg), ["key", "trial_id", "type", "value"])
                self.test.assertEqual(msg["trial_id"], trial_id)
                self.user_attrs.append(msg)
                continue
            if msg["type"] != "report":
                return reports, msg
            self.test.assertEqual(msg["trial_id"], trial_id)
            reports.append(msg)
            prune = prune_at is not None and msg["step"] >= prune_at
            self.send({"type": "prune", "trial_id": trial_id, "step": msg["step"],
                       "prune": prune})

    def wait(self):
        try:
            return self.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            self.test.fail("worker did not exit")

    def assert_silent(self, seconds):
        """Nothing arrives on the channel for ``seconds``."""
        readable, _, _ = select.select([self.sock], [], [], seconds)
        self.test.assertEqual(readable, [])

    def expect_eof(self):
        self.test.assertEqual(self.reader.readline(), b"")

    def stdout(self):
        with open(self.stdout_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


class Base(unittest.TestCase):
    def write_script(self, source, name="worker.py"):
        d = tempfile.mkdtemp(prefix="sweepd-script-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, name)
        with open(path, "w") as f:
            f.write(textwrap.dedent(source))
        return path

    def generic(self, **kw):
        return FakeSweepd(self, self.write_script(GENERIC_WORKER), **kw)


class PersistentTests(Base):
    def test_happy_path(self):
        w = self.generic()
        w.expect_ready()
        reports, final = w.run_trial(11, 0, {"x": 1.5, "steps": 3})
        self.assertEqual([(r["step"], r["value"]) for r in reports],
                         [(0, 1.5), (1, 2.5), (2, 3.5)])
        self.assertEqual(final, {"type": "result", "trial_id": 11, "value": 2.25})
        # A second trial on the same process.
        reports, final = w.run_trial(12, 1, {"x": -2.0, "steps": 1})
        self.assertEqual(len(reports), 1)
        self.assertEqual(final, {"type": "result", "trial_id": 12, "value": 4.0})
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)
        self.assertIn("user stdout: trial 0 mode ok", w.stdout())
        self.assertIn("user stdout: trial 1 mode ok", w.stdout())
        self.assertIn("user stderr: trial 1", w.stderr())

    def test_caches_are_released_before_sweepd_hears_the_trial_ended(self):
        # A stand-in for torch whose CUDA calls write to a log: the helper must empty the
        # cache after the objective returned and before the result is sent, and report the
        # framework's own peaks with the result.
        script = self.write_script(r"""
            import gc, os, sys, types
            import sweepd_worker

            LOG = os.environ["CALLS"]

            def log(what):
                with open(LOG, "a") as f:
                    f.write(what + "\n")

            # A tensor the objective left in a reference cycle holds device memory until the
            # collector frees it: that must happen before the cache is emptied.
            class Tensor:
                def __del__(self):
                    log("tensor freed")

            gc.disable()
            cuda = types.SimpleNamespace(
                is_available=lambda: True,
                is_initialized=lambda: True,
                reset_peak_memory_stats=lambda: log("reset"),
                max_memory_allocated=lambda: 3 << 30,
                max_memory_reserved=lambda: 4 << 30,
                empty_cache=lambda: log("empty_cache"),
            )
            sys.modules["torch"] = types.SimpleNamespace(cuda=cuda)

            def objective(trial):
                log("objective")
                t = Tensor()
                t.me = t
                return 1.0

            sweepd_worker.serve(objective)
        """)
        calls = os.path.join(tempfile.mkdtemp(prefix="sweepd-calls-"), "calls")
        self.addCleanup(shutil.rmtree, os.path.dirname(calls), True)
        w = FakeSweepd(self, script, env={"CALLS": calls})
        w.expect_ready()
        _, final = w.run_trial(3, 0, {})
        with open(calls) as f:
            self.assertEqual(f.read().splitlines(),
                             ["reset", "objective", "tensor freed", "empty_cache"])
        self.assertEqual(final["value"], 1.0)
        self.assertEqual(final["memory"], {"framework": "torch",
                                           "peak_allocated": 3 << 30,
                                           "peak_reserved": 4 << 30})
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)

    def test_without_a_device_framework_no_collection_is_forced_between_trials(self):
        # Nothing in the process holds device memory, so a full collection per trial would
        # only cost time: about 1 ms of CPU per trial in the PostgreSQL coordination benchmark
        # (50 ms trials), where daemons, workers and server share two cores.
        script = self.write_script(r"""
            import gc, os
            import sweepd_worker

            def collect(*args, **kwargs):
                with open(os.environ["CALLS"], "a") as f:
                    f.write("collect\n")

            gc.collect = collect
            sweepd_worker.serve(lambda trial: 1.0)
        """)
        calls = os.path.join(tempfile.mkdtemp(prefix="sweepd-calls-"), "calls")
        self.addCleanup(shutil.rmtree, os.path.dirname(calls), True)
        w = FakeSweepd(self, script, env={"CALLS": calls})
        w.expect_ready()
        for i in range(2):
            _, final = w.run_trial(20 + i, i, {})
            self.assertEqual(final["value"], 1.0)
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)
        self.assertFalse(os.path.exists(calls))

    def test_without_torch_no_memory_is_reported(self):
        w = self.generic()
        w.expect_ready()
        _, final = w.run_trial(4, 0, {"x": 2.0, "steps": 1})
        self.assertEqual(final, {"type": "result", "trial_id": 4, "value": 4.0})
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)

    def test_prune(self):
        w = self.generic()
        w.expect_ready()
        reports, final = w.run_trial(5, 3, {"x": 0.0, "steps": 10}, prune_at=1)
        self.assertEqual([r["step"] for r in reports], [0, 1])
        self.assertEqual(final, {"type": "pruned", "trial_id": 5})
        # should_prune() starts over as False on the next trial.
        reports, final = w.run_trial(6, 4, {"x": 1.0, "steps": 2})
        self.assertEqual(final["type"], "result")
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)

    def test_prune_ignored_by_objective(self):
        w = self.generic()
        w.expect_ready()
        reports, final = w.run_trial(5, 0, {"x": 2.0, "steps": 3, "mode": "ignore_prune"},
                                     prune_at=0)
        self.assertEqual(len(reports), 3)
        self.assertEqual(final, {"type": "result", "trial_id": 5, "value": 4.0})

    def test_foreign_trial_pruned_class(self):
        w = self.generic()
        w.expect_ready()
        _, final = w.run_trial(5, 0, {"steps": 0, "mode": "optuna_style_prune"})
        self.assertEqual(final, {"type": "pruned", "trial_id": 5})

    def test_exception_then_next_trial(self):
        w = self.generic()
        w.expect_ready()
        reports, final = w.run_trial(7, 0, {"x": 3.0, "mode": "raise"})
        self.assertEqual(len(reports), 3)
        self.assertEqual(final["type"], "error")
        self.assertEqual(final["trial_id"], 7)
        self.assertEqual(final["exc_type"], "ValueError")
        self.assertEqual(final["message"], "bad x: 3.0")
        self.assertIn("Traceback (most recent call last)", final["traceback"])
        self.assertIn("ValueError: bad x: 3.0", final["traceback"])
        self.assertIn("in objective", final["traceback"])
        _, final = w.run_trial(8, 1, {"x": 3.0, "steps": 0})
        self.assertEqual(final, {"type": "result", "trial_id": 8, "value": 9.0})
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)
        self.assertIn("ValueError: bad x: 3.0", w.stderr())

    def test_custom_exception_type_is_qualified(self):
        w = self.generic()
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"steps": 0, "mode": "raise_custom"})
        self.assertEqual(final["exc_type"], "__main__.CustomError")
        self.assertEqual(final["message"], "custom failure")

    def test_huge_exception_fits_in_a_line(self):
        w = self.generic()
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"steps": 0, "mode": "raise_huge"})
        self.assertEqual(final["type"], "error")
        self.assertEqual(final["exc_type"], "RuntimeError")
        self.assertIn("truncated", final["message"])
        self.assertIn("truncated", final["traceback"])
        # The tail of the traceback (the exception line's end) survives.
        self.assertTrue(final["traceback"].rstrip().endswith("y"))

    def test_nan_and_inf(self):
        w = self.generic()
        w.expect_ready()
        reports, final = w.run_trial(1, 0, {"steps": 0, "mode": "nan"})
        self.assertEqual(final, {"type": "result", "trial_id": 1, "value": "nan"})
        _, final = w.run_trial(2, 1, {"steps": 0, "mode": "inf"})
        self.assertEqual(final, {"type": "result", "trial_id": 2, "value": "-inf"})
        # A NaN report is encoded too.
        reports, final = w.run_trial(3, 2, {"x": float("inf"), "steps": 1})
        self.assertEqual(reports[0]["value"], "inf")
        self.assertEqual(final["value"], "inf")

    def test_result_value_conversion(self):
        w = self.generic()
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"steps": 0, "mode": "int"})
        self.assertEqual(final["value"], 7.0)
        _, final = w.run_trial(2, 1, {"steps": 0, "mode": "bool"})
        self.assertIs(final["value"], True)
        # A list is one value per objective (see test_several_objectives.py).
        _, final = w.run_trial(3, 2, {"steps": 0, "mode": "list"})
        self.assertEqual(final["value"], [1.0, 2.0])

    def test_shutdown_exits_zero(self):
        w = self.generic()
        w.expect_ready()
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)
        w.expect_eof()

    def test_eof_when_idle_exits_zero(self):
        w = self.generic()
        w.expect_ready()
        w.sock.shutdown(socket.SHUT_RDWR)
        self.assertEqual(w.wait(), 0)

    def test_eof_while_waiting_for_prune_answer_exits_zero(self):
        w = self.generic()
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 1, "number": 0, "params": {"steps": 3}})
        self.assertEqual(w.recv()["type"], "report")
        w.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(w.wait(), 0)
        self.assertNotIn("Traceback", w.stderr())

    def test_sweepd_gone_mid_trial_ends_the_worker_quietly_before_the_trial_ends(self):
        # A trial that reports nothing for a minute: without the watch on the channel the
        # worker went on (holding its GPU memory) until the trial ended, its result taken by
        # no one, and only then exited on the broken pipe. (This replaces a test of that exit
        # on a 0.5 s trial: the watch now ends the worker first.)
        w = self.generic()
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 1, "number": 0,
                "params": {"steps": 0, "mode": "sleep", "seconds": 60}})
        time.sleep(0.3)
        w.reader.close()
        w.sock.close()
        w.sock = None
        start = time.monotonic()
        self.assertEqual(w.wait(), 0)
        self.assertLess(time.monotonic() - start, TIMEOUT)
        self.assertNotIn("Traceback", w.stderr())

    def test_unknown_messages_are_ignored(self):
        w = self.generic()
        w.expect_ready()
        w.send({"type": "hello-from-the-future", "x": 1})
        w.send({"type": "prune", "trial_id": 99, "step": 0, "prune": True})
        w.sock.sendall(b"not json at all\n")
        w.sock.sendall(b"[1, 2, 3]\n")
        w.send({"type": "trial", "trial_id": 1, "number": 0, "params": {"x": 1.0, "steps": 2},
                "future_field": [1, 2]})
        msg = w.recv()
        self.assertEqual(msg["type"], "report")
        # Unknown types and a stale prune answer while a report is pending.
        w.send({"type": "something-new"})
        w.send({"type": "prune", "trial_id": 98, "step": 0, "prune": True})
        w.send({"type": "prune", "trial_id": 1, "step": 0, "prune": False})
        msg = w.recv()
        self.assertEqual((msg["type"], msg["step"]), ("report", 1))
        w.send({"type": "prune", "trial_id": 1, "step": 1, "prune": False})
        self.assertEqual(w.recv(), {"type": "result", "trial_id": 1, "value": 1.0})
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)

    def test_shutdown_during_report_wait(self):
        w = self.generic()
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 1, "number": 0, "params": {"steps": 3}})
        self.assertEqual(w.recv()["type"], "report")
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)

    def test_channel_is_close_on_exec_and_hidden_from_children(self):
        w = self.generic()
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"mode": "introspect", "fd": w.child_fd})
        self.assertEqual(final["type"], "result")
        info = eval(final["value"])  # the repr of the returned dict
        self.assertIs(info["inheritable"], False)
        self.assertIsNone(info["env_fd"])
        self.assertEqual(info["id"], 1)
        self.assertEqual(info["number"], 0)

    def test_sigterm_during_trial_ends_process(self):
        w = self.generic()
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 1, "number": 0,
                "params": {"steps": 0, "mode": "sleep", "seconds": 60}})
        time.sleep(0.3)
        w.proc.send_signal(signal.SIGTERM)
        self.assertEqual(w.wait(), -signal.SIGTERM)

    def test_keyboard_interrupt_during_trial_ends_process(self):
        w = self.generic()
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 1, "number": 0,
                "params": {"steps": 0, "mode": "sleep", "seconds": 60}})
        time.sleep(0.3)
        w.proc.send_signal(signal.SIGINT)
        self.assertNotEqual(w.wait(), 0)
        w.expect_eof()

    def test_sys_exit_in_objective_ends_process(self):
        w = self.generic()
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 1, "number": 0,
                "params": {"steps": 0, "mode": "sysexit"}})
        self.assertEqual(w.wait(), 5)


class OneshotTests(Base):
    def oneshot(self, params, argv_params=True, env_params=True, channel=True,
                script=None, extra_env=None):
        tmp = tempfile.mkdtemp(prefix="sweepd-oneshot-")
        self.addCleanup(shutil.rmtree, tmp, True)
        result_file = os.path.join(tmp, "result")
        env = {
            "SWEEPD_TRIAL_ID": "42",
            "SWEEPD_TRIAL_NUMBER": "7",
            "SWEEPD_RESULT_FILE": result_file,
        }
        if env_params:
            env["SWEEPD_PARAMS"] = json.dumps(params)
        if extra_env:
            env.update(extra_env)
        args = []
        if argv_params:
            for k, v in params.items():
                if isinstance(v, str):
                    args.append("--%s=%s" % (k, v))
                else:
                    args.append("--%s=%s" % (k, json.dumps(v)))
        w = FakeSweepd(self, script or self.write_script(GENERIC_WORKER), mode="oneshot",
                       env=env, args=args, channel=channel)
        return w, result_file

    def read(self, path):
        with open(path) as f:
            return f.read()

    def test_result_file_and_channel(self):
        w, rf = self.oneshot({"x": 1.5, "steps": 2})
        w.expect_ready()
        for step in range(2):
            msg = w.recv()
            self.assertEqual(msg, {"type": "report", "trial_id": 42, "step": step,
                                   "value": 1.5 + step})
            w.send({"type": "prune", "trial_id": 42, "step": step, "prune": False})
        self.assertEqual(w.recv(), {"type": "result", "trial_id": 42, "value": 2.25})
        self.assertEqual(w.wait(), 0)
        self.assertEqual(self.read(rf), "2.25")
        self.assertIn("user stdout: trial 7 mode ok", w.stdout())

    def test_params_from_env_and_argv(self):
        params = {"mode": "introspect", "fd": 0, "lr": 1e-05, "y": 2,
                  "opt": "adam", "flag": True, "cat": "2"}
        w, rf = self.oneshot(params)
        w.expect_ready()
        msg = w.recv()
        self.assertEqual(msg["type"], "result")
        info = eval(msg["value"])
        self.assertEqual(info["params"], params)   # from SWEEPD_PARAMS: exact types
        self.assertIn("--lr=1e-05", info["argv"])
        self.assertIn("--opt=adam", info["argv"])
        self.assertIn("--flag=true", info["argv"])
        self.assertEqual(info["id"], 42)
        self.assertEqual(info["number"], 7)
        self.assertEqual(w.wait(), 0)
        self.assertEqual(eval(self.read(rf))["params"], params)

    def test_params_from_argv_only(self):
        params = {"mode": "introspect", "fd": 0, "lr": 1e-05, "y": 2,
                  "opt": "adam", "flag": False, "name": "NaN", "s": "null"}
        w, rf = self.oneshot(params, env_params=False, channel=False)
        self.assertEqual(w.wait(), 0)
        info = eval(self.read(rf))
        self.assertEqual(info["params"], params)

    def test_no_channel(self):
        w, rf = self.oneshot({"x": 3.0, "steps": 3}, channel=False)
        self.assertEqual(w.wait(), 0)
        self.assertEqual(self.read(rf), "9.0")

    def test_nan_result(self):
        w, rf = self.oneshot({"steps": 0, "mode": "nan"})
        w.expect_ready()
        self.assertEqual(w.recv(), {"type": "result", "trial_id": 42, "value": "nan"})
        self.assertEqual(w.wait(), 0)
        self.assertEqual(self.read(rf), "nan")

    def test_exception_exits_one(self):
        w, rf = self.oneshot({"x": 2.0, "steps": 1, "mode": "raise"})
        w.expect_ready()
        msg = w.recv()
        self.assertEqual(msg["type"], "report")
        w.send({"type": "prune", "trial_id": 42, "step": 0, "prune": False})
        msg = w.recv()
        self.assertEqual(msg["type"], "error")
        self.assertEqual(msg["trial_id"], 42)
        self.assertEqual(msg["exc_type"], "ValueError")
        self.assertEqual(msg["message"], "bad x: 2.0")
        self.assertIn("ValueError: bad x: 2.0", msg["traceback"])
        self.assertEqual(w.wait(), 1)
        self.assertFalse(os.path.exists(rf))
        self.assertIn("ValueError: bad x: 2.0", w.stderr())

    def test_pruned_exits_zero_without_result_file(self):
        w, rf = self.oneshot({"x": 2.0, "steps": 5})
        w.expect_ready()
        msg = w.recv()
        w.send({"type": "prune", "trial_id": 42, "step": msg["step"], "prune": True})
        self.assertEqual(w.recv(), {"type": "pruned", "trial_id": 42})
        self.assertEqual(w.wait(), 0)
        self.assertFalse(os.path.exists(rf))

    def test_oneshot_train_example(self):
        params = {"x": 1.5, "y": 2, "optimizer": "sgd", "lr": 0.001}
        w, rf = self.oneshot(params, script=ONESHOT_TRAIN)
        self.assertEqual(w.wait(), 0)
        self.assertAlmostEqual(float(self.read(rf)), 0.3, delta=0.1)
        self.assertIn("epoch 4", w.stdout())

    def test_oneshot_train_standalone(self):
        out = subprocess.run(
            [sys.executable, ONESHOT_TRAIN, "--x=1.0", "--y=2", "--optimizer=adam",
             "--lr=0.001"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={"PATH": os.environ.get("PATH", "")}, timeout=TIMEOUT,
        )
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(b"final loss", out.stdout)


RETRY_WORKER = r"""
import json, os
import sweepd_worker
from optuna.storages import RetryFailedTrialCallback

def objective(trial):
    out = {"history": RetryFailedTrialCallback.retry_history(trial),
           "failed": RetryFailedTrialCallback.retried_trial_number(trial),
           "study": trial.study.study_name, "directions": trial.study.directions,
           "checkpoint_dir": trial.checkpoint_dir,
           "env": os.environ.get("SWEEPD_CHECKPOINT_DIR")}
    try:
        out["best"] = trial.study.best_value
    except (ValueError, RuntimeError) as exc:
        out["best"] = type(exc).__name__
    try:
        trial.system_attrs["x"] = 1
        out["writable"] = True
    except TypeError:
        out["writable"] = False
    with open(os.environ["OUT"], "a") as f:
        f.write(json.dumps(out) + "\n")
    return 0.0

if __name__ == "__main__":
    sweepd_worker.serve(objective)
"""


def _has_optuna():
    try:
        import optuna  # noqa: F401
    except ImportError:
        return False
    return True


@unittest.skipUnless(_has_optuna(), "needs Optuna (RetryFailedTrialCallback)")
class RetryAttrsTests(Base):
    """Issue 42: a retry's trial carries Optuna's retry attributes, the study and its
    checkpoint directory, so that RetryFailedTrialCallback.retry_history(trial) works."""

    def lines(self, out):
        with open(out) as f:
            return [json.loads(line) for line in f]

    def test_retry_history_works_in_a_persistent_worker_and_system_attrs_are_read_only(self):
        out = os.path.join(tempfile.mkdtemp(prefix="sweepd-out-"), "out")
        self.addCleanup(shutil.rmtree, os.path.dirname(out), True)
        w = FakeSweepd(self, self.write_script(RETRY_WORKER), env={"OUT": out})
        w.expect_ready()
        _, final = w.run_trial(5, 4, {}, extra={
            "system_attrs": {"failed_trial": 1, "retry_history": [1, 3]},
            "study": {"name": "s", "directions": ["minimize"], "best_value": 0.25},
            "checkpoint_dir": "/ckpt/trial-1"})
        self.assertEqual(final["type"], "result", final)
        # A first attempt after it: nothing of the retry is left over.
        _, final = w.run_trial(6, 5, {}, extra={"system_attrs": {}, "checkpoint_dir": None})
        self.assertEqual(final["type"], "result", final)
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)
        first, second = self.lines(out)
        self.assertEqual(first, {"history": [1, 3], "failed": 1, "study": "s",
                                 "directions": ["minimize"], "checkpoint_dir": "/ckpt/trial-1",
                                 "env": "/ckpt/trial-1", "writable": False, "best": 0.25})
        self.assertEqual(second["best"], "ValueError")  # no complete trial said
        self.assertEqual(second["history"], [])
        self.assertIsNone(second["failed"])
        self.assertIsNone(second["checkpoint_dir"])
        self.assertIsNone(second["env"])

    def test_retry_history_works_in_a_oneshot_worker(self):
        out = os.path.join(tempfile.mkdtemp(prefix="sweepd-out-"), "out")
        self.addCleanup(shutil.rmtree, os.path.dirname(out), True)
        env = {"OUT": out, "SWEEPD_TRIAL_ID": "9", "SWEEPD_TRIAL_NUMBER": "8",
               "SWEEPD_PARAMS": "{}", "SWEEPD_SYSTEM_ATTRS": json.dumps(
                   {"failed_trial": 2, "retry_history": [2]}),
               "SWEEPD_DIRECTIONS": "minimize,maximize", "SWEEPD_CHECKPOINT_DIR": "/c/trial-2",
               "SWEEPD_BEST_VALUE": "1.5",
               "SWEEPD_RESULT_FILE": os.path.join(os.path.dirname(out), "result")}
        w = FakeSweepd(self, self.write_script(RETRY_WORKER), mode="oneshot", env=env,
                       channel=False)
        self.assertEqual(w.wait(), 0)
        (line,) = self.lines(out)
        self.assertEqual(line, {"history": [2], "failed": 2, "study": "test-study",
                                "directions": ["minimize", "maximize"],
                                "checkpoint_dir": "/c/trial-2", "env": "/c/trial-2",
                                "writable": False, "best": "RuntimeError"})


class MiscTests(Base):
    def test_serve_outside_sweepd_raises(self):
        script = self.write_script(
            """
            import sweepd_worker
            try:
                sweepd_worker.serve(lambda trial: 0.0)
            except RuntimeError as exc:
                print("RuntimeError:", exc)
            """
        )
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": PYTHON_DIR}
        out = subprocess.run([sys.executable, script], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env=env, timeout=TIMEOUT)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn(b"must be started by sweepd", out.stdout)

    def test_version(self):
        self.assertEqual(sweepd_worker.__version__, "0.2.0")
        self.assertEqual(sweepd_worker.PROTOCOL_VERSION, 2)

    def test_quadratic_example(self):
        w = FakeSweepd(self, QUADRATIC_WORKER)
        w.expect_ready()
        start = time.monotonic()
        reports, final = w.run_trial(1, 0, {"x": 1.5, "y": 2, "optimizer": "adam",
                                            "lr": 0.001})
        elapsed = time.monotonic() - start
        self.assertEqual([r["step"] for r in reports], [0, 1, 2, 3, 4])
        self.assertEqual(final["type"], "result")
        self.assertLess(abs(final["value"]), 0.1)
        self.assertLess(elapsed, 2.0)
        reports, final = w.run_trial(2, 1, {"x": -5.0, "y": 8, "optimizer": "sgd",
                                            "lr": 1e-5}, prune_at=2)
        self.assertEqual(final, {"type": "pruned", "trial_id": 2})
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)
        self.assertIn("trial 0 epoch 4", w.stdout())

    def test_protocol_doc_raw_example(self):
        with open(PROTOCOL_DOC) as f:
            doc = f.read()
        section = doc.split("## A persistent worker without the helper", 1)[1]
        code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
        # A version-1 worker, which a sweepd speaking version 2 takes too.
        w = FakeSweepd(self, self.write_script(code), protocol=2)
        w.expect_ready(protocol=1)
        _, final = w.run_trial(1, 0, {"x": 5.0})
        self.assertEqual(final, {"type": "result", "trial_id": 1, "value": 9.0})
        _, final = w.run_trial(2, 1, {})
        self.assertEqual((final["type"], final["exc_type"]), ("error", "KeyError"))
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)


class FaultyWorkerTests(Base):
    def faulty(self, **env):
        full = {"SWEEPD_TEST_SLEEP": "0.01"}
        full.update({k: str(v) for k, v in env.items()})
        return FakeSweepd(self, FAULTY_WORKER, env=full)

    def test_normal_value_and_record(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp, True)
        record = os.path.join(tmp, "record")
        w = self.faulty(SWEEPD_TEST_RECORD=record)
        w.expect_ready()
        reports, final = w.run_trial(1, 0, {"x": 2.0, "y": 3, "c": "adam"})
        self.assertEqual(len(reports), 3)
        self.assertEqual(final, {"type": "result", "trial_id": 1, "value": 17.0})
        w.run_trial(2, 1, {"x": 0.0})
        with open(record) as f:
            self.assertEqual(f.read(), "%d 0\n%d 1\n" % (w.proc.pid, w.proc.pid))

    def test_chatty(self):
        w = self.faulty(SWEEPD_TEST_CHATTY=1)
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"x": 1.0})
        self.assertEqual(final, {"type": "result", "trial_id": 1, "value": 1.0})
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)
        out = w.stdout()
        self.assertIn('{"type":"result","trial_id":0,"value":-1e9}', out)
        self.assertIn("x" * (200 * 1024), out)
        self.assertGreaterEqual(w.stderr().count("\n"), 2000)

    def test_exit_on(self):
        w = self.faulty(SWEEPD_TEST_EXIT_ON=1)
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"x": 1.0})
        self.assertEqual(final["type"], "result")
        w.send({"type": "trial", "trial_id": 2, "number": 1, "params": {"x": 1.0}})
        self.assertEqual(w.recv()["type"], "report")
        w.send({"type": "prune", "trial_id": 2, "step": 0, "prune": False})
        self.assertEqual(w.wait(), 3)
        w.expect_eof()

    def test_garbage_on(self):
        w = self.faulty(SWEEPD_TEST_GARBAGE_ON=0)
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 1, "number": 0, "params": {"x": 1.0}})
        self.assertEqual(w.recv()["type"], "report")
        w.send({"type": "prune", "trial_id": 1, "step": 0, "prune": False})
        self.assertEqual(w.recv_raw(), b"this is not json\n")
        for step in (1, 2):
            self.assertEqual(w.recv()["step"], step)
            w.send({"type": "prune", "trial_id": 1, "step": step, "prune": False})
        self.assertEqual(w.recv()["type"], "result")

    def test_raise_and_nan_on(self):
        w = self.faulty(SWEEPD_TEST_RAISE_ON=0, SWEEPD_TEST_NAN_ON=1)
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"x": 1.0})
        self.assertEqual((final["type"], final["exc_type"], final["message"]),
                         ("error", "ValueError", "rejected param in trial 0"))
        _, final = w.run_trial(2, 1, {"x": 1.0})
        self.assertEqual(final["value"], "nan")

    def test_hang_on(self):
        w = self.faulty(SWEEPD_TEST_HANG_ON=0)
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 1, "number": 0, "params": {}})
        w.assert_silent(0.5)
        self.assertIsNone(w.proc.poll())

    @unittest.skipUnless(hasattr(os, "fork"), "needs fork")
    def test_fork(self):
        w = self.faulty(SWEEPD_TEST_FORK=1)
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"x": 1.0})
        self.assertEqual(final["type"], "result")
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)
        # The forked child lives on in the worker's process group, keeping
        # the channel open, until the whole group is killed.
        w.assert_silent(0.3)
        os.killpg(w.proc.pid, signal.SIGTERM)
        time.sleep(0.2)
        os.killpg(w.proc.pid, 0)  # still alive: SIGTERM is ignored
        os.killpg(w.proc.pid, signal.SIGKILL)
        self.assertEqual(w.reader.readline(), b"")



# --------------------------------------------------------------------------
# The Optuna trial API (protocol 2: define-by-run)

needs_optuna = unittest.skipUnless(optuna is not None, "needs optuna (run with .venv/bin/python)")


def optuna_trial():
    """A fresh trial of an in-memory Optuna study, to compare with."""
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    return study.ask()


def outcome(fn):
    """(exception as (type, text) or None, [(warning category, text)]) of calling fn."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
            exc = None
        except Exception as e:
            exc = (type(e), str(e))
    return exc, [(w.category, str(w.message)) for w in caught]


def ordered(obj):
    """JSON text or object -> nested lists of (key, value) pairs: key order counts."""
    def walk(o):
        if isinstance(o, dict):
            return [(k, walk(v)) for k, v in o.items()]
        if isinstance(o, (list, tuple)):
            return [walk(v) for v in o]
        return o
    return walk(json.loads(obj) if isinstance(obj, str) else obj)


class StubChannel(object):
    """In-process stand-in for the channel: answers suggests, counts them."""

    def __init__(self, answer=None):
        self.suggests = []
        self.sent = []
        self.answer = answer or (lambda name, dist: {"value": FakeSampler().sample(
            optuna_distributions.json_to_distribution(json.dumps(dist)))})

    def request_param(self, trial_id, name, distribution):
        dist = sweepd_worker._distribution_json(distribution)
        self.suggests.append((name, dist))
        answer = {"type": "param", "trial_id": trial_id, "name": name}
        answer.update(self.answer(name, dist))
        return answer

    def request_prune(self, trial_id, step, value):
        self.sent.append({"type": "report", "trial_id": trial_id, "step": step, "value": value})
        return False

    def send(self, msg):
        sweepd_worker._dumps(msg)
        self.sent.append(msg)


# Every suggest_* form: (method, args, kwargs). Each uses its own name.
SUGGEST_FORMS = [
    ("suggest_float", ["f_plain", -5, 5], {}),
    ("suggest_float", ["f_log", 1e-5, 0.1], {"log": True}),
    ("suggest_float", ["f_step", 0.0, 1.0], {"step": 0.25}),
    ("suggest_float", ["f_step_adjusted", 0, 1], {"step": 0.3}),
    ("suggest_float", ["f_single", 2.5, 2.5], {}),
    ("suggest_float", ["f_exact", 0.1, 0.30000000000000004], {}),
    ("suggest_int", ["i_plain", 1, 10], {}),
    ("suggest_int", ["i_step", 0, 100], {"step": 10}),
    ("suggest_int", ["i_step_adjusted", 0, 10], {"step": 3}),
    ("suggest_int", ["i_log", 1, 1024], {"log": True}),
    ("suggest_int", ["i_float_bounds", 1.0, 5.0], {}),
    ("suggest_int", ["i_explicit_step_1", -3, 3], {"step": 1, "log": False}),
    ("suggest_categorical", ["c_str", ["adam", "sgd", "rmsprop"]], {}),
    ("suggest_categorical", ["c_mixed", [None, True, 1, 2.5, "x"]], {}),
    ("suggest_categorical", ["c_tuple", ("a",)], {}),
    ("suggest_uniform", ["u", 0.5, 1.5], {}),
    ("suggest_loguniform", ["lu", 1e-3, 1.0], {}),
    ("suggest_discrete_uniform", ["du", 0.0, 1.0, 0.1], {}),
    ("suggest_discrete_uniform", ["du_adjusted", 0.0, 1.05, 0.1], {}),
]

FORMS_WORKER = r"""
import json, os
import sweepd_worker

CALLS = json.loads(os.environ["CALLS"])

def objective(trial):
    values = [getattr(trial, m)(*a, **kw) for m, a, kw in CALLS]
    return (values, trial.params, {k: repr(d) for k, d in trial.distributions.items()})

sweepd_worker.serve(objective)
"""


@needs_optuna
class SuggestWireTests(Base):
    def test_every_suggest_form_sends_the_distribution_optuna_writes(self):
        w = FakeSweepd(self, self.write_script(FORMS_WORKER),
                       env={"CALLS": json.dumps(SUGGEST_FORMS)})
        w.expect_ready()
        reports, final = w.run_trial(5, 2, {})
        self.assertEqual(reports, [])
        self.assertEqual(final["type"], "result", final)
        values, params, reprs = eval(final["value"])
        self.assertEqual([m["name"] for m in w.suggests], [a[0] for _, a, _ in SUGGEST_FORMS])
        ot = optuna_trial()
        for (method, args, kwargs), msg, value in zip(SUGGEST_FORMS, w.suggests, values):
            name = args[0]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                getattr(ot, method)(*args, **kwargs)
            theirs = optuna_distributions.distribution_to_json(ot.distributions[name])
            # The same attributes, the same values, in the same order.
            self.assertEqual(ordered(msg["distribution"]), ordered(theirs), name)
            self.assertEqual(reprs[name], repr(ot.distributions[name]), name)
            # The objective got what sweepd answered, in Optuna's types.
            answered = w.sampler.values[(5, name)]
            self.assertEqual(value, answered, name)
            self.assertIs(type(value), type(answered) if method != "suggest_int" else int, name)
            self.assertEqual(params[name], value)
        # Optuna's warnings about an adjusted high reach the worker's stderr.
        self.assertIn("It will be replaced with [0, 0.9].", w.stderr())
        self.assertIn("suggest_uniform has been deprecated in v3.0.0", w.stderr())

    def test_the_suggest_message(self):
        script = self.write_script("""
            import sweepd_worker

            def objective(trial):
                return trial.suggest_float("lr", 1e-05, 0.1, log=True)

            sweepd_worker.serve(objective)
        """)
        w = FakeSweepd(self, script)
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 17, "number": 9, "params": {}})
        line = w.recv_raw()
        self.assertEqual(
            line,
            b'{"type":"suggest","trial_id":17,"name":"lr","distribution":{"name":'
            b'"FloatDistribution","attributes":{"step":null,"low":1e-05,"high":0.1,'
            b'"log":true}}}\n')
        w.send({"type": "param", "trial_id": 17, "name": "lr", "value": 0.0031622776601683794})
        self.assertEqual(w.recv(), {"type": "result", "trial_id": 17,
                                    "value": 0.0031622776601683794})

    def test_repeated_suggest_is_answered_from_the_cache(self):
        script = self.write_script("""
            import sweepd_worker

            def objective(trial):
                a = trial.suggest_int("n", 1, 8)
                b = trial.suggest_int("n", 1, 8)
                c = trial.suggest_int("n", 1, 4)     # compatible: Optuna keeps the first value
                d = trial.suggest_categorical("opt", ["a", "b"])
                e = trial.suggest_categorical("opt", ("a", "b"))
                assert a == b == c and d == e
                return a
            sweepd_worker.serve(objective)
        """)
        w = FakeSweepd(self, script)
        w.expect_ready()
        _, final = w.run_trial(1, 0, {})
        self.assertEqual(final["type"], "result", final)
        self.assertEqual([m["name"] for m in w.suggests], ["n", "opt"])
        self.assertEqual(final["value"], float(w.sampler.values[(1, "n")]))
        self.assertIn('Inconsistent parameter values for distribution with name "n"!', w.stderr())
        # The next trial asks again: the cache is per trial.
        _, final = w.run_trial(2, 1, {})
        self.assertEqual([m["name"] for m in w.suggests], ["n", "opt"])

    def test_sweepds_refusal_is_a_value_error_with_its_text(self):
        script = self.write_script("""
            import sweepd_worker

            def objective(trial):
                if trial.number == 0:
                    return trial.suggest_float("x", 0.0, 1.0)
                return trial.suggest_int("x", 0, 1)   # the study used x as a float

            sweepd_worker.serve(objective)
        """)
        w = FakeSweepd(self, script)
        w.expect_ready()
        _, final = w.run_trial(1, 0, {})
        self.assertEqual(final["type"], "result")
        _, final = w.run_trial(2, 1, {})
        self.assertEqual(final["type"], "error")
        self.assertEqual(final["exc_type"], "ValueError")
        self.assertEqual(final["message"],
                         "Cannot set different distribution kind to the same parameter name.")
        self.assertIn("in objective", final["traceback"])
        # And an arbitrary text from sweepd, answered by hand.
        w.send({"type": "trial", "trial_id": 3, "number": 2, "params": {}})
        self.assertEqual(w.recv()["type"], "suggest")
        w.send({"type": "param", "trial_id": 3, "name": "x", "error": "x: nope (é)"})
        final = w.recv()
        self.assertEqual((final["exc_type"], final["message"]), ("ValueError", "x: nope (é)"))

    def test_params_sampled_up_front_are_asked_for_and_answered(self):
        script = self.write_script("""
            import sweepd_worker

            def objective(trial):
                before = trial.params
                x = trial.suggest_float("x", -5, 5)
                y = trial.suggest_float("y", 0, 1)
                return (before, x, y, trial.params)

            sweepd_worker.serve(objective)
        """)
        w = FakeSweepd(self, script)
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"x": 1.25})
        before, x, y, after = eval(final["value"])
        self.assertEqual(before, {"x": 1.25})
        self.assertEqual(x, 1.25)
        self.assertEqual(after, {"x": 1.25, "y": y})
        self.assertEqual([m["name"] for m in w.suggests], ["x", "y"])

    def test_stale_answers_are_ignored_and_shutdown_or_eof_while_waiting(self):
        script = self.write_script("""
            import sweepd_worker

            def objective(trial):
                return trial.suggest_float("x", 0, 1) + trial.suggest_int("k", 0, 3)

            sweepd_worker.serve(objective)
        """)
        w = FakeSweepd(self, script)
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 1, "number": 0, "params": {}})
        self.assertEqual(w.recv()["name"], "x")
        w.send({"type": "param", "trial_id": 0, "name": "x", "value": 0.5})    # another trial
        w.send({"type": "param", "trial_id": 1, "name": "k", "value": 2})      # another name
        w.send({"type": "prune", "trial_id": 1, "step": 0, "prune": True})
        w.send({"type": "something-new"})
        w.send({"type": "param", "trial_id": 1, "name": "x", "value": 0.25})
        self.assertEqual(w.recv()["name"], "k")
        w.send({"type": "param", "trial_id": 1, "name": "k", "value": 3})
        self.assertEqual(w.recv(), {"type": "result", "trial_id": 1, "value": 3.25})
        # shutdown while waiting for an answer
        w.send({"type": "trial", "trial_id": 2, "number": 1, "params": {}})
        self.assertEqual(w.recv()["type"], "suggest")
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)
        # end of file while waiting for an answer
        w = FakeSweepd(self, script)
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 1, "number": 0, "params": {}})
        self.assertEqual(w.recv()["type"], "suggest")
        w.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(w.wait(), 0)
        self.assertNotIn("Traceback", w.stderr())

    def test_an_unusable_answer_is_a_runtime_error(self):
        script = self.write_script("""
            import sweepd_worker

            def objective(trial):
                return trial.suggest_int("k", 0, 3)

            sweepd_worker.serve(objective)
        """)
        w = FakeSweepd(self, script)
        w.expect_ready()
        for answer in ({"value": 1.5}, {"value": "2"}, {"value": True}, {}):
            w.send({"type": "trial", "trial_id": 1, "number": 0, "params": {}})
            self.assertEqual(w.recv()["type"], "suggest")
            msg = {"type": "param", "trial_id": 1, "name": "k"}
            msg.update(answer)
            w.send(msg)
            final = w.recv()
            self.assertEqual(final["exc_type"], "RuntimeError", answer)
        # An integral float is an int.
        w.send({"type": "trial", "trial_id": 2, "number": 1, "params": {}})
        w.recv()
        w.send({"type": "param", "trial_id": 2, "name": "k", "value": 3.0})
        self.assertEqual(w.recv()["value"], 3.0)

    def test_user_attrs_are_sent(self):
        script = self.write_script("""
            import sweepd_worker

            def objective(trial):
                trial.set_user_attr("batch_size", 128)
                trial.set_user_attr("notes", {"lr": [1e-05, 0.1], "ok": True, "s": "é"})
                trial.set_user_attr("batch_size", 256)
                attrs = trial.user_attrs
                attrs["mutated"] = 1          # a copy, as in Optuna
                try:
                    trial.set_user_attr("bad", object())
                except TypeError as exc:
                    bad = str(exc)
                return (trial.user_attrs, bad)

            sweepd_worker.serve(objective)
        """)
        w = FakeSweepd(self, script)
        w.expect_ready()
        _, final = w.run_trial(4, 0, {})
        attrs, bad = eval(final["value"])
        self.assertEqual(w.user_attrs, [
            {"type": "user_attr", "trial_id": 4, "key": "batch_size", "value": 128},
            {"type": "user_attr", "trial_id": 4, "key": "notes",
             "value": {"lr": [1e-05, 0.1], "ok": True, "s": "é"}},
            {"type": "user_attr", "trial_id": 4, "key": "batch_size", "value": 256},
        ])
        self.assertEqual(attrs, {"batch_size": 256,
                                 "notes": {"lr": [1e-05, 0.1], "ok": True, "s": "é"}})
        self.assertIn("JSON-serializable", bad)

    def test_a_refused_user_attr_is_said_on_stderr_and_the_trial_goes_on(self):
        script = self.write_script("""
            import sweepd_worker

            def objective(trial):
                trial.set_user_attr("k", 1)
                return trial.suggest_int("n", 1, 3)

            sweepd_worker.serve(objective)
        """)
        w = FakeSweepd(self, script)
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 4, "number": 0, "params": {}})
        self.assertEqual(w.recv()["type"], "user_attr")
        w.send({"type": "user_attr_refused", "trial_id": 4, "key": "k", "error": "no room"})
        suggest = w.recv()
        self.assertEqual(suggest["type"], "suggest")
        w.send({"type": "param", "trial_id": 4, "name": "n", "value": 2})
        self.assertEqual(w.recv(), {"type": "result", "trial_id": 4, "value": 2.0})
        # Between trials too.
        w.send({"type": "user_attr_refused", "trial_id": 4, "key": "late", "error": "ended"})
        _, final = w.run_trial(5, 1, {})
        self.assertEqual(final["type"], "result")
        self.assertIn("sweepd refused user attribute 'k': no room", w.stderr())
        self.assertIn("sweepd refused user attribute 'late': ended", w.stderr())

    def test_a_refused_constraint_is_said_on_stderr_and_the_trial_goes_on(self):
        script = self.write_script("""
            import sweepd_worker

            def objective(trial):
                trial.set_constraint("mem", 0.5)
                return trial.suggest_int("n", 1, 3)

            sweepd_worker.serve(objective)
        """)
        w = FakeSweepd(self, script)
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 4, "number": 0, "params": {}})
        self.assertEqual(w.recv(), {"type": "constraint", "trial_id": 4, "key": "mem",
                                    "value": 0.5})
        w.send({"type": "constraint_refused", "trial_id": 4, "key": "mem", "error": "no room"})
        self.assertEqual(w.recv()["type"], "suggest")
        w.send({"type": "param", "trial_id": 4, "name": "n", "value": 2})
        self.assertEqual(w.recv(), {"type": "result", "trial_id": 4, "value": 2.0})
        self.assertIn("sweepd refused constraint 'mem': no room", w.stderr())

    def test_datetime_start(self):
        script = self.write_script("""
            import sweepd_worker

            def objective(trial):
                return trial.datetime_start

            sweepd_worker.serve(objective)
        """)
        import datetime
        w = FakeSweepd(self, script)
        w.expect_ready()
        _, final = w.run_trial(1, 0, {}, extra={"datetime_start": "2026-01-02T03:04:05.123456"})
        self.assertEqual(eval(final["value"], {"datetime": datetime}), datetime.datetime(2026, 1, 2, 3, 4, 5, 123456))
        _, final = w.run_trial(2, 1, {}, extra={"datetime_start": "2026-01-02T03:04:05Z"})
        expected = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
        self.assertEqual(eval(final["value"], {"datetime": datetime}), expected.astimezone().replace(tzinfo=None))
        before = datetime.datetime.now()
        _, final = w.run_trial(3, 2, {})
        started = eval(final["value"], {"datetime": datetime})
        self.assertLessEqual(before, started)
        self.assertLessEqual(started, datetime.datetime.now())


class ReportOrderTests(Base):
    """report(value, step) in Optuna's order; the old order refused."""

    def test_the_old_order_worker_fails_where_it_reports(self):
        # tests/trust.rs runs it under sweepd and looks for this place in the error.
        w = FakeSweepd(self, OLD_ORDER_WORKER, protocol=1)
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"x": 0.5})
        self.assertEqual(final["exc_type"], "TypeError")
        self.assertIn("sweepd follows Optuna's report(value, step)", final["message"])
        self.assertIn('old_report_order_worker.py", line 20, in objective', final["traceback"])

    def test_report_refuses_the_old_order(self):
        chan = StubChannel()
        trial = sweepd_worker.Trial(1, 0, {}, chan, 2)
        with self.assertRaises(TypeError) as cm:
            trial.report(3, 0.41)
        self.assertEqual(
            str(cm.exception),
            "Trial.report(3, 0.41): sweepd follows Optuna's report(value, step) now, and this "
            "call can only be the old order report(step, value) (a step is an integer). "
            "Swap the arguments: trial.report(0.41, 3)")
        for args in [(0, 2.5), (7, float("nan")), (7, float("inf")), (2.0, 1e-9)]:
            self.assertRaisesRegex(TypeError, "can only be the old order", trial.report, *args)
        self.assertEqual(chan.sent, [])
        # Optuna's order, positionally or by keyword (either keyword order).
        self.assertFalse(trial.report(0.41, 3))
        self.assertFalse(trial.report(step=4, value=0.5))
        self.assertFalse(trial.report(value=1, step=5))
        self.assertFalse(trial.report(3, 6))          # value 3 at step 6: nothing to refuse
        self.assertFalse(trial.report(0.25, 7.0))     # an integral float is a step
        self.assertEqual([(m["step"], m["value"]) for m in chan.sent],
                         [(3, 0.41), (4, 0.5), (5, 1.0), (6, 3.0), (7, 0.25)])
        # By keyword it is never the old-order message.
        with self.assertRaises(TypeError) as cm:
            trial.report(value=3, step=0.41)
        self.assertNotIn("old order", str(cm.exception))
        self.assertIn("supposed to be an int", str(cm.exception))


@needs_optuna
class SuggestLocalTests(unittest.TestCase):
    """What the helper decides without asking sweepd, compared with Optuna."""

    def trial(self, channel=None, params=None):
        chan = channel if channel is not None else StubChannel()
        return sweepd_worker.Trial(1, 0, params or {}, chan, 2), chan

    def test_validation_errors_match_optunas(self):
        cases = [
            ("suggest_float", ("x", 3.0, 1.0), {}),
            ("suggest_float", ("x", 3, 1), {}),
            ("suggest_float", ("x", 0.0, 1.0), {"log": True}),
            ("suggest_float", ("x", -1.0, 1.0), {"log": True}),
            ("suggest_float", ("x", 1e-3, 1.0), {"log": True, "step": 0.1}),
            ("suggest_float", ("x", 0.0, 1.0), {"step": 0}),
            ("suggest_float", ("x", 0.0, 1.0), {"step": -0.5}),
            ("suggest_int", ("n", 10, 1), {}),
            ("suggest_int", ("n", 0, 10), {"log": True}),
            ("suggest_int", ("n", 1, 10), {"log": True, "step": 2}),
            ("suggest_int", ("n", 1, 10), {"step": 0}),
            ("suggest_int", ("n", 1, 10), {"step": -1}),
            ("suggest_categorical", ("c", []), {}),
            ("suggest_categorical", ("c", ()), {}),
            ("suggest_uniform", ("u", 2.0, 1.0), {}),
            ("suggest_loguniform", ("u", 0.0, 1.0), {}),
            ("suggest_discrete_uniform", ("u", 0.0, 1.0, 0.0), {}),
        ]
        for method, args, kwargs in cases:
            ours, _ = outcome(lambda: getattr(self.trial()[0], method)(*args, **kwargs))
            theirs, _ = outcome(lambda: getattr(optuna_trial(), method)(*args, **kwargs))
            self.assertIsNotNone(theirs, (method, args, kwargs))
            self.assertEqual(ours, theirs, (method, args, kwargs))

    def test_non_scalar_choices_are_refused_with_optunas_words(self):
        for choices in ([[1, 2]], [{"a": 1}], ["a", object()]):
            _, warned = outcome(lambda: optuna_trial().suggest_categorical("c", choices))
            ours, _ = outcome(lambda: self.trial()[0].suggest_categorical("c", choices))
            self.assertEqual(ours, (ValueError, warned[-1][1]))

    def test_adjusted_high_warns_as_optuna_does(self):
        for method, args, kwargs in [("suggest_float", ("x", 0, 1), {"step": 0.3}),
                                     ("suggest_int", ("n", 0, 10), {"step": 3}),
                                     ("suggest_discrete_uniform", ("d", 0.0, 1.05, 0.1), {})]:
            _, ours = outcome(lambda: getattr(self.trial()[0], method)(*args, **kwargs))
            _, theirs = outcome(lambda: getattr(optuna_trial(), method)(*args, **kwargs))
            self.assertEqual(ours, theirs, method)

    def test_deprecated_forms_warn_as_optuna_does(self):
        for method, args in [("suggest_uniform", ("u", 0.0, 1.0)),
                             ("suggest_loguniform", ("u", 0.1, 1.0)),
                             ("suggest_discrete_uniform", ("u", 0.0, 1.0, 0.5))]:
            _, ours = outcome(lambda: getattr(self.trial()[0], method)(*args))
            _, theirs = outcome(lambda: getattr(optuna_trial(), method)(*args))
            self.assertEqual(ours, theirs, method)

    def test_incompatible_resuggest_is_refused_locally(self):
        sequences = [
            [("suggest_float", ("x", 0.0, 1.0), {}), ("suggest_int", ("x", 0, 1), {})],
            [("suggest_int", ("x", 0, 1), {}), ("suggest_categorical", ("x", [0, 1]), {})],
            [("suggest_float", ("x", 0.1, 1.0), {}), ("suggest_float", ("x", 0.1, 1.0),
                                                       {"log": True})],
            [("suggest_int", ("x", 1, 9), {"log": True}), ("suggest_int", ("x", 1, 9), {})],
            [("suggest_categorical", ("x", ["a", "b"]), {}),
             ("suggest_categorical", ("x", ["a", "c"]), {})],
            [("suggest_categorical", ("x", ["a", "b"]), {}),
             ("suggest_categorical", ("x", ["a"]), {})],
            [("suggest_loguniform", ("x", 0.1, 1.0), {}), ("suggest_uniform", ("x", 0.1, 1.0), {})],
        ]
        for seq in sequences:
            trial, chan = self.trial()
            ot = optuna_trial()
            (m1, a1, k1), (m2, a2, k2) = seq
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                getattr(trial, m1)(*a1, **k1)
                getattr(ot, m1)(*a1, **k1)
            ours, _ = outcome(lambda: getattr(trial, m2)(*a2, **k2))
            theirs, _ = outcome(lambda: getattr(ot, m2)(*a2, **k2))
            self.assertIsNotNone(theirs, seq)
            self.assertEqual(ours, theirs, seq)
            self.assertEqual(len(chan.suggests), 1, "refused without asking sweepd")

    def test_compatible_resuggest_keeps_the_first_value_as_optuna_does(self):
        trial, chan = self.trial()
        ot = optuna_trial()
        first = trial.suggest_float("x", 0.0, 1.0)
        ot.suggest_float("x", 0.0, 1.0)
        _, ours = outcome(lambda: self.assertEqual(trial.suggest_float("x", 0.5, 2.0), first))
        _, theirs = outcome(lambda: ot.suggest_float("x", 0.5, 2.0))
        self.assertEqual(ours, theirs)
        self.assertEqual(ours[0][0], RuntimeWarning)
        self.assertEqual(len(chan.suggests), 1)
        self.assertEqual(trial.suggest_float("x", 0.0, 1.0), first)
        self.assertEqual(len(chan.suggests), 1)
        # The distribution recorded is the first one, as in Optuna.
        self.assertEqual(trial.distributions["x"], ot.distributions["x"])

    def test_distributions_are_optunas_look_alikes(self):
        trial, _ = self.trial()
        ot = optuna_trial()
        for method, args, kwargs in SUGGEST_FORMS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                getattr(trial, method)(*args, **kwargs)
                getattr(ot, method)(*args, **kwargs)
        ours, theirs = trial.distributions, ot.distributions
        self.assertEqual(list(ours), list(theirs))
        for name in ours:
            self.assertEqual(type(ours[name]).__name__, type(theirs[name]).__name__)
            self.assertEqual(ours[name], theirs[name])
            self.assertEqual(theirs[name], ours[name])
            self.assertFalse(ours[name] != theirs[name])
            self.assertEqual(repr(ours[name]), repr(theirs[name]))
            self.assertEqual(vars(ours[name]), vars(theirs[name]))
            self.assertEqual(sweepd_worker.distribution_to_json(ours[name]),
                             optuna_distributions.distribution_to_json(theirs[name]))
            self.assertEqual(ours[name].single(), theirs[name].single())
            self.assertEqual(hash(ours[name]), hash(type(ours[name])(**vars(ours[name]))))
        self.assertNotEqual(ours["f_plain"], ours["f_log"])
        self.assertNotEqual(sweepd_worker.FloatDistribution(0, 1),
                            sweepd_worker.IntDistribution(0, 1))
        # trial.distributions is a copy.
        trial.distributions.clear()
        self.assertEqual(len(trial.distributions), len(SUGGEST_FORMS))

    def test_report_checks_match_optunas(self):
        for args, kwargs in [(("abc", 1), {}), ((None, 1), {}), ((1.0, -1), {}),
                             ((1.0, "x"), {}), ((1.0, None), {})]:
            ours, _ = outcome(lambda: self.trial()[0].report(*args, **kwargs))
            theirs, _ = outcome(lambda: optuna_trial().report(*args, **kwargs))
            self.assertIsNotNone(theirs)
            self.assertEqual(ours[0], theirs[0], args)
            if args[1] == -1 or isinstance(args[0], str) or args[0] is None:
                self.assertEqual(ours, theirs, args)
        for args, kwargs, text in [((), {}, "missing 2 required positional arguments"),
                                   ((1.0,), {}, "missing 1 required positional argument: 'step'"),
                                   ((1.0, 2, 3), {}, "takes 3 positional arguments but 4"),
                                   ((1.0,), {"value": 2}, "multiple values for argument 'value'"),
                                   ((1.0, 2), {"epoch": 1}, "unexpected keyword argument 'epoch'")]:
            self.assertRaisesRegex(TypeError, re.escape(text), self.trial()[0].report,
                                   *args, **kwargs)
        # Finished trials refuse reports; values that float() takes are fine.
        trial, chan = self.trial()
        trial.report(float("nan"), 0)
        trial.report(True, 1)
        self.assertEqual([m["value"] for m in chan.sent], ["nan", 1.0])

    def test_set_user_attr_checks(self):
        trial, chan = self.trial()
        self.assertRaisesRegex(TypeError, "JSON-serializable", trial.set_user_attr, "k", object())
        self.assertRaisesRegex(TypeError, "JSON-serializable", trial.set_user_attr, "k",
                               float("nan"))
        self.assertRaisesRegex(TypeError, "JSON-serializable", trial.set_user_attr, "k",
                               {1, 2})
        self.assertRaises(TypeError, trial.set_user_attr, 3, "v")
        self.assertRaisesRegex(ValueError, "line limit", trial.set_user_attr, "k",
                               "x" * (2 << 20))
        self.assertEqual(chan.sent, [])
        self.assertEqual(trial.user_attrs, {})
        trial.set_user_attr("k", (1, 2))
        self.assertEqual(trial.user_attrs, {"k": (1, 2)})
        self.assertEqual(chan.sent, [{"type": "user_attr", "trial_id": 1, "key": "k",
                                      "value": (1, 2)}])

    @needs_optuna
    def test_set_constraint_behaves_as_optuna_5s(self):
        trial, chan = self.trial()
        ot = optuna_trial()
        calls = [("mem", 2.5), ("lat", -1), ("mem", -3.0), ("x", float("nan")), ("y", "abc"),
                 ("z", None), ("big", float("inf")), ("s", "0.25")]
        for key, value in calls:
            ours = outcome(lambda: trial.set_constraint(key, value))
            theirs = outcome(lambda: ot.set_constraint(key, value))
            self.assertEqual(ours[0], theirs[0], (key, value))
            self.assertEqual([c for c, _ in ours[1]], [c for c, _ in theirs[1]], (key, value))
            self.assertEqual([t for _, t in ours[1]], [t for _, t in theirs[1]], (key, value))
        self.assertEqual(trial.constraints, ot.constraints)
        self.assertEqual(trial.constraints, {"mem": 2.5, "lat": -1.0, "big": float("inf"),
                                             "s": 0.25})
        self.assertEqual(chan.sent, [
            {"type": "constraint", "trial_id": 1, "key": "mem", "value": 2.5},
            {"type": "constraint", "trial_id": 1, "key": "lat", "value": -1.0},
            {"type": "constraint", "trial_id": 1, "key": "big", "value": "inf"},
            {"type": "constraint", "trial_id": 1, "key": "s", "value": 0.25},
        ])

    def test_set_constraint_refuses_what_sweepd_would(self):
        trial, chan = self.trial()
        self.assertRaisesRegex(ValueError, "NUL", trial.set_constraint, "a\0b", 1.0)
        self.assertRaisesRegex(ValueError, "at most 512 characters",
                               trial.set_constraint, "k" * 501, 1.0)
        self.assertRaises(TypeError, trial.set_constraint, 3, 1.0)
        self.assertEqual(chan.sent, [])
        trial.set_constraint("k" * 500, 1.0)
        self.assertEqual(len(chan.sent), 1)
        trial._finished = True
        self.assertRaisesRegex(RuntimeError, "after the trial finished",
                               trial.set_constraint, "late", 1.0)

    def test_set_user_attr_refuses_what_sweepd_would(self):
        # What PostgreSQL cannot store is refused on SQLite too, and as sweepd reads JSON.
        trial, chan = self.trial()

        def nested(levels):
            v = []
            for _ in range(levels - 1):
                v = [v]
            return v

        deep = nested(127)
        for key, value, text in [
            ("k" * 513, 1, "at most 512 characters"),
            ("a\0b", 1, "NUL"),
            ("sweepd:fail_reason", "forged", "reserved for sweepd"),
            ("deep", deep, "nested too deep"),
            ("big", {"n": [2 ** 64]}, "the integer 18446744073709551616"),
            ("small", -(2 ** 63) - 1, "beyond what sweepd keeps exactly"),
        ]:
            self.assertRaisesRegex(ValueError, re.escape(text), trial.set_user_attr, key, value)
        self.assertEqual(chan.sent, [])
        trial.set_user_attr("k" * 512, [nested(125), 2 ** 64 - 1, -(2 ** 63)])
        self.assertEqual(len(chan.sent), 1)

    def test_report_refuses_a_step_postgresql_cannot_store(self):
        trial, chan = self.trial()
        self.assertRaisesRegex(ValueError, "at most 2147483647", trial.report, 1.0, 2 ** 31)
        trial.report(1.0, 2 ** 31 - 1)
        self.assertEqual([m["step"] for m in chan.sent], [2 ** 31 - 1])

    def test_finished_trial_refuses(self):
        trial, _ = self.trial()
        trial._finished = True
        for call in (lambda: trial.suggest_float("x", 0, 1), lambda: trial.report(1.0, 0),
                     lambda: trial.set_user_attr("k", 1)):
            self.assertRaisesRegex(RuntimeError, "after the trial finished", call)


@needs_optuna
class ProtocolDocTests(unittest.TestCase):
    def test_the_distribution_table_is_what_the_helper_sends(self):
        with open(PROTOCOL_DOC) as f:
            doc = f.read()
        section = doc.split("### `suggest` (worker to sweepd)", 1)[1].split("###", 1)[0]
        rows = re.findall(r"^\| `(trial\.)?(suggest_\w+\(.*?\))`(?: \(deprecated\))? \| `(.*)` \|$",
                          section, re.M)
        self.assertEqual(len(rows), 10)
        for _, call, text in rows:
            chan = StubChannel()
            trial = sweepd_worker.Trial(1, 0, {}, chan, 2)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                eval("trial." + call, {"trial": trial})
                ot = optuna_trial()
                eval("trial." + call, {"trial": ot})
            (name, sent), = chan.suggests
            self.assertEqual(json.dumps(sent, separators=(",", ":")), text, call)
            self.assertEqual(ordered(text),
                             ordered(optuna_distributions.distribution_to_json(
                                 ot.distributions[name])), call)

    def test_the_old_order_message_in_the_docs_is_the_helpers(self):
        trial = sweepd_worker.Trial(1, 0, {}, None)
        with self.assertRaises(TypeError) as cm:
            trial.report(3, 0.41)
        for doc in (PROTOCOL_DOC, os.path.join(ROOT, "docs", "troubleshooting.md")):
            with open(doc) as f:
                self.assertIn("TypeError: " + str(cm.exception), f.read(), doc)


class ProtocolOneTests(Base):
    """An older sweepd (SWEEPD_PROTOCOL=1): the values sampled from [params], checked."""

    SCRIPT = """
        import sys
        import sweepd_worker

        def objective(trial):
            x = trial.suggest_float("x", -5.0, 5.0)
            y = trial.suggest_int("y", -4, 8, step=2)
            opt = trial.suggest_categorical("optimizer", ["adam", "sgd"])
            lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
            trial.set_user_attr("note", "kept here")
            if trial.params.get("extra"):
                trial.suggest_float("dropout", 0.0, 0.5)
            trial.report(x, 0)
            return (x, y, opt, lr, trial.params, trial.user_attrs,
                    sorted(trial.distributions))

        sweepd_worker.serve(objective)
    """

    def test_presampled_values(self):
        w = FakeSweepd(self, self.write_script(self.SCRIPT), protocol=1)
        w.expect_ready(protocol=1)
        params = {"x": 1.5, "y": 2, "optimizer": "sgd", "lr": 0.001}
        reports, final = w.run_trial(1, 0, params)
        self.assertEqual(w.suggests, [])
        self.assertEqual(w.user_attrs, [])
        self.assertEqual(reports[0]["value"], 1.5)
        x, y, opt, lr, got, attrs, dists = eval(final["value"])
        self.assertEqual((x, y, opt, lr), (1.5, 2, "sgd", 0.001))
        self.assertIs(type(y), int)
        self.assertEqual(got, params)
        self.assertEqual(attrs, {"note": "kept here"})
        self.assertEqual(dists, ["lr", "optimizer", "x", "y"])
        self.assertIn("user attributes stay in this process", w.stderr())

    def test_a_name_not_in_params_is_a_clear_error(self):
        w = FakeSweepd(self, self.write_script(self.SCRIPT), protocol=1)
        w.expect_ready(protocol=1)
        _, final = w.run_trial(1, 0, {"x": 1.5, "y": 2, "optimizer": "sgd", "lr": 0.001,
                                      "extra": True})
        self.assertEqual(final["exc_type"], "RuntimeError")
        self.assertIn("this sweepd speaks protocol 1", final["message"])
        self.assertIn("define your search space in [params]", final["message"])
        self.assertIn("'dropout'", final["message"])

    def test_a_value_outside_the_distribution_is_a_value_error(self):
        w = FakeSweepd(self, self.write_script(self.SCRIPT), protocol=1)
        w.expect_ready(protocol=1)
        for params in ({"x": 7.5, "y": 2, "optimizer": "sgd", "lr": 0.001},
                       {"x": 1.0, "y": 3, "optimizer": "sgd", "lr": 0.001},
                       {"x": 1.0, "y": 2.5, "optimizer": "sgd", "lr": 0.001},
                       {"x": 1.0, "y": True, "optimizer": "sgd", "lr": 0.001},
                       {"x": 1.0, "y": 2, "optimizer": "rmsprop", "lr": 0.001},
                       {"x": "1.0", "y": 2, "optimizer": "sgd", "lr": 0.001},
                       {"x": 1.0, "y": 2, "optimizer": "sgd", "lr": 0.0}):
            _, final = w.run_trial(1, 0, params)
            self.assertEqual(final["exc_type"], "ValueError", params)
            self.assertIn("sampled by sweepd from the study's [params], is not in",
                          final["message"])

    def test_negotiation(self):
        cases = [(None, 1), ("", 1), ("1", 1), ("2", 2), (" 2 ", 2), ("3", 2), ("x", 1),
                 ("0", 1)]
        saved = os.environ.get("SWEEPD_PROTOCOL")
        self.addCleanup(lambda: os.environ.__setitem__("SWEEPD_PROTOCOL", saved)
                        if saved is not None else os.environ.pop("SWEEPD_PROTOCOL", None))
        for raw, expected in cases:
            if raw is None:
                os.environ.pop("SWEEPD_PROTOCOL", None)
            else:
                os.environ["SWEEPD_PROTOCOL"] = raw
            with open(os.devnull, "w") as devnull:
                stderr, sys.stderr = sys.stderr, devnull
                try:
                    got = sweepd_worker._negotiate_protocol()
                finally:
                    sys.stderr = stderr
            self.assertEqual(got, expected, raw)


@needs_optuna
class OneshotSuggestTests(Base):
    SCRIPT = """
        import sweepd_worker

        def objective(trial):
            x = trial.suggest_float("x", -5.0, 5.0)
            if trial.params.get("more"):
                lr = trial.suggest_float("lr", 1e-5, 1e-1, log=True)
                trial.set_user_attr("lr_was", lr)
                x += lr
            trial.report(x, 0)
            return x

        sweepd_worker.serve(objective)
    """

    def oneshot(self, params, channel=True, protocol=2):
        tmp = tempfile.mkdtemp(prefix="sweepd-oneshot-")
        self.addCleanup(shutil.rmtree, tmp, True)
        result_file = os.path.join(tmp, "result")
        env = {"SWEEPD_TRIAL_ID": "42", "SWEEPD_TRIAL_NUMBER": "7",
               "SWEEPD_RESULT_FILE": result_file, "SWEEPD_PARAMS": json.dumps(params)}
        w = FakeSweepd(self, self.write_script(self.SCRIPT), mode="oneshot", env=env,
                       channel=channel, protocol=protocol)
        return w, result_file

    def test_with_a_channel_suggests_go_to_sweepd(self):
        w, rf = self.oneshot({"x": 1.5, "more": True})
        w.expect_ready()
        reports, final = w.serve_trial(42, {"x": 1.5, "more": True})
        self.assertEqual([m["name"] for m in w.suggests], ["x", "lr"])
        lr = w.sampler.values[(42, "lr")]
        self.assertEqual(w.user_attrs, [{"type": "user_attr", "trial_id": 42,
                                         "key": "lr_was", "value": lr}])
        self.assertEqual(final, {"type": "result", "trial_id": 42, "value": 1.5 + lr})
        self.assertEqual(w.wait(), 0)
        with open(rf) as f:
            self.assertEqual(f.read(), repr(1.5 + lr))

    def test_protocol_one_with_a_channel(self):
        w, rf = self.oneshot({"x": 1.5, "more": True}, protocol=1)
        w.expect_ready()
        _, final = w.serve_trial(42, {})
        self.assertEqual(final["exc_type"], "RuntimeError")
        self.assertIn("this sweepd speaks protocol 1", final["message"])
        self.assertEqual(w.wait(), 1)

    def test_without_a_channel_only_presampled_names(self):
        w, rf = self.oneshot({"x": 1.5}, channel=False)
        self.assertEqual(w.wait(), 0)
        with open(rf) as f:
            self.assertEqual(f.read(), "1.5")
        w, rf = self.oneshot({"x": 1.5, "more": True}, channel=False)
        self.assertEqual(w.wait(), 1)
        self.assertFalse(os.path.exists(rf))
        self.assertIn("RuntimeError: Trial.suggest_float('lr'): 'lr' is not among this trial's "
                      "params, and this worker has no channel to sweepd", w.stderr())


# An objective written for Optuna, with branches: a classifier choice with its own params,
# and n_layers followed by one n_units_l{i} per layer. It runs unchanged under both.
OPTUNA_OBJECTIVE = r"""
import math
import optuna


def objective(trial):
    classifier = trial.suggest_categorical("classifier", ["SVC", "RandomForest", "MLP"])
    if classifier == "SVC":
        c = trial.suggest_float("svc_c", 1e-10, 1e10, log=True)
        kernel = trial.suggest_categorical("svc_kernel", ["linear", "rbf", None])
        score = 1.0 - abs(math.log10(c)) / 10.0 + (0.05 if kernel == "rbf" else 0.0)
    elif classifier == "RandomForest":
        depth = trial.suggest_int("rf_max_depth", 2, 32, log=True)
        trees = trial.suggest_int("rf_n_estimators", 10, 100, step=10)
        score = 1.0 / depth + trees / 1000.0
    else:
        n_layers = trial.suggest_int("n_layers", 1, 3)
        units = [trial.suggest_int("n_units_l{}".format(i), 4, 128, log=True)
                 for i in range(n_layers)]
        dropout = trial.suggest_float("dropout", 0.0, 0.5, step=0.1)
        lr = trial.suggest_loguniform("lr", 1e-5, 1e-1)      # old scripts still have these
        score = sum(units) / 400.0 - dropout + math.log10(lr) / 100.0
    trial.set_user_attr("family", classifier)
    for epoch in range(3):
        trial.report(score * (epoch + 1) / 3.0, epoch)
        if trial.should_prune():
            raise optuna.TrialPruned()
    return score
"""


@needs_optuna
class OptunaObjectiveTests(Base):
    def test_an_optuna_objective_runs_unchanged_under_serve(self):
        # Steer the branches so that every one is taken: classifier and n_layers by trial id.
        families = ["SVC", "RandomForest", "MLP", "MLP", "MLP", "SVC"]
        sampler = FakeSampler(seed=3, choose={
            "classifier": lambda tid: families[(tid - 1) % len(families)],
            "n_layers": lambda tid: {3: 1, 4: 2, 5: 3}.get(tid, 2),
        })
        w = FakeSweepd(self, self.write_script(
            OPTUNA_OBJECTIVE + "\nimport sweepd_worker\nsweepd_worker.serve(objective)\n"),
            sampler=sampler)
        w.expect_ready()
        # The same objective under Optuna itself, replaying the values sweepd answered.
        namespace = {}
        exec(compile(OPTUNA_OBJECTIVE, "optuna_objective", "exec"), namespace)
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        study = optuna.create_study(direction="maximize", pruner=optuna.pruners.NopPruner())
        expected_names = {
            "SVC": ["classifier", "svc_c", "svc_kernel"],
            "RandomForest": ["classifier", "rf_max_depth", "rf_n_estimators"],
        }
        for tid, family in enumerate(families, start=1):
            reports, final = w.run_trial(tid, tid - 1, {})
            self.assertEqual(final["type"], "result", final)
            names = [m["name"] for m in w.suggests]
            if family == "MLP":
                n = sampler.values[(tid, "n_layers")]
                self.assertEqual(names, ["classifier", "n_layers"]
                                 + ["n_units_l%d" % i for i in range(n)] + ["dropout", "lr"])
            else:
                self.assertEqual(names, expected_names[family])
            answered = {m["name"]: sampler.values[(tid, m["name"])] for m in w.suggests}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                study.enqueue_trial(answered)
                study.optimize(namespace["objective"], n_trials=1)
            ot = study.trials[-1]
            self.assertEqual(ot.params, answered)
            self.assertEqual(final["value"], ot.value)
            self.assertEqual({m["name"]: ordered(m["distribution"]) for m in w.suggests},
                             {k: ordered(optuna_distributions.distribution_to_json(d))
                              for k, d in ot.distributions.items()})
            self.assertEqual([(r["step"], r["value"]) for r in reports],
                             sorted(ot.intermediate_values.items()))
            self.assertEqual({m["key"]: m["value"] for m in w.user_attrs}, ot.user_attrs)
        # optuna.TrialPruned ends a trial as pruned.
        _, final = w.run_trial(99, 6, {}, prune_at=1)
        self.assertEqual(final, {"type": "pruned", "trial_id": 99})
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)
        self.assertIn("suggest_loguniform has been deprecated", w.stderr())


if __name__ == "__main__":
    unittest.main()
