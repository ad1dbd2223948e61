"""Tests for tests/workers/gpu_sim_worker.py, the simulated GPU worker.

The tests play sweepd: a socketpair channel, the SWEEPD_* environment, and a
fake NVML state file the worker "allocates" in.

Run with:  python3 -m unittest discover -s tests/python -v
"""

import importlib.util
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
WORKER = os.path.join(ROOT, "tests", "workers", "gpu_sim_worker.py")
TIMEOUT = 20.0
MIB, GIB = 1 << 20, 1 << 30
CONTEXT = 500 * MIB

_spec = importlib.util.spec_from_file_location("gpu_sim_worker", WORKER)
sim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim)


def dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


class Worker(object):
    """One simulated worker on a socketpair, driven the way sweepd drives it."""

    def __init__(self, test, state, env=None, mode="persistent", channel=True):
        self.test = test
        self.state = state
        self.stderr_path = os.path.join(test.tmp, "stderr-%d" % len(test.workers))
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "SWEEPD_MODE": mode,
            "SWEEPD_WORKER_ID": "1",
            "SWEEPD_STUDY": "t",
            "SWEEPD_PROTOCOL": "1",
            "FAKE_NVML_STATE": state,
            "CUDA_VISIBLE_DEVICES": "0",
            "SIM_RAMP_S": "0.02",
            "SIM_HOLD_S": "0",
        }
        full_env.update(env or {})
        self.sock, pass_fds = None, ()
        if channel:
            self.sock, child = socket.socketpair()
            self.sock.settimeout(TIMEOUT)
            self.reader = self.sock.makefile("rb")
            full_env["SWEEPD_FD"] = str(child.fileno())
            pass_fds = (child.fileno(),)
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, WORKER], env=full_env, pass_fds=pass_fds,
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                start_new_session=True)
        if channel:
            child.close()
        self.pid = self.proc.pid
        test.workers.append(self)
        test.addCleanup(self.cleanup)

    def cleanup(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        if self.sock is not None:
            self.reader.close()
            self.sock.close()

    def send(self, msg):
        self.sock.sendall(json.dumps(msg).encode() + b"\n")

    def recv(self):
        """The next message, the helper's ``memory`` figures left out (the simulated torch
        reports them as PyTorch would)."""
        while True:
            line = self.reader.readline()
            self.test.assertTrue(line.endswith(b"\n"), "expected a message, got %r" % (line,))
            msg = json.loads(line)
            if msg.get("type") != "memory":
                return msg

    def assert_silent(self, seconds):
        """No message but ``memory`` figures for ``seconds``."""
        deadline = time.monotonic() + seconds
        while select.select([self.sock], [], [], max(deadline - time.monotonic(), 0))[0]:
            line = self.reader.readline()
            self.test.assertEqual(json.loads(line).get("type"), "memory", line)

    def ready(self):
        self.test.assertEqual(self.recv(), {"type": "ready", "pid": self.pid, "protocol": 1})
        return self

    def trial(self, number, params, prune_at=None):
        """Run one trial; return (reports, final message)."""
        self.send({"type": "trial", "trial_id": number + 1, "number": number,
                   "params": params})
        reports = []
        while True:
            msg = self.recv()
            if msg["type"] != "report":
                return reports, msg
            reports.append(msg)
            self.send({"type": "prune", "trial_id": msg["trial_id"], "step": msg["step"],
                       "prune": prune_at is not None and msg["step"] >= prune_at})

    def shutdown(self):
        self.send({"type": "shutdown"})
        return self.wait()

    def wait(self):
        return self.proc.wait(TIMEOUT)

    def usage(self, pid=None):
        """Every size this pid wrote to the state file, in order."""
        pid = self.pid if pid is None else pid
        with open(self.state) as f:
            return [int(w[3]) for w in (line.split() for line in f)
                    if w[:1] == ["proc"] and w[1] == "0" and int(w[2]) == pid]

    def stderr(self):
        with open(self.stderr_path, "rb") as f:
            return f.read().decode("utf-8", "replace")


def oom_text(x, total, free_mib, own, alloc, frag):
    return (
        "CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a total capacity of "
        "%.2f GiB of which %.2f MiB is free. Including non-PyTorch memory, this process has "
        "%.2f GiB memory in use. Of the allocated memory %.2f GiB is allocated by PyTorch, "
        "and %.2f GiB is reserved by "
        "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
        "documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        % (x, total, free_mib, own, alloc, frag))


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="gpu-sim-test-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.workers = []
        self.state = os.path.join(self.tmp, "nvml-state")
        self.write_state("gpu 0 8G Fake H100 80GB HBM3", "prune_dead_pids")

    def write_state(self, *lines):
        with open(self.state, "a") as f:
            f.write("".join(line + "\n" for line in lines))

    def worker(self, **env):
        return Worker(self, self.state, env=env).ready()


class MemoryTests(Base):
    def test_ramps_to_peak_and_back_to_baseline(self):
        w = self.worker(SIM_STEPS="4")
        self.assertEqual(w.usage(), [CONTEXT])  # the context, before any trial
        reports, result = w.trial(0, {"mem": 2048})
        self.assertEqual(result, {"type": "result", "trial_id": 1, "value": 2048.0 ** 2,
                                  "memory": {"framework": "torch",
                                             "peak_allocated": 2048 * MIB,
                                             "peak_reserved": 2048 * MIB,
                                             "reserved": 0}})
        self.assertEqual([r["step"] for r in reports], [0, 1, 2, 3])
        self.assertEqual([r["value"] for r in reports], [2048.0 ** 2 + k for k in (3, 2, 1, 0)])
        # The freed tensors stay reserved by the caching allocator until the helper empties
        # the cache, before it sends the result.
        self.assertEqual(w.usage(), [CONTEXT + k * 512 * MIB for k in range(5)]
                         + [CONTEXT + 2048 * MIB, CONTEXT])
        _, result = w.trial(1, {"mem": "1G", "steps": 2})
        self.assertEqual(result["type"], "result")
        self.assertEqual(w.usage()[-4:], [CONTEXT + GIB // 2, CONTEXT + GIB, CONTEXT + GIB,
                                          CONTEXT])
        self.assertEqual(w.shutdown(), 0)
        self.assertEqual(w.usage()[-1], 0)
        self.assertNotIn((0, w.pid), sim.read_state(self.state)[1])

    def test_env_defaults(self):
        w = self.worker(SIM_MEM="3G", SIM_STEPS="3", SIM_CONTEXT="1G")
        reports, result = w.trial(0, {"x": 2})
        self.assertEqual((len(reports), result["value"]), (3, 4.0))
        self.assertEqual(w.usage(), [GIB, 2 * GIB, 3 * GIB, 4 * GIB, 4 * GIB, GIB])

    def test_pruned_trial_frees(self):
        w = self.worker(SIM_STEPS="4")
        reports, msg = w.trial(0, {"mem": 1024}, prune_at=1)
        self.assertEqual((len(reports), msg["type"]), (2, "pruned"))
        self.assertEqual(w.usage()[-2:], [CONTEXT + 512 * MIB, CONTEXT])

    def test_oom_with_pytorch_text(self):
        self.write_state("proc 0 %d 7G" % os.getpid())  # alive: kept by prune_dead_pids
        w = self.worker(SIM_STEPS="4")
        reports, err = w.trial(0, {"mem": 2048})
        self.assertEqual(len(reports), 1)  # the first 512 MiB fit, the second did not
        self.assertEqual(err["type"], "error")
        self.assertEqual(err["exc_type"], "torch.OutOfMemoryError")
        self.assertEqual(err["message"], oom_text(0.5, 8, 12, 1012 / 1024, 0.5, 0))
        self.assertIn("OutOfMemoryError: CUDA out of memory.", err["traceback"])
        self.assertEqual(w.usage()[-1], CONTEXT)  # freed after the failure
        _, result = w.trial(1, {"mem": 512})  # the worker goes on
        self.assertEqual(result["type"], "result")

    def test_dead_pids_are_pruned(self):
        self.write_state("proc 0 %d 7G" % dead_pid())
        w = self.worker()
        self.assertEqual(w.trial(0, {"mem": 4096})[1]["type"], "result")

    def test_dead_pids_count_without_prune_directive(self):
        with open(self.state, "w") as f:
            f.write("gpu 0 8G Fake\nproc 0 %d 7G\n" % dead_pid())
        w = self.worker()
        self.assertEqual(w.trial(0, {"mem": 4096})[1]["exc_type"], "torch.OutOfMemoryError")

    def test_last_line_wins_and_zero_removes(self):
        me = os.getpid()
        self.write_state("proc 0 %d 7G" % me, "proc 0 %d 1G" % me)
        w = self.worker()
        self.assertEqual(w.trial(0, {"mem": 4096})[1]["type"], "result")
        self.write_state("proc 0 %d 7G" % me)
        self.assertEqual(w.trial(1, {"mem": 4096})[1]["type"], "error")
        self.write_state("proc 0 %d 0" % me)
        self.assertEqual(w.trial(2, {"mem": 4096})[1]["type"], "result")

    def test_device_from_cuda_visible_devices(self):
        self.write_state("gpu 1 4G Other", "proc 0 %d 7G" % os.getpid())
        w = self.worker(CUDA_VISIBLE_DEVICES="1,0")
        self.assertEqual(w.trial(0, {"mem": 3072})[1]["type"], "result")
        err = w.trial(1, {"mem": 3700, "steps": 1})[1]
        self.assertIn("GPU 1 has a total capacity of 4.00 GiB", err["message"])
        self.assertEqual(w.usage(), [])  # nothing written for device 0
        self.assertIn((1, w.pid), sim.read_state(self.state)[1])

    def test_fragmentation_grows_baseline_and_shows_in_oom(self):
        w = self.worker(SIM_FRAG_PER_TRIAL="1G", SIM_STEPS="4")
        for n in range(2):
            self.assertEqual(w.trial(n, {"mem": 512})[1]["type"], "result")
            self.assertEqual(w.usage()[-1], CONTEXT + (n + 1) * GIB)
        # 500 MiB + 2 GiB baseline, 1.5 GiB steps: the fourth one does not fit in 8 GiB.
        reports, err = w.trial(2, {"mem": 6144})
        self.assertEqual(len(reports), 3)
        free = (8 * GIB - CONTEXT - 2 * GIB - 4.5 * GIB) / MIB
        self.assertEqual(err["message"], oom_text(1.5, 8, free, (CONTEXT + 6.5 * GIB) / GIB,
                                                  4.5, 2))
        self.assertEqual(w.usage()[-1], CONTEXT + 3 * GIB)  # failed trials fragment too

    def test_expandable_segments_reduce_fragmentation(self):
        conf = {"SIM_FRAG_PER_TRIAL": "1G",
                "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
        w = self.worker(SIM_EXPANDABLE_HELPS="1", **conf)
        w.trial(0, {"mem": 256})
        self.assertEqual(w.usage()[-1], CONTEXT + GIB // 10)
        w2 = self.worker(**conf)  # without SIM_EXPANDABLE_HELPS it does not help
        w2.trial(0, {"mem": 256})
        self.assertEqual(w2.usage()[-1], CONTEXT + GIB)

    def test_delay_start_allocates_nothing_at_first(self):
        w = self.worker(SIM_DELAY_START_S="0.6")
        w.send({"type": "trial", "trial_id": 1, "number": 0, "params": {"mem": 1024}})
        start = time.monotonic()
        time.sleep(0.3)
        self.assertEqual(w.usage(), [CONTEXT])
        self.assertEqual(w.recv()["type"], "report")
        self.assertGreaterEqual(time.monotonic() - start, 0.55)

    def test_record(self):
        record = os.path.join(self.tmp, "record")
        w = self.worker(SIM_RECORD=record, SIM_CONTEXT="1G")
        w.trial(0, {"mem": 1024})
        w.trial(1, {"mem": "2G"})
        w.trial(2, {"mem": 256, "hold": 0.3})
        with open(record) as f:
            lines = [line.split() for line in f]
        self.assertEqual([l[:3] for l in lines],
                         [[str(w.pid), "0", str(2 * GIB)], [str(w.pid), "1", str(3 * GIB)],
                          [str(w.pid), "2", str(GIB + 256 * MIB)]])
        # How long each objective ran: at least its hold.
        seconds = [float(l[3]) for l in lines]
        self.assertGreaterEqual(seconds[2], 0.3)
        # Each completed, as drawn: the planned peak is the peak, the planned length the hold
        # and ramp it slept.
        self.assertEqual([l[4] for l in lines], ["complete"] * 3)
        self.assertEqual([l[5] for l in lines], [l[2] for l in lines])
        self.assertAlmostEqual(float(lines[2][6]), 0.3 + 0.02)  # hold + SIM_RAMP_S

    def test_a_trial_that_ran_out_of_memory_records_the_peak_it_was_drawn_with(self):
        # The failure this pins: a bench's oracle took the peak and length an out-of-memory
        # trial reached before it failed (a quarter of its memory, a fraction of its time) for
        # the trial itself, and its estimate for one that covered its peak.
        record = os.path.join(self.tmp, "record")
        self.write_state("proc 0 %d 7G" % os.getpid())  # alive: kept by prune_dead_pids
        w = self.worker(SIM_RECORD=record, SIM_STEPS="4")
        _, err = w.trial(0, {"mem": 2048, "hold": 0.4})
        self.assertEqual(err["exc_type"], "torch.OutOfMemoryError")
        with open(record) as f:
            [line] = [line.split() for line in f]
        self.assertEqual(line[1:3], ["0", str(CONTEXT + 512 * MIB)])  # what it reached
        self.assertEqual(line[4], "fail")
        self.assertEqual(int(line[5]), CONTEXT + 2048 * MIB)  # what it needed
        self.assertAlmostEqual(float(line[6]), 0.4 + 0.02)
        self.assertLess(float(line[3]), 0.4)

    def test_concurrent_workers_append_whole_lines(self):
        ws = [self.worker(SIM_STEPS="20", SIM_RAMP_S="0.2") for _ in range(3)]
        for n, w in enumerate(ws):
            w.send({"type": "trial", "trial_id": 1, "number": n, "params": {"mem": 1024}})
        for w in ws:
            while True:
                msg = w.recv()
                if msg["type"] != "report":
                    break
                w.send({"type": "prune", "trial_id": 1, "step": msg["step"], "prune": False})
            self.assertEqual(msg["type"], "result")
        for w in ws:
            # The context, 20 steps, the reserved peak after the trial, the emptied cache.
            self.assertEqual(len(w.usage()), 23)
        with open(self.state) as f:
            for line in f:
                self.assertRegex(line, r"^(gpu 0 8G .*|prune_dead_pids|proc 0 \d+ \d+)\n$")


class FidelityTests(Base):
    """What makes the simulated trial behave like a real one on a real card."""

    def test_the_context_appears_at_the_first_allocation_when_lazy(self):
        w = self.worker(SIM_LAZY_CONTEXT="1", SIM_STEPS="2")
        self.assertEqual(w.usage(), [])  # a started framework holds nothing yet
        w.trial(0, {"mem": 1024})
        self.assertEqual(w.usage(), [CONTEXT + 512 * MIB, CONTEXT + GIB, CONTEXT + GIB,
                                     CONTEXT])
        # Held from then on, until the process exits.
        w.trial(1, {"mem": 512, "steps": 1})
        self.assertEqual(w.usage()[-1], CONTEXT)
        self.assertEqual(w.shutdown(), 0)
        self.assertEqual(w.usage()[-1], 0)

    def test_a_lazy_context_counts_in_the_first_allocation_that_does_not_fit(self):
        self.write_state("proc 0 %d 7G" % os.getpid())
        w = self.worker(SIM_LAZY_CONTEXT="1", SIM_STEPS="1")
        # 7 GiB taken of 8: 512 MiB fits alone, not with the 500 MiB context.
        err = w.trial(0, {"mem": 600})[1]
        self.assertEqual(err["exc_type"], "torch.OutOfMemoryError")
        self.assertEqual([u for u in w.usage() if u], [])

    def test_reserved_memory_grows_in_whole_segments(self):
        w = self.worker(SIM_SEGMENT="1G", SIM_STEPS="2")
        w.trial(0, {"mem": 1536})
        # 768 MiB and 1.5 GiB allocated, 1 and 2 GiB reserved; emptied after the trial.
        self.assertEqual(w.usage(), [CONTEXT, CONTEXT + GIB, CONTEXT + 2 * GIB,
                                     CONTEXT + 2 * GIB, CONTEXT])

    def test_memory_grows_with_the_product_of_some_params_and_not_others(self):
        env = {"SIM_MEM_PRODUCT": "width,depth", "SIM_MEM_UNIT": "1M",
               "SIM_MEM_BASE": "256M", "SIM_STEPS": "1"}
        w = self.worker(**env)
        w.trial(0, {"width": 64, "depth": 4, "lr": 0.1})
        w.trial(1, {"width": 64, "depth": 4, "lr": 0.0001})
        w.trial(2, {"width": 128, "depth": 4, "lr": 0.1})
        peaks = [u for u in w.usage() if u > CONTEXT]
        self.assertEqual(peaks, [CONTEXT + 512 * MIB] * 4 + [CONTEXT + 768 * MIB] * 2)

    def test_noise_and_hold_depend_on_the_trial_number_alone(self):
        env = {"SIM_MEM_NOISE": "0.1", "SIM_HOLD_RANGE": "1.5,5"}
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            holds = [sim.hold_of({}, n) for n in range(50)]
            self.assertTrue(all(1.5 <= h <= 5 for h in holds))
            self.assertEqual(holds, [sim.hold_of({}, n) for n in range(50)])
            self.assertGreater(len(set(holds)), 40)
            self.assertEqual(sim.hold_of({"hold": 0.25}, 3), 0.25)
        finally:
            for k, v in old.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        # The peak's noise, in two workers: the same trial number, the same peak.
        a = self.worker(SIM_MEM_NOISE="0.1", SIM_STEPS="1")
        b = self.worker(SIM_MEM_NOISE="0.1", SIM_STEPS="1")
        for n in (0, 1):
            a.trial(n, {"mem": 1024})
            b.trial(n, {"mem": 1024})
        pa, pb = (sorted(set(w.usage()))[-2:] for w in (a, b))
        self.assertEqual(pa, pb)
        self.assertNotEqual(pa[0], pa[1])
        for p in pa:
            self.assertLessEqual(abs(p - CONTEXT - GIB), 0.1 * GIB)

    def test_settings_by_trial_number(self):
        w = self.worker(SIM_MEM="1G", SIM_STEPS="1",
                        SIM_BY_NUMBER=json.dumps({"1": {"mem": "2G", "hold": 0}}))
        w.trial(0, {"x": 1})
        w.trial(1, {"x": 1})
        self.assertEqual(max(w.usage()), CONTEXT + 2 * GIB)
        self.assertIn(CONTEXT + GIB, w.usage())

    def test_the_oom_text_says_what_the_process_held_as_pytorch_does(self):
        self.write_state("proc 0 %d 7G" % os.getpid())
        w = self.worker(SIM_STEPS="1")
        err = w.trial(0, {"mem": 1024})[1]
        self.assertIn("Including non-PyTorch memory, this process has 0.49 GiB memory in use",
                      err["message"])


class CachingAllocatorTests(Base):
    def test_an_idle_worker_without_the_release_keeps_its_last_peak(self):
        w = self.worker(SIM_STEPS="2", SIM_NO_TORCH="1")
        w.trial(0, {"mem": 1024})
        self.assertEqual(w.usage()[-1], CONTEXT + GIB)  # idle, and still holding the peak
        # The next trial reuses the reserved memory before it asks the device for more.
        w.trial(1, {"mem": 512})
        self.assertEqual(w.usage()[-3:], [CONTEXT + GIB, CONTEXT + GIB, CONTEXT + GIB])
        w.trial(2, {"mem": 2048})
        self.assertEqual(w.usage()[-1], CONTEXT + 2 * GIB)

    def test_the_helper_reports_the_framework_peaks_it_saw(self):
        w = self.worker(SIM_STEPS="2")
        _, result = w.trial(0, {"mem": 1024})
        self.assertEqual(result["memory"], {"framework": "torch",
                                            "peak_allocated": GIB,
                                            "peak_reserved": GIB,
                                            "reserved": 0})

    def test_the_reported_peak_is_the_trials_own_with_what_the_allocator_could_not_give_back(self):
        # Fragments an earlier trial left are reserved (PyTorch counts them), before and after.
        w = self.worker(SIM_STEPS="2", SIM_FRAG_PER_TRIAL="256M")
        w.trial(0, {"mem": 2048})
        _, result = w.trial(1, {"mem": 512})
        self.assertEqual(result["memory"]["peak_reserved"], 256 * MIB + 512 * MIB)
        self.assertEqual(result["memory"]["reserved"], 2 * 256 * MIB)
        # NVML after the trial less what stays reserved, plus the peak: the trial's peak.
        self.assertEqual(w.usage()[-1] - result["memory"]["reserved"]
                         + result["memory"]["peak_reserved"], CONTEXT + 256 * MIB + 512 * MIB)


class ReleaseTests(Base):
    def test_release_on_eof(self):
        w = self.worker()
        w.trial(0, {"mem": 256})
        w.sock.shutdown(socket.SHUT_RDWR)
        self.assertEqual(w.wait(), 0)
        self.assertEqual(w.usage()[-1], 0)

    def test_release_on_sigterm_mid_trial(self):
        w = self.worker(SIM_HANG_ON="0")
        w.send({"type": "trial", "trial_id": 1, "number": 0, "params": {"mem": 1024}})
        deadline = time.monotonic() + TIMEOUT
        while len(w.usage()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        w.assert_silent(0.3)  # hangs, no report
        self.assertEqual(w.usage(), [CONTEXT, CONTEXT + 1024 * MIB // 5])
        w.proc.send_signal(signal.SIGTERM)
        self.assertEqual(w.wait(), -signal.SIGTERM)
        self.assertEqual(w.usage()[-1], 0)

    def test_oneshot(self):
        result = os.path.join(self.tmp, "result")
        w = Worker(self, self.state, mode="oneshot", channel=False, env={
            "SWEEPD_PARAMS": json.dumps({"mem": 256}), "SWEEPD_TRIAL_ID": "7",
            "SWEEPD_TRIAL_NUMBER": "3", "SWEEPD_RESULT_FILE": result,
            "SIM_STEPS": "2", "SIM_FRAG_PER_TRIAL": "1G"})
        self.assertEqual(w.wait(), 0)
        with open(result) as f:
            self.assertEqual(f.read(), repr(256.0 ** 2))
        # Oneshot: nothing empties the cache; the process's exit gives everything back.
        self.assertEqual(w.usage(), [CONTEXT, CONTEXT + 128 * MIB, CONTEXT + 256 * MIB,
                                     CONTEXT + 256 * MIB, 0])

    def test_sigkill_leaves_line_for_prune_dead_pids(self):
        w = self.worker(SIM_OOMKILL_ON="1")
        self.assertEqual(w.trial(0, {"mem": 256})[1]["type"], "result")
        w.send({"type": "trial", "trial_id": 2, "number": 1, "params": {"mem": 1024}})
        self.assertEqual(w.reader.readline(), b"")
        self.assertEqual(w.wait(), -signal.SIGKILL)
        self.assertEqual(w.usage()[-1], CONTEXT + 1024 * MIB // 5)  # never released
        self.assertNotIn((0, w.pid), sim.read_state(self.state)[1])

    def test_dataloader_child(self):
        w = self.worker(SIM_CHILD_MEM="256M")
        _, procs = sim.read_state(self.state)
        children = [pid for (idx, pid), size in procs.items() if size == 256 * MIB]
        self.assertEqual(len(children), 1)
        child = children[0]
        self.assertNotEqual(child, w.pid)
        # The child counts as another process using the device.
        self.write_state("proc 0 %d 7G" % os.getpid())
        err = w.trial(0, {"mem": 400, "steps": 1})[1]
        self.assertEqual(err["exc_type"], "torch.OutOfMemoryError")
        os.kill(w.pid, signal.SIGKILL)
        self.assertEqual(w.reader.readline(), b"")  # the child does not hold the channel
        w.wait()
        deadline = time.monotonic() + TIMEOUT
        while w.usage(child)[-1] != 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertEqual(w.usage(child), [256 * MIB, 0])


class FaultTests(Base):
    def error(self, w, number, params=None):
        reports, msg = w.trial(number, dict({"mem": 256}, **(params or {})))
        self.assertEqual(msg["type"], "error", msg)
        self.assertEqual(reports, [])  # faults strike after the first allocation
        return msg

    def test_assert_param(self):
        w = self.worker()
        err = self.error(w, 0, {"fault": "assert"})
        self.assertEqual(err["exc_type"], "torch.AcceleratorError")
        self.assertEqual(err["message"], sim.ASSERT_TEXT)
        self.assertTrue(err["message"].startswith(
            "CUDA error: device-side assert triggered\nCUDA kernel errors might be"))
        self.assertIn("Assertion `-sizes[i] <= index", w.stderr())
        self.assertIn("device-side assert triggered", w.stderr())
        self.assertEqual(w.usage()[-1], CONTEXT)
        self.assertEqual(w.trial(1, {"mem": 256})[1]["type"], "result")

    def test_assert_on_number_and_on_param_value(self):
        w = self.worker(SIM_ASSERT_ON="1,3", SIM_ASSERT_PARAM="lr=0.1")
        kinds = [w.trial(n, {"lr": lr})[1].get("exc_type", "ok")
                 for n, lr in enumerate([0.2, 0.2, 0.1, 0.2, 0.3])]
        self.assertEqual(kinds, ["ok"] + ["torch.AcceleratorError"] * 3 + ["ok"])

    def test_sticky_cuda_error(self):
        w = self.worker(SIM_ILLEGAL_ON="0", SIM_STICKY_CUDA_ERROR="1")
        err = self.error(w, 0)
        self.assertTrue(err["message"].startswith(
            "CUDA error: an illegal memory access was encountered\n"))
        again = w.trial(1, {"mem": 256})[1]
        self.assertEqual((again["exc_type"], again["message"]),
                         ("torch.AcceleratorError", err["message"]))

    def test_framework_ooms(self):
        w = self.worker(SIM_JAX_OOM_ON="0", SIM_TF_OOM_ON="1")
        jax, tf = self.error(w, 0), self.error(w, 1)
        self.assertEqual(jax["exc_type"], "jaxlib.xla_extension.XlaRuntimeError")
        self.assertEqual(jax["message"], "RESOURCE_EXHAUSTED: Out of memory while trying "
                         "to allocate 17179869184 bytes.")
        self.assertEqual(tf["exc_type"],
                         "tensorflow.python.framework.errors_impl.ResourceExhaustedError")
        self.assertTrue(tf["message"].startswith("OOM when allocating tensor with shape"))

    def test_unknown_fault_is_an_error(self):
        w = self.worker()
        err = w.trial(0, {"fault": "asert"})[1]
        self.assertEqual(err["exc_type"], "ValueError")

    def test_fatal_signals(self):
        for env, sig in [({"SIM_SEGV_ON": "0"}, signal.SIGSEGV),
                         ({"SIM_ASSERT_ON": "0", "SIM_ABORT_AFTER_ASSERT": "1"},
                          signal.SIGABRT)]:
            with self.subTest(sig=sig):
                w = self.worker(**env)
                w.send({"type": "trial", "trial_id": 1, "number": 0, "params": {}})
                self.assertEqual(w.reader.readline(), b"")
                self.assertEqual(w.wait(), -sig)
                self.assertNotEqual(w.usage()[-1], 0)  # died without releasing
                if sig == signal.SIGABRT:
                    self.assertIn(sim.ASSERT_TEXT, w.stderr())


class StateParserTests(unittest.TestCase):
    def parse(self, text):
        with tempfile.NamedTemporaryFile("w", delete=False) as f:
            f.write(text)
        self.addCleanup(os.unlink, f.name)
        return sim.read_state(f.name)

    def test_sizes(self):
        self.assertEqual([sim.parse_size(s) for s in ("123", "4K", "5M", "6G", "1.5G", "2GiB")],
                         [123, 4096, 5 * MIB, 6 * GIB, 3 * GIB // 2, 2 * GIB])

    def test_directives(self):
        me, dead = os.getpid(), dead_pid()
        totals, procs = self.parse(
            "gpu 0 80G NVIDIA H100 80GB HBM3\ngpu 1 1024M A\nutil 0 50 20\nfail nvmlInit 3\n"
            "proc 0 %d 1G\nproc 0 %d 2G\nproc 1 %d 5\nproc 0 %d 4G\nproc 1 7 0\n"
            "garbage line\nproc x y z\n" % (me, me, me, dead))
        self.assertEqual(totals, {0: 80 * GIB, 1: GIB})
        self.assertEqual(procs, {(0, me): 2 * GIB, (1, me): 5, (0, dead): 4 * GIB})
        _, procs = self.parse("proc 0 %d 1G\nprune_dead_pids\nproc 0 %d 4G\nproc 1 %d 0\n"
                              % (me, dead, me))
        self.assertEqual(procs, {(0, me): GIB})

    def test_zombies_are_dead(self):
        proc = subprocess.Popen(["true"])
        time.sleep(0.3)  # exited, not yet reaped
        try:
            self.assertFalse(sim.pid_alive(proc.pid))
            self.assertTrue(sim.pid_alive(os.getpid()))
        finally:
            proc.wait()


if __name__ == "__main__":
    unittest.main()
