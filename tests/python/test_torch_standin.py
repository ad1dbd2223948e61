"""Tests for tests/standin/torch, the stand-in PyTorch of sweepd's tests: that it behaves as
PyTorch's documented API and caching allocator do where sweepd's helper and the simulated
workers use it, and that what it holds shows in the fake NVML state as the daemon reads it.

Each case runs in a process of its own (the stand-in reads its environment once, as CUDA does).

Run with:  .venv/bin/python -m unittest discover -s tests/python -p test_torch_standin.py
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
STANDIN = os.path.join(ROOT, "tests", "standin")
MIB, GIB = 1 << 20, 1 << 30
CONTEXT = 200 * MIB


class StandinTorch(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sweepd-standin-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.state = os.path.join(self.dir, "state")
        self.calls = os.path.join(self.dir, "calls")
        with open(self.state, "w") as f:
            f.write("gpu 0 8G Fake GPU\ngpu 1 4G Fake GPU\nprune_dead_pids\n")

    def run_torch(self, code, visible="0"):
        """Runs ``code`` with the stand-in; what it prints last, as JSON, and its pid."""
        env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": STANDIN,
               "FAKE_NVML_STATE": self.state, "FAKE_TORCH_CALLS": self.calls,
               "FAKE_TORCH_CONTEXT": str(CONTEXT), "CUDA_VISIBLE_DEVICES": visible}
        proc = subprocess.run(
            [sys.executable, "-c", "import json, os, torch\n" + textwrap.dedent(code)
             + "\nprint(json.dumps([out, os.getpid()]))"],
            env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return json.loads(proc.stdout.splitlines()[-1])

    def proc_lines(self, pid):
        with open(self.state) as f:
            return [[int(w) for w in line.split()[1:]] for line in f
                    if line.startswith("proc ") and int(line.split()[2]) == pid]

    def test_memory_shows_in_nvml_as_context_and_segments_until_empty_cache(self):
        out, pid = self.run_torch("""
            out = [[torch.cuda.is_available(), torch.cuda.device_count(),
                    torch.cuda.is_initialized()]]
            a = torch.empty(30 << 20, dtype=torch.uint8, device="cuda")   # 30 MiB segment
            b = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")    # 20 MiB segment
            c = torch.empty(1, dtype=torch.uint8, device="cuda")          # 2 MiB segment
            out.append([torch.cuda.memory_allocated(), torch.cuda.memory_reserved()])
            del a, b, c
            out.append([torch.cuda.memory_allocated(), torch.cuda.memory_reserved()])
            torch.cuda.empty_cache()
            out.append([torch.cuda.memory_reserved(), torch.cuda.max_memory_reserved()])
            """, visible="1")
        self.assertEqual(out[0], [True, 1, False])  # asking initialises nothing
        self.assertEqual(out[1], [(30 << 20) + (3 << 20) + 512, 52 * MIB])
        self.assertEqual(out[2], [0, 52 * MIB])     # freed tensors stay cached
        self.assertEqual(out[3], [0, 52 * MIB])
        # NVML card 1 (CUDA's 0 here): the context first, then each segment; empty_cache()
        # gives the segments back one by one, and the exit the context.
        held = [size for idx, _, size in self.proc_lines(pid) if idx == 1]
        self.assertEqual(held[:4], [CONTEXT, CONTEXT + 30 * MIB, CONTEXT + 50 * MIB,
                                    CONTEXT + 52 * MIB])
        self.assertEqual(sorted(held[3:], reverse=True), held[3:])
        self.assertEqual(held[-2:], [CONTEXT, 0])

    def test_a_fraction_fails_the_segment_past_it_with_pytorchs_text(self):
        out, pid = self.run_torch("""
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(GIB / total, 0)
            a = torch.empty(600 << 20, dtype=torch.uint8, device="cuda")
            try:
                torch.empty(500 << 20, dtype=torch.uint8, device="cuda")
                out = None
            except torch.cuda.OutOfMemoryError as exc:
                out = [str(exc), isinstance(exc, RuntimeError), type(exc).__module__,
                       torch.cuda.get_per_process_memory_fraction(0)]
            """.replace("GIB", str(GIB)))
        self.assertEqual(out[0], (
            "CUDA out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total capacity of "
            "8.00 GiB of which 7.22 GiB is free. Including non-PyTorch memory, this process has "
            "800.00 MiB memory in use. 1024.00 MiB allowed; Of the allocated memory 600.00 MiB "
            "is allocated by PyTorch, and 0 bytes is reserved by PyTorch but unallocated. If "
            "reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See "
            "documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"))
        self.assertEqual(out[1:], [True, "torch", 0.125])

    def test_a_full_device_names_the_other_processes_and_says_no_allowed(self):
        with open(self.state, "a") as f:
            f.write("proc 0 1 7G\n")  # pid 1 lives: another job holds 7 of 8 GiB
        out, pid = self.run_torch("""
            try:
                torch.empty(900 << 20, dtype=torch.uint8, device="cuda")
                out = None
            except torch.OutOfMemoryError as exc:
                out = str(exc)
            """)
        self.assertTrue(out.startswith(
            "CUDA out of memory. Tried to allocate 900.00 MiB. GPU 0 has a total capacity of "
            "8.00 GiB of which 824.00 MiB is free. Process 1 has 7.00 GiB memory in use. "
            "Including non-PyTorch memory, this process has 200.00 MiB memory in use. Of the "
            "allocated memory 0 bytes is allocated by PyTorch"), out)

    def test_memory_outside_the_allocator_and_fragments_pass_the_fraction_as_in_pytorch(self):
        # pytorch#69688: the fraction is checked where the allocator asks for a segment; what
        # a library takes from the driver itself is never checked, but NVML counts it.
        out, pid = self.run_torch("""
            torch.cuda.set_per_process_memory_fraction(0.0625, 0)   # 512 MiB of 8 GiB
            out = [torch._standin.outside_allocator(900 << 20)]
            torch._standin.fragment(100 << 20)                       # 100 MiB stays reserved
            a = torch.empty(90 << 20, dtype=torch.uint8, device="cuda")  # fits the fragment
            out.append([torch.cuda.memory_reserved(), torch._standin.usage(),
                        torch._standin.context()])
            del a
            torch.cuda.empty_cache()
            out.append(torch.cuda.memory_reserved())
            torch._standin.release_outside()
            out.append([torch._standin.usage(), torch._standin.usage_peak()])
            torch._standin.reset_usage_peak()
            out.append(torch._standin.usage_peak())
            torch._standin.release()  # as the driver at exit: the process's line goes to 0
            """)
        self.assertTrue(out[0])
        self.assertEqual(out[1], [100 * MIB, CONTEXT + 900 * MIB + 100 * MIB, CONTEXT])
        self.assertEqual(out[2], 100 * MIB)      # a live block keeps its segment
        self.assertEqual(out[3], [CONTEXT + 100 * MIB, CONTEXT + 1000 * MIB])
        self.assertEqual(out[4], CONTEXT + 100 * MIB)
        self.assertEqual(self.proc_lines(pid)[-1], [0, pid, 0])

    def test_devices_are_numbered_as_cuda_visible_devices_orders_them(self):
        out, pid = self.run_torch("""
            torch.cuda.set_device(1)                     # NVML card 0 under "1,0"
            a = torch.empty(10 << 20, dtype=torch.uint8, device="cuda")
            b = torch.empty(10 << 20, dtype=torch.uint8, device="cuda:0")
            out = [torch.cuda.current_device(), torch.cuda.mem_get_info(),
                   torch.cuda.mem_get_info(0), torch.cuda.memory_reserved(0),
                   torch.cuda.memory_reserved(1), str(a.device), str(b.device)]
            """, visible="1,0")
        self.assertEqual(out, [1, [8 * GIB - CONTEXT - 10 * MIB, 8 * GIB],
                               [4 * GIB - CONTEXT - 10 * MIB, 4 * GIB], 10 * MIB, 10 * MIB,
                               "cuda:1", "cuda:0"])
        last = {idx: size for idx, _, size in self.proc_lines(pid)[:-2]}
        self.assertEqual(last, {0: CONTEXT + 10 * MIB, 1: CONTEXT + 10 * MIB})

    def test_the_call_log_has_the_code_under_tests_calls_only(self):
        self.run_torch("""
            torch.cuda.set_per_process_memory_fraction(0.5, 0)
            torch.cuda.mem_get_info()
            out = None
            """)
        with open(self.calls) as f:
            calls = [json.loads(line) for line in f]
        self.assertEqual(calls, [
            {"call": "torch.cuda.set_per_process_memory_fraction", "args": [0.5, 0],
             "kwargs": {}},
            {"call": "torch.cuda.mem_get_info", "args": [], "kwargs": {}}])

    def test_bad_fractions_are_refused_as_pytorch_refuses_them(self):
        out, _ = self.run_torch("""
            out = []
            for bad in (1, 1.5, -0.1):
                try:
                    torch.cuda.set_per_process_memory_fraction(bad, 0)
                    out.append(None)
                except (TypeError, ValueError) as exc:
                    out.append([type(exc).__name__, str(exc)])
            """)
        self.assertEqual(out, [
            ["TypeError", "Invalid type for fraction argument, must be `float`"],
            ["ValueError", "Invalid fraction value: 1.5. Allowed range: 0~1"],
            ["ValueError", "Invalid fraction value: -0.1. Allowed range: 0~1"]])


if __name__ == "__main__":
    unittest.main()
