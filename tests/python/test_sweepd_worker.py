"""Tests for python/sweepd_worker.py, playing the sweepd side of the protocol.

Run with:  python3 -m unittest discover -s tests/python -v
"""

import json
import os
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


class FakeSweepd(object):
    """Launches a worker over a socketpair and speaks the sweepd side."""

    def __init__(self, test, script, mode="persistent", env=None, args=(),
                 channel=True):
        self.test = test
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
            "SWEEPD_PROTOCOL": "1",
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

    def expect_ready(self):
        msg = self.recv()
        self.test.assertEqual(msg, {"type": "ready", "pid": self.proc.pid, "protocol": 1})
        return msg

    def run_trial(self, trial_id, number, params, prune_at=None):
        """Send a trial, answer its reports; return (reports, final message)."""
        self.send({"type": "trial", "trial_id": trial_id, "number": number, "params": params})
        reports = []
        while True:
            msg = self.recv()
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
            import os, sys, types
            import sweepd_worker

            LOG = os.environ["CALLS"]

            def log(what):
                with open(LOG, "a") as f:
                    f.write(what + "\n")

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
                return 1.0

            sweepd_worker.serve(objective)
        """)
        calls = os.path.join(tempfile.mkdtemp(prefix="sweepd-calls-"), "calls")
        self.addCleanup(shutil.rmtree, os.path.dirname(calls), True)
        w = FakeSweepd(self, script, env={"CALLS": calls})
        w.expect_ready()
        _, final = w.run_trial(3, 0, {})
        with open(calls) as f:
            self.assertEqual(f.read().split(), ["reset", "objective", "empty_cache"])
        self.assertEqual(final["value"], 1.0)
        self.assertEqual(final["memory"], {"framework": "torch",
                                           "peak_allocated": 3 << 30,
                                           "peak_reserved": 4 << 30})
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)

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
        _, final = w.run_trial(3, 2, {"steps": 0, "mode": "list"})
        self.assertEqual(final["value"], "[1, 2]")

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

    def test_eof_during_trial_exits_quietly_on_broken_pipe(self):
        w = self.generic()
        w.expect_ready()
        w.send({"type": "trial", "trial_id": 1, "number": 0,
                "params": {"steps": 0, "mode": "sleep", "seconds": 0.5}})
        time.sleep(0.1)
        w.reader.close()
        w.sock.close()
        w.sock = None
        self.assertEqual(w.wait(), 0)
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
        self.assertEqual(sweepd_worker.PROTOCOL_VERSION, 1)

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
        w = FakeSweepd(self, self.write_script(code))
        w.expect_ready()
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


class StubChannel(object):
    """In-process stand-in for the channel: records what would be sent."""

    def __init__(self):
        self.sent = []

    def request_prune(self, trial_id, step, value):
        self.sent.append({"type": "report", "trial_id": trial_id, "step": step, "value": value})
        return False


class ReportOrderTests(Base):
    """report(value, step) in Optuna's order; the old order refused."""

    def test_the_old_order_worker_fails_where_it_reports(self):
        # tests/trust.rs runs it under sweepd and looks for this place in the error.
        w = FakeSweepd(self, OLD_ORDER_WORKER)
        w.expect_ready()
        _, final = w.run_trial(1, 0, {"x": 0.5})
        self.assertEqual(final["exc_type"], "TypeError")
        self.assertIn("sweepd follows Optuna's report(value, step)", final["message"])
        self.assertIn('old_report_order_worker.py", line 20, in objective', final["traceback"])

    def test_report_refuses_the_old_order(self):
        chan = StubChannel()
        trial = sweepd_worker.Trial(1, 0, {}, chan)
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


    def test_report_checks(self):
        trial = sweepd_worker.Trial(1, 0, {}, None)
        self.assertFalse(trial.should_prune())
        self.assertRaisesRegex(TypeError, "The `value` argument is of type", trial.report, "abc", 1)
        self.assertRaisesRegex(ValueError, "`step=-1` must be non-negative.", trial.report, 1.0, -1)
        self.assertRaisesRegex(TypeError, "supposed to be an int", trial.report, 1.0, "x")
        self.assertRaisesRegex(TypeError, "missing 1 required positional argument: 'step'",
                               trial.report, 1.0)


if __name__ == "__main__":
    unittest.main()
