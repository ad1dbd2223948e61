"""Tests for the helper's memory caps (python/sweepd_memory.py, issue 41), playing sweepd.

The workers run with the stand-in ``torch`` of tests/standin (no GPU, no PyTorch): its devices
are the ``gpu`` lines of a fake NVML state file, the memory it holds appears there as ``proc``
lines, and ``FAKE_TORCH_CALLS`` logs every call the code under test makes of its API, so the
tests check that the helper calls PyTorch's own names with the right figures. The context is
measured through the fake libnvidia-ml, compiled here from fake-nvml/ (skipped without cc).

Run with:  .venv/bin/python -m unittest discover -s tests/python -p test_memory_caps.py
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

from test_sweepd_worker import PYTHON_DIR, ROOT, FakeSweepd

sys.path.insert(0, PYTHON_DIR)
import sweepd_memory  # noqa: E402

STANDIN = os.path.join(ROOT, "tests", "standin")
TORCH_SIM_WORKER = os.path.join(ROOT, "tests", "workers", "torch_sim_worker.py")
FAKE_NVML_SOURCE = os.path.join(ROOT, "fake-nvml", "fake_nvml.c")
MIB, GIB = 1 << 20, 1 << 30
CONTEXT = 300 * MIB

# PyTorch's message when a memory fraction is set (c10/cuda/CUDACachingAllocator.cpp).
CAP_HIT_RE = re.compile(
    r"^CUDA out of memory\. Tried to allocate (?P<tried>[0-9.]+ (?:bytes|KiB|MiB|GiB))\. "
    r"GPU 0 has a total capacity of [0-9.]+ GiB of which [0-9.]+ GiB is free\. "
    r"Including non-PyTorch memory, this process has [0-9.]+ (?:MiB|GiB) memory in use\. "
    r"(?P<allowed>[0-9.]+ (?:MiB|GiB)) allowed; Of the allocated memory [0-9.]+ "
    r"(?:bytes|KiB|MiB|GiB) "
    r"is allocated by PyTorch, and [0-9.]+ (?:bytes|KiB|MiB|GiB) is reserved by PyTorch but "
    r"unallocated\. If reserved but unallocated memory is large try setting "
    r"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation\.")

# A worker that allocates what its params say: `alloc` MiB tensors `times` times, `every`
# seconds apart, then holds them `hold` seconds; says its cap (a user attribute) and returns how
# long it ran.
TORCH_WORKER = r'''
import time
import sweepd_worker
import torch

def objective(trial):
    p = trial.params
    trial.set_user_attr("cap", trial.memory_cap)
    start, held = time.monotonic(), []
    for _ in range(int(p.get("times", 1))):
        held.append(torch.empty(int(p["alloc"]) << 20, dtype=torch.uint8, device="cuda"))
        time.sleep(float(p.get("every", 0)))
    time.sleep(float(p.get("hold", 0)))
    return time.monotonic() - start

sweepd_worker.serve(objective)
'''

_FAKE_NVML = {}


def fake_nvml_lib():
    """The fake libnvidia-ml, compiled once for these tests; None without a C compiler."""
    if "lib" not in _FAKE_NVML:
        cc = shutil.which("cc") or shutil.which("gcc")
        out = tempfile.mkdtemp(prefix="sweepd-fake-nvml-")
        lib = os.path.join(out, "libnvidia-ml.so.1")
        ok = cc is not None and subprocess.run(
            [cc, "-shared", "-fPIC", "-O2", "-o", lib, FAKE_NVML_SOURCE],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
        _FAKE_NVML["lib"] = lib if ok else None
    return _FAKE_NVML["lib"]


class Gpu(object):
    """A fake NVML state file with the given cards, and a call log for the stand-in torch."""

    def __init__(self, test, cards=((0, "24G"),), extra=()):
        self.dir = tempfile.mkdtemp(prefix="sweepd-caps-")
        test.addCleanup(shutil.rmtree, self.dir, True)
        self.state = os.path.join(self.dir, "state")
        self.calls_path = os.path.join(self.dir, "calls")
        with open(self.state, "w") as f:
            for idx, size in cards:
                f.write("gpu %d %s Fake GPU\n" % (idx, size))
            for line in ("prune_dead_pids",) + tuple(extra):
                f.write(line + "\n")

    def env(self, visible="0", cap=None, nvml=True):
        env = {
            "PYTHONPATH": PYTHON_DIR + os.pathsep + STANDIN,
            "FAKE_NVML_STATE": self.state,
            "FAKE_TORCH_CALLS": self.calls_path,
            "FAKE_TORCH_CONTEXT": str(CONTEXT),
            "CUDA_VISIBLE_DEVICES": visible,
        }
        if cap is not None:
            env["SWEEPD_MEMORY_CAP"] = str(cap)
        lib = fake_nvml_lib() if nvml else None
        if lib is not None:
            env["SWEEPD_NVML_LIB"] = lib
        return env

    def calls(self, name=None):
        try:
            with open(self.calls_path) as f:
                calls = [json.loads(line) for line in f]
        except FileNotFoundError:
            return []
        return [c for c in calls if name is None or c["call"] == name]

    def fractions(self):
        return [c["args"] for c in self.calls("torch.cuda.set_per_process_memory_fraction")]


class CapsBase(unittest.TestCase):
    def script(self, source):
        d = tempfile.mkdtemp(prefix="sweepd-script-")
        self.addCleanup(shutil.rmtree, d, True)
        path = os.path.join(d, "worker.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(source))
        return path

    def worker(self, gpu, source=TORCH_WORKER, mode="persistent", path=(), **env_kw):
        env = gpu.env(**env_kw)
        env["PYTHONPATH"] = os.pathsep.join((env["PYTHONPATH"],) + tuple(path))
        if mode == "oneshot":
            env.update({"SWEEPD_TRIAL_ID": "7", "SWEEPD_TRIAL_NUMBER": "0"})
        return FakeSweepd(self, self.script(source), mode=mode, env=env)

    def trial(self, w, trial_id, params, cap=None, send=True):
        """Runs a trial: (its final message, the memory messages it sent); its user attributes
        in ``self.attrs``."""
        if send:
            msg = {"type": "trial", "trial_id": trial_id, "number": trial_id, "params": params}
            if cap is not None:
                msg["memory_cap"] = cap
            w.send(msg)
        memory, self.attrs = [], {}
        while True:
            msg = w.recv()
            if msg["type"] == "user_attr":
                self.attrs[msg["key"]] = msg["value"]
                continue
            if msg["type"] == "report":
                w.send({"type": "prune", "trial_id": trial_id, "step": msg["step"],
                        "prune": False})
                continue
            if msg["type"] != "memory":
                return msg, memory
            self.assertEqual(msg["trial_id"], trial_id)
            memory.append(msg)


class PersistentCaps(CapsBase):
    def test_the_fraction_is_the_cap_over_the_total_of_the_device_the_process_sees(self):
        # Two cards; sweepd gave the worker NVML card 1 (16 GiB), which CUDA numbers 0.
        gpu = Gpu(self, cards=((0, "24G"), (1, "16G")))
        w = self.worker(gpu, visible="1")
        self.assertEqual(w.recv()["type"], "ready")
        final, _ = self.trial(w, 1, {"alloc": 10}, cap=4 * GIB)
        self.assertEqual(final["type"], "result", final)
        self.assertEqual(self.attrs["cap"], 4 * GIB)
        self.assertEqual(gpu.fractions(), [[4 * GIB / (16 * GIB), 0]])
        self.assertEqual(gpu.calls("torch.cuda.get_device_properties")[0]["args"], [0])

    def test_each_trial_of_a_persistent_worker_runs_under_its_own_cap(self):
        gpu = Gpu(self)
        w = self.worker(gpu)
        self.assertEqual(w.recv()["type"], "ready")
        # 1.5 GiB fits a 2 GiB cap, not a 1 GiB one; a trial without a cap is unlimited again.
        outcomes, caps = [], []
        for trial_id, cap in ((1, 2 * GIB), (2, GIB), (3, None)):
            final, _ = self.trial(w, trial_id, {"alloc": 1536}, cap=cap)
            outcomes.append(final.get("exc_type", final["type"]))
            caps.append(self.attrs["cap"])
        self.assertEqual(outcomes, ["result", "torch.OutOfMemoryError", "result"])
        self.assertEqual(caps, [2 * GIB, GIB, None])
        total = 24 * GIB
        self.assertEqual(gpu.fractions(), [[2 * GIB / total, 0], [1 * GIB / total, 0], [1.0, 0]])

    def test_a_cap_hit_fails_with_pytorchs_text_and_the_error_carries_cap_and_requested(self):
        gpu = Gpu(self)
        w = self.worker(gpu)
        self.assertEqual(w.recv()["type"], "ready")
        # 3 x 400 MiB under a 1 GiB cap: the third segment would take the allocator past it.
        final, _ = self.trial(w, 1, {"alloc": 400, "times": 3}, cap=GIB)
        self.assertEqual(final["type"], "error", final)
        self.assertEqual(final["exc_type"], "torch.OutOfMemoryError")
        m = CAP_HIT_RE.match(final["message"])
        self.assertIsNotNone(m, final["message"])
        self.assertEqual(m.group("tried"), "400.00 MiB")
        self.assertEqual(m.group("allowed"), "1024.00 MiB")
        memory = final["memory"]
        self.assertEqual(memory["cap"], GIB)
        self.assertEqual(memory["requested"], 400 * MIB)
        self.assertEqual(memory["peak_reserved"], 800 * MIB)

    def test_memory_messages_come_at_most_every_half_second_and_only_on_a_mib_of_change(self):
        gpu = Gpu(self)
        w = self.worker(gpu)
        self.assertEqual(w.recv()["type"], "ready")
        # One allocation held 1.5 s: one message, however many times the figures are read.
        final, memory = self.trial(w, 1, {"alloc": 100, "hold": 1.5}, cap=4 * GIB)
        self.assertEqual(final["type"], "result", final)
        self.assertEqual([(m["reserved"], m["peak_reserved"]) for m in memory],
                         [(100 * MIB, 100 * MIB)])
        # 2 MiB every 10 ms: the figures move all the time, the messages do not.
        final, memory = self.trial(w, 2, {"alloc": 2, "times": 150, "every": 0.01}, cap=4 * GIB)
        self.assertEqual(final["type"], "result", final)
        seconds = final["value"]
        self.assertGreaterEqual(len(memory), 2)
        self.assertLessEqual(len(memory), int(seconds / sweepd_memory.MEMORY_INTERVAL_S) + 1)
        reserved = [m["reserved"] for m in memory]
        self.assertEqual(reserved, sorted(reserved))
        self.assertTrue(all(b - a >= MIB for a, b in zip(reserved, reserved[1:])), reserved)

    def test_ready_carries_the_context_measured_where_nvml_cannot_name_the_process(self):
        if fake_nvml_lib() is None:
            self.skipTest("no C compiler for the fake libnvidia-ml")
        # As in a container: NVML lists the process under another PID, without its memory.
        gpu = Gpu(self, extra=("pid_offset 100000", "proc_memory_unavailable"))
        w = self.worker(gpu, cap=2 * GIB)
        ready = w.recv()
        self.assertEqual(ready["memory"], {"framework": "torch", "context": CONTEXT,
                                           "total": 24 * GIB})
        final, memory = self.trial(w, 1, {"alloc": 64, "hold": 0.3}, cap=2 * GIB)
        self.assertEqual(final["type"], "result", final)
        self.assertEqual([m.get("context") for m in memory], [CONTEXT])

    def test_a_context_created_after_ready_is_sent_in_the_trials_first_memory_message(self):
        if fake_nvml_lib() is None:
            self.skipTest("no C compiler for the fake libnvidia-ml")
        gpu = Gpu(self, extra=("pid_offset 100000", "proc_memory_unavailable"))
        w = self.worker(gpu)  # no SWEEPD_MEMORY_CAP: CUDA waits for the first trial's cap
        self.assertEqual(w.recv(), {"type": "ready", "pid": w.proc.pid, "protocol": 2})
        worker = {"framework": "torch", "context": CONTEXT, "total": 24 * GIB}
        final, memory = self.trial(w, 1, {"alloc": 64, "hold": 0.6}, cap=2 * GIB)
        self.assertEqual(final["type"], "result", final)
        self.assertEqual(memory[0].get("memory"), worker)
        self.assertEqual([m["context"] for m in memory], [CONTEXT] * len(memory))
        final, memory = self.trial(w, 2, {"alloc": 64, "hold": 0.6}, cap=2 * GIB)
        self.assertEqual([m.get("memory") for m in memory], [None] * len(memory))


    def test_a_context_that_existed_before_the_cap_is_measured_where_nvml_names_the_process(self):
        if fake_nvml_lib() is None:
            self.skipTest("no C compiler for the fake libnvidia-ml")
        source = TORCH_WORKER.replace("import torch\n", """import torch
x = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")  # the context, before any cap
del x
torch.cuda.empty_cache()
""")
        for extra, context in (((), CONTEXT), (("pid_offset 100000",), None)):
            with self.subTest(extra=extra):
                gpu = Gpu(self, extra=extra)
                w = self.worker(gpu, source=source)
                self.assertEqual(w.recv(), {"type": "ready", "pid": w.proc.pid, "protocol": 2})
                final, memory = self.trial(w, 1, {"alloc": 64, "hold": 0.3}, cap=2 * GIB)
                self.assertEqual(final["type"], "result", final)
                self.assertEqual(gpu.fractions(), [[2 * GIB / (24 * GIB), 0]])
                # Under another PID only the device's figure is left, and it saw no change:
                # no context is said rather than one of nothing.
                self.assertEqual([m.get("context") for m in memory], [context])

    def test_a_neighbour_that_allocates_while_the_context_is_created_is_not_counted_in_it(self):
        """Regression (issue 41): the context was what the device used more after its creation
        than before. On a card that other trials were filling, it came out at 1-1.5 GiB for a
        500 MiB context, and every cap of that worker 0.5-1 GiB too small: trials failed at
        their caps that had been admitted with room enough."""
        if fake_nvml_lib() is None:
            self.skipTest("no C compiler for the fake libnvidia-ml")
        gpu = Gpu(self)
        # A neighbour takes 1 GiB as PyTorch creates this worker's context (torch wrapped
        # before the helper is imported, which caps it at once).
        source = TORCH_WORKER.replace("import sweepd_worker\nimport torch\n", """import os
import torch
_set = torch.cuda.set_per_process_memory_fraction
def _racing(fraction, device=None):
    _set(fraction, device)
    with open(%r, "a") as f:
        f.write("proc 0 %%d 1G\\n" %% os.getppid())
torch.cuda.set_per_process_memory_fraction = _racing
import sweepd_worker
""" % gpu.state)
        self.assertIn("_racing", source)
        w = self.worker(gpu, cap=2 * GIB, source=source)
        ready = w.recv()
        self.assertEqual(ready["memory"], {"framework": "torch", "context": CONTEXT,
                                           "total": 24 * GIB})


class OneshotCaps(CapsBase):
    def test_a_oneshot_script_is_capped_before_its_first_allocation(self):
        for first, second in (("sweepd_worker", "torch"), ("torch", "sweepd_worker")):
            with self.subTest(imports=(first, second)):
                gpu = Gpu(self)
                # A module-level allocation, before serve(): already under the cap.
                w = self.worker(gpu, mode="oneshot", cap=GIB, source="""
                    import %s
                    import %s
                    import sweepd_worker, torch
                    model = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")

                    def objective(trial):
                        return trial.memory_cap

                    sweepd_worker.serve(objective)
                    """ % (first, second))
                self.assertEqual(w.recv()["type"], "ready")
                final, _ = self.trial(w, 7, {}, send=False)
                self.assertEqual(final, {"type": "result", "trial_id": 7, "value": GIB})
                self.assertEqual(w.wait(), 0)
                names = [c["call"] for c in gpu.calls()]
                fraction = names.index("torch.cuda.set_per_process_memory_fraction")
                self.assertLess(fraction, names.index("torch.empty"), names)
                self.assertEqual(gpu.fractions(), [[GIB / (24 * GIB), 0]])

    def test_a_oneshot_cap_hit_carries_the_cap_from_the_environment(self):
        gpu = Gpu(self)
        w = self.worker(gpu, mode="oneshot", cap=512 * MIB, source="""
            import sweepd_worker, torch

            def objective(trial):
                return torch.empty(600 << 20, dtype=torch.uint8, device="cuda").nbytes

            sweepd_worker.serve(objective)
            """)
        self.assertEqual(w.recv()["type"], "ready")
        final, _ = self.trial(w, 7, {}, send=False)
        self.assertEqual(w.wait(), 1)
        self.assertEqual(final["type"], "error", final)
        self.assertIsNotNone(CAP_HIT_RE.match(final["message"]), final["message"])
        self.assertEqual(final["memory"]["cap"], 512 * MIB)
        self.assertEqual(final["memory"]["requested"], 600 * MIB)

    def test_a_worker_without_a_framework_reads_its_cap_and_imports_none(self):
        gpu = Gpu(self)
        w = self.worker(gpu, mode="oneshot", cap=3 * GIB, source="""
            import sys
            import sweepd_worker

            def objective(trial):
                trial.set_user_attr("imported", [m for m in ("torch", "tensorflow", "jax")
                                                 if m in sys.modules])
                return trial.memory_cap

            sweepd_worker.serve(objective)
            """)
        self.assertEqual(w.recv(), {"type": "ready", "pid": w.proc.pid, "protocol": 2})
        final, _ = self.trial(w, 7, {}, send=False)
        self.assertEqual(final["value"], 3 * GIB)
        self.assertEqual(self.attrs, {"imported": []})
        self.assertEqual(gpu.calls(), [])

    def test_tensorflow_gets_a_memory_limit_in_mib_when_imported_after_the_helper(self):
        gpu = Gpu(self)
        tf_dir = os.path.join(gpu.dir, "tf")
        os.makedirs(os.path.join(tf_dir, "tensorflow"))
        with open(os.path.join(tf_dir, "tensorflow", "__init__.py"), "w") as f:
            f.write(textwrap.dedent("""
                # TensorFlow's tf.config calls the helper makes, recorded.
                import types
                calls = []

                class LogicalDeviceConfiguration(object):
                    def __init__(self, memory_limit=None):
                        self.memory_limit = memory_limit

                def list_physical_devices(kind):
                    return ["/physical_device:GPU:0"] if kind == "GPU" else []

                def set_logical_device_configuration(device, configs):
                    calls.append((device, [c.memory_limit for c in configs]))

                config = types.SimpleNamespace(
                    list_physical_devices=list_physical_devices,
                    set_logical_device_configuration=set_logical_device_configuration,
                    LogicalDeviceConfiguration=LogicalDeviceConfiguration)
                """))
        w = self.worker(gpu, mode="oneshot", cap=3 * GIB + 5, path=(tf_dir,), source="""
            import sweepd_worker
            import tensorflow as tf

            def objective(trial):
                trial.set_user_attr("tf_calls", tf.calls)
                return 0.0

            sweepd_worker.serve(objective)
            """)
        self.assertEqual(w.recv()["type"], "ready")
        final, _ = self.trial(w, 7, {}, send=False)
        self.assertEqual(final["type"], "result", final)
        self.assertEqual(self.attrs["tf_calls"], [["/physical_device:GPU:0", [3072]]])


class TorchSimWorker(CapsBase):
    """tests/workers/torch_sim_worker.py, the simulated worker of the daemon's cap tests."""

    def sim(self, gpu, **env):
        full = gpu.env(nvml=False)
        full.update({"PYTHONPATH": "", "SIM_RAMP_S": "0.05", "SIM_HOLD_S": "0"}, **env)
        return FakeSweepd(self, TORCH_SIM_WORKER, env=full)

    def held(self, gpu, pid):
        with open(gpu.state) as f:
            return [int(w[3]) for w in (line.split() for line in f)
                    if w[:1] == ["proc"] and int(w[2]) == pid]

    def test_it_fails_alone_at_its_cap_and_nvml_sees_its_memory(self):
        gpu = Gpu(self)
        w = self.sim(gpu)
        self.assertEqual(w.recv()["type"], "ready")
        fits, _ = self.trial(w, 1, {"mem": 600}, cap=GIB)
        over, _ = self.trial(w, 2, {"mem": 1500}, cap=GIB)
        self.assertEqual(fits, {"type": "result", "trial_id": 1, "value": 360000.0,
                                "memory": fits["memory"]})
        self.assertEqual(fits["memory"]["peak_reserved"], 600 * MIB)
        self.assertEqual(over["exc_type"], "torch.OutOfMemoryError")
        self.assertIsNotNone(CAP_HIT_RE.match(over["message"]), over["message"])
        self.assertEqual((over["memory"]["cap"], over["memory"]["requested"]), (GIB, 300 * MIB))
        held = self.held(gpu, w.proc.pid)
        self.assertIn(CONTEXT + 600 * MIB, held)
        self.assertLess(max(held), CONTEXT + GIB)

    def test_its_record_is_what_the_packing_bench_reads_and_a_re_run_is_the_same_trial(self):
        # The packing bench's oracle reads each trial's peak and run time with
        # bench/benchlib.py's records_in; a trial that hits its cap is re-run by sweepd under a
        # new number, and must then hold as long as it was drawn to.
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        import benchlib

        gpu = Gpu(self)
        record = os.path.join(gpu.dir, "record")
        w = self.sim(gpu, SIM_RECORD=record, SIM_HOLD_RANGE="0.01,0.3")
        self.assertEqual(w.recv()["type"], "ready")
        self.trial(w, 1, {"mem": 600, "x": 0.5}, cap=GIB)
        failed, _ = self.trial(w, 2, {"mem": 1500, "x": 0.25}, cap=GIB)
        self.assertEqual(failed["exc_type"], "torch.OutOfMemoryError")
        self.trial(w, 3, {"mem": 1500, "x": 0.25}, cap=2 * GIB)
        got = benchlib.records_in(record)
        self.assertEqual((got[1][0], got[1][2]), (CONTEXT + 600 * MIB, True))
        # The failed attempt as it was drawn: its context and five 300 MiB segments.
        self.assertEqual((got[2][0], got[2][2]), (CONTEXT + 1500 * MIB, False))
        self.assertEqual((got[3][0], got[3][2]), (CONTEXT + 1500 * MIB, True))
        with open(record) as f:
            planned_s = {int(line.split()[1]): float(line.split()[6]) for line in f}
        self.assertEqual(planned_s[2], planned_s[3])
        self.assertNotEqual(planned_s[1], planned_s[3])
        self.assertGreaterEqual(got[3][1], planned_s[3])

    def test_a_power_in_the_memory_product_raises_its_param_to_it(self):
        # The packing bench's `beyond` workload: peak = 1 MiB x a^2 x b.
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        import benchlib

        gpu = Gpu(self)
        record = os.path.join(gpu.dir, "record")
        w = self.sim(gpu, SIM_RECORD=record, SIM_MEM_PRODUCT="a^2,b", SIM_MEM_UNIT="1M")
        self.assertEqual(w.recv()["type"], "ready")
        final, _ = self.trial(w, 1, {"a": 2, "b": 80, "c": 0.5})
        self.assertEqual(final["type"], "result", final)
        self.assertEqual(benchlib.records_in(record)[1][0], CONTEXT + 320 * MIB)

    def test_a_silent_framework_is_neither_capped_nor_read(self):
        gpu = Gpu(self)
        w = self.sim(gpu, SIM_SILENT_FRAMEWORK="1", SWEEPD_MEMORY_CAP=str(GIB))
        self.assertEqual(w.recv(), {"type": "ready", "pid": w.proc.pid, "protocol": 2})
        final, memory = self.trial(w, 1, {"mem": 1500, "hold": 0.7}, cap=GIB)
        self.assertEqual(final, {"type": "result", "trial_id": 1, "value": 2250000.49})
        self.assertEqual((memory, gpu.fractions()), ([], []))
        self.assertIn(CONTEXT + 1500 * MIB, self.held(gpu, w.proc.pid))


class UncappableTorch(CapsBase):
    def test_a_torch_without_the_fraction_api_is_warned_of_once_not_at_every_trial(self):
        # gpu_sim_worker's torch has only the calls the helper made before caps.
        gpu = Gpu(self)
        env = gpu.env(nvml=False)
        env.update({"SIM_MEM": "64M", "SIM_RAMP_S": "0.02", "SIM_HOLD_S": "0"})
        w = FakeSweepd(self, os.path.join(ROOT, "tests", "workers", "gpu_sim_worker.py"),
                       env=env)
        self.assertEqual(w.recv()["type"], "ready")
        for trial_id in (1, 2):
            final, _ = self.trial(w, trial_id, {"x": 1.0}, cap=GIB)
            self.assertEqual(final["type"], "result", final)
        w.send({"type": "shutdown"})
        self.assertEqual(w.wait(), 0)
        said = [line for line in w.stderr().splitlines() if "memory fraction" in line]
        self.assertEqual(len(said), 1, w.stderr())
        self.assertIn("the trials run uncapped", said[0])


class EnforcedCap(unittest.TestCase):
    """Regression (the merge of issue 41's halves): the helper put the cap it was *told* on an
    OOM's error, so a worker whose torch could not take a fraction, or a JAX one, had every
    device OOM taken by sweepd for a cap hit: re-run for free, never infeasible."""

    OOM = ("CUDA out of memory. Tried to allocate 400.00 MiB. GPU 0 has a total capacity of "
           "8.00 GiB of which 38.00 MiB is free.")

    def setUp(self):
        saved = {n: sys.modules.pop(n) for n in ("torch", "tensorflow") if n in sys.modules}
        self.addCleanup(sys.modules.update, saved)

    def test_an_oom_under_a_cap_no_framework_took_carries_no_cap(self):
        memory = sweepd_memory._Memory()
        memory.apply(GIB)  # no framework imported: told, not enforced
        figures = memory.error_figures(RuntimeError(self.OOM), None)
        self.assertNotIn("cap", figures or {})
        self.assertEqual(figures["requested"], 400 * MIB)

    def test_an_oom_under_the_fraction_torch_took_carries_that_cap(self):
        memory = sweepd_memory._Memory()
        memory.apply(GIB)
        memory.total = 8 * GIB
        memory.torch_set = (0, sweepd_memory.cap_fraction(GIB, 8 * GIB))
        self.assertEqual(memory.error_figures(RuntimeError(self.OOM), None)["cap"], GIB)
        memory.apply(2 * GIB)  # a later trial's cap torch has not taken (yet)
        self.assertIsNone(memory.enforced_cap())


class Decisions(unittest.TestCase):
    def test_read_cap(self):
        for value, expected in ((None, None), ("", None), (" null ", None), ("1024", 1024),
                                (0, 0), (5 * GIB, 5 * GIB)):
            with self.subTest(value=value):
                self.assertEqual(sweepd_memory.read_cap(value, "memory_cap"), expected)
        for value in ("lots", "-1", -1, 1.5, True, [1], "1.5e9"):
            with self.subTest(value=value):
                with self.assertRaisesRegex(ValueError, r"^memory_cap=.* is not a number"):
                    sweepd_memory.read_cap(value, "memory_cap")

    def test_cap_fraction(self):
        for cap, total, expected in ((GIB, 4 * GIB, 0.25), (None, 4 * GIB, 1.0),
                                     (8 * GIB, 4 * GIB, 1.0), (0, 4 * GIB, 0.0),
                                     (GIB, 0, 1.0), (GIB, None, 1.0)):
            with self.subTest(cap=cap, total=total):
                self.assertEqual(sweepd_memory.cap_fraction(cap, total), expected)

    def test_requested_bytes(self):
        for text, expected in (
                ("CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has", 1536 * MIB),
                ("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 1 has", 20 * MIB),
                ("CUDA out of memory. Tried to allocate 2.00 KiB. GPU", 2048),
                ("CUDA out of memory. Tried to allocate 512 bytes. GPU", 512),
                ("CUDA error: out of memory", None), ("", None)):
            with self.subTest(text=text):
                self.assertEqual(sweepd_memory.requested_bytes(text), expected)

    def test_memory_due(self):
        half, step = sweepd_memory.MEMORY_INTERVAL_S, sweepd_memory.MEMORY_STEP_BYTES
        figures = {"reserved": 10 * MIB, "peak_reserved": 12 * MIB}
        for last, now, since, expected in (
                (None, figures, None, True),                         # the first figures
                (None, {"reserved": step - 1}, None, False),         # under a MiB from zero
                (figures, dict(figures, reserved=11 * MIB), half, True),
                (figures, dict(figures, reserved=11 * MIB), half * 0.99, False),  # too soon
                (figures, dict(figures, reserved=10 * MIB + step - 1), 5.0, False),
                (figures, dict(figures, peak_reserved=13 * MIB), 5.0, True),
                (figures, dict(figures, reserved=9 * MIB), 5.0, True)):  # freed counts too
            with self.subTest(last=last, now=now, since=since):
                self.assertEqual(sweepd_memory.memory_due(last, now, since), expected)


if __name__ == "__main__":
    unittest.main()
