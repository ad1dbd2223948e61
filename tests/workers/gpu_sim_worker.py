#!/usr/bin/env python3
"""A simulated GPU trial worker for sweepd: "allocates" memory in a fake NVML state file.

No GPU is needed.  The worker appends ``proc <dev> <pid> <bytes>`` lines to the
state file read by the fake ``libnvidia-ml.so.1`` (one ``os.write`` of a whole
line on an O_APPEND descriptor, so concurrent workers never interleave) and fails
the way PyTorch / JAX / TensorFlow do when asked to.  Sizes are plain bytes or a
number with a K/M/G/T suffix (KiB/MiB/GiB/TiB), e.g. "6G", "500M", "1.5G".

Environment (all optional; N is a trial *number*, or a comma-separated list):

FAKE_NVML_STATE=PATH      the fake NVML state file (unset: no memory accounting)
CUDA_VISIBLE_DEVICES      the device is its first entry (an NVML index); default 0
SIM_MEM=SIZE              trial peak on top of the baseline (default 1G)
SIM_MEM_PRODUCT=A,B,...   the trial peak is SIM_MEM_BASE + SIM_MEM_UNIT x params[A] x
                          params[B] x ... (numeric params), a network whose memory
                          grows with its sizes and not with its other params
SIM_MEM_UNIT=SIZE         (default 1M) and SIM_MEM_BASE=SIZE (default 0) for it
SIM_MEM_NOISE=F           the peak varies by up to +-F (a fraction) from trial to trial,
                          the same for the same trial number (run-to-run noise)
SIM_HOLD_RANGE=A,B        seconds held at the peak drawn in [A, B] per trial number
                          (the same for the same number: runs are comparable)
SIM_BY_NUMBER=JSON        per trial number, settings over its params:
                          '{"3": {"hold": 4, "mem": "2G"}}'
SIM_LAZY_CONTEXT=1        the CUDA context appears at the first allocation, as with a
                          real framework, not when the worker starts
SIM_SEGMENT=SIZE          the caching allocator reserves whole segments: a trial's
                          reserved memory grows in multiples of SIZE (default 0: exact)
SIM_RAMP_S=S              seconds to reach the peak (default 0.2)
SIM_STEPS=K               allocation steps to reach the peak (default 5); each one
                          checks room, appends a proc line, reports, sleeps
SIM_HOLD_S=S              seconds held at the peak (default 0.2)
SIM_DELAY_START_S=S       seconds a trial waits before its first allocation (default 0)
SIM_CONTEXT=SIZE          CUDA context, registered at worker start (default 500M)
SIM_FRAG_PER_TRIAL=SIZE   persistent mode: reserved-but-unallocated memory added to
                          the baseline after every trial (default 0); a tenth of it
                          if SIM_EXPANDABLE_HELPS=1 and PYTORCH_CUDA_ALLOC_CONF
                          contains expandable_segments:True
SIM_ASSERT_ON=N           device-side assert (torch.AcceleratorError)
SIM_ASSERT_PARAM=NAME=V   device-side assert in every trial where str(params[NAME]) == V
SIM_ABORT_AFTER_ASSERT=1  on an assert, print the CUDA text to stderr and os.abort()
SIM_ILLEGAL_ON=N          illegal memory access (torch.AcceleratorError)
SIM_STICKY_CUDA_ERROR=1   after an AcceleratorError every later trial of this
                          process fails with the same error (as a real CUDA context)
SIM_SEGV_ON=N             SIGSEGV itself
SIM_OOMKILL_ON=N          SIGKILL itself (the kernel OOM killer)
SIM_HANG_ON=N             sleep forever, no more reports
SIM_JAX_OOM_ON=N          jaxlib.xla_extension.XlaRuntimeError RESOURCE_EXHAUSTED
SIM_TF_OOM_ON=N           tensorflow...errors_impl.ResourceExhaustedError
SIM_CHILD_MEM=SIZE        fork a "DataLoader" child at start holding SIZE under its
                          own pid until its parent dies (then it releases it)
SIM_RECORD=PATH           append "pid trial_number peak_bytes seconds outcome planned_bytes
                          planned_seconds" per finished trial: the highest usage of the
                          process in the trial and how long the objective ran; `complete` or
                          `fail`; and the peak and length it was drawn to have, which a trial
                          that failed (out of memory) never reached
SIM_NO_TORCH=1            do not install the stand-in ``torch`` module (below)

Memory as PyTorch's caching allocator holds it: a trial's allocations grow the
process's *reserved* memory; when the trial frees its tensors the memory stays
reserved (counted by NVML) until ``torch.cuda.empty_cache()``. The worker puts a
stand-in ``torch`` module in ``sys.modules`` whose ``cuda.empty_cache()`` gives
the reserved memory back and whose ``max_memory_allocated/reserved()`` report the
trial's peaks, so the sweepd_worker helper releases and reports exactly as it
does with real PyTorch; with SIM_NO_TORCH=1 an idle worker keeps its last
trial's peak reserved, as a worker without the helper's release would.

Params override the env defaults: ``mem`` (a number = MiB, or a size string),
``ramp``, ``hold``, ``steps``, ``delay``, ``late`` (a size the trial allocates on top
halfway through its hold, as an evaluation pass with larger batches does), and ``fault`` (one of assert, abort,
illegal, segv, oomkill, hang, jax_oom, tf_oom).  Faults strike right after the
first allocation step, with that memory in use.

Running out of room (other processes' usage + this one's new usage > the gpu's
total) raises torch.OutOfMemoryError with PyTorch's text.  The value is the sum
of squares of the numeric params plus len(str(p)) for the others; step k reports
value + (steps - 1 - k).  On exit (shutdown, EOF, SIGTERM, exception) the worker
appends ``proc <dev> <pid> 0``; on SIGKILL/SIGSEGV/SIGABRT it cannot.
"""

import atexit
import json
import os
import random
import re
import signal
import sys
import time

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import sweepd_worker  # noqa: E402

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
_UNITS = {"": 1, "K": KIB, "M": MIB, "G": GIB, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


# The exception types the frameworks raise, named as sweepd will see them.
OutOfMemoryError = type("OutOfMemoryError", (RuntimeError,), {"__module__": "torch"})
AcceleratorError = type("AcceleratorError", (RuntimeError,), {"__module__": "torch"})
XlaRuntimeError = type("XlaRuntimeError", (RuntimeError,),
                       {"__module__": "jaxlib.xla_extension"})
ResourceExhaustedError = type("ResourceExhaustedError", (Exception,),
                              {"__module__": "tensorflow.python.framework.errors_impl"})

CUDA_HINT = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, "
    "so the stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)
ASSERT_TEXT = "CUDA error: device-side assert triggered" + CUDA_HINT
ILLEGAL_TEXT = "CUDA error: an illegal memory access was encountered" + CUDA_HINT
OOM_TEXT = (
    "CUDA out of memory. Tried to allocate {x:.2f} GiB. GPU {dev} has a total capacity "
    "of {total:.2f} GiB of which {free:.2f} MiB is free. Including non-PyTorch memory, "
    "this process has {own:.2f} GiB memory in use. Of the allocated memory {alloc:.2f} GiB "
    "is allocated by PyTorch, and "
    "{frag:.2f} GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
    "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
    "avoid fragmentation.  See documentation for Memory Management  "
    "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
FAULTS = ("assert", "abort", "illegal", "segv", "oomkill", "hang", "jax_oom", "tf_oom")


def parse_size(text):
    """Bytes in a size: plain bytes or a number with a K/M/G/T suffix (binary units)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError("not a size: %r" % (text,))
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def pid_alive(pid):
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie has freed its GPU memory
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def read_state(path):
    """Parse the state file as the fake NVML does: ({idx: total}, {(idx, pid): bytes})."""
    totals, procs, prune = {}, {}, False
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return totals, procs
    for line in lines:
        words = line.split()
        try:
            if words[:1] == ["gpu"] and len(words) >= 3:
                totals[int(words[1])] = parse_size(words[2])
            elif words[:1] == ["proc"] and len(words) >= 4:
                key, size = (int(words[1]), int(words[2])), parse_size(words[3])
                if size:
                    procs[key] = size
                else:
                    procs.pop(key, None)
            elif words == ["prune_dead_pids"]:
                prune = True
        except ValueError:
            continue  # a malformed line is ignored
    if prune:
        procs = {k: v for k, v in procs.items() if pid_alive(k[1])}
    return totals, procs


def append_line(path, line):
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def _numbers(name):
    return {int(x) for x in (os.environ.get(name) or "").split(",") if x.strip()}


def _device():
    first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


STATE = os.environ.get("FAKE_NVML_STATE")
DEV = _device()
PERSISTENT = os.environ.get("SWEEPD_MODE") == "persistent"
CHANNEL_FD = os.environ.get("SWEEPD_FD")  # read before serve() removes it
CONTEXT = parse_size(os.environ.get("SIM_CONTEXT") or "500M")
FRAG_PER_TRIAL = parse_size(os.environ.get("SIM_FRAG_PER_TRIAL") or "0")
if (os.environ.get("SIM_EXPANDABLE_HELPS") == "1"
        and "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")):
    FRAG_PER_TRIAL //= 10
ENV_FAULTS = {name: _numbers("SIM_%s_ON" % name.upper()) for name in FAULTS if name != "abort"}
ABORT_AFTER_ASSERT = os.environ.get("SIM_ABORT_AFTER_ASSERT") == "1"
STICKY = os.environ.get("SIM_STICKY_CUDA_ERROR") == "1"
ASSERT_PARAM = (os.environ.get("SIM_ASSERT_PARAM") or "").partition("=")
RECORD = os.environ.get("SIM_RECORD")
LAZY_CONTEXT = os.environ.get("SIM_LAZY_CONTEXT") == "1"
SEGMENT = parse_size(os.environ.get("SIM_SEGMENT") or "0")
MEM_NOISE = float(os.environ.get("SIM_MEM_NOISE") or 0)
BY_NUMBER = json.loads(os.environ.get("SIM_BY_NUMBER") or "{}")


class Gpu(object):
    """This process's usage on the simulated device."""

    def __init__(self):
        self.context = 0 if LAZY_CONTEXT else CONTEXT  # the CUDA context, once created
        self.frag = 0        # reserved by PyTorch but unallocated (grows per trial)
        self.alloc = 0       # allocated by the current trial's tensors
        self.reserved = 0    # held by the caching allocator for tensors (>= alloc)
        self.peak = 0
        self.peak_alloc = 0  # torch.cuda.max_memory_allocated() since the last reset
        self.peak_reserved = 0  # torch.cuda.max_memory_reserved() since the last reset
        self.sticky = None   # the AcceleratorError text once the context is broken

    def usage(self):
        return self.context + self.frag + self.reserved

    def publish(self):
        self.peak = max(self.peak, self.usage())
        append_line(STATE, "proc %d %d %d" % (DEV, os.getpid(), self.usage()))

    def reserved_for(self, alloc):
        """What the caching allocator reserves for an allocation of ``alloc`` bytes: what it
        already reserves (an earlier trial's, not emptied) is reused first; new memory comes
        in whole segments."""
        reserved = -(-alloc // SEGMENT) * SEGMENT if SEGMENT else alloc
        return max(self.reserved, reserved)

    def usage_at(self, alloc):
        """What this process would hold with the trial's allocation at ``alloc`` bytes."""
        return CONTEXT + self.frag + self.reserved_for(alloc)

    def allocate_to(self, alloc):
        """Grow this trial's allocation to ``alloc`` bytes (``reserved_for``), or raise
        OutOfMemoryError; the first allocation creates the context."""
        reserved = self.reserved_for(alloc)
        context = CONTEXT - self.context  # to create now, if lazy
        need = reserved - self.reserved + context
        if STATE and need > 0:
            totals, procs = read_state(STATE)
            total = totals.get(DEV)
            others = sum(v for (idx, pid), v in procs.items()
                         if idx == DEV and pid != os.getpid())
            if total is not None and others + self.usage() + need > total:
                free = max(total - others - self.usage(), 0)
                raise OutOfMemoryError(OOM_TEXT.format(
                    x=need / GIB, dev=DEV, total=total / GIB, free=free / MIB,
                    own=self.usage() / GIB, alloc=self.alloc / GIB, frag=self.frag / GIB))
        self.alloc = alloc
        self.reserved = reserved
        self.context = CONTEXT
        self.peak_alloc = max(self.peak_alloc, alloc)
        self.peak_reserved = max(self.peak_reserved, self.allocator_reserved())
        self.publish()

    def allocator_reserved(self):
        """torch.cuda.memory_reserved(): what the caching allocator holds, the fragmented
        segments of earlier trials included (the context is not the allocator's)."""
        return self.frag + self.reserved

    def free_tensors(self):
        """The trial's tensors are gone; the allocator keeps their memory reserved."""
        self.alloc = 0

    def empty_cache(self):
        """torch.cuda.empty_cache(): reserved memory no tensor uses goes back to the driver."""
        self.reserved = self.alloc
        self.publish()

    def release(self):
        append_line(STATE, "proc %d %d 0" % (DEV, os.getpid()))


GPU = Gpu()


def value_of(params):
    total = 0.0
    for value in params.values():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            total += float(value) ** 2
        else:
            total += len(str(value))
    return total


def setting(params, name, env, default, convert=float):
    return convert(params[name] if name in params else (os.environ.get(env) or default))


def trial_mem(params, number):
    product = [n.strip() for n in (os.environ.get("SIM_MEM_PRODUCT") or "").split(",")
               if n.strip()]
    if "mem" in params and isinstance(params["mem"], (int, float)):
        mem = int(params["mem"] * MIB)
    elif "mem" not in params and product:
        mem = float(parse_size(os.environ.get("SIM_MEM_UNIT") or "1M"))
        for name in product:
            mem *= float(params[name])
        mem = parse_size(os.environ.get("SIM_MEM_BASE") or "0") + int(mem)
    else:
        mem = parse_size(params.get("mem") or os.environ.get("SIM_MEM") or "1G")
    if MEM_NOISE:
        mem = int(mem * (1 + MEM_NOISE * (2 * per_trial(number, 1) - 1)))
    return mem


def per_trial(number, which):
    """A number in [0, 1) that depends only on the trial number (and which draw it is)."""
    return random.Random("%s/%s" % (number, which)).random()


def hold_of(params, number):
    if "hold" in params:
        return float(params["hold"])
    span = os.environ.get("SIM_HOLD_RANGE")
    if span:
        low, high = (float(x) for x in span.split(","))
        return low + (high - low) * per_trial(number, 2)
    return float(os.environ.get("SIM_HOLD_S") or 0.2)


def choose_fault(trial, params):
    fault = params.get("fault")
    if fault is not None:
        if fault not in FAULTS:
            raise ValueError("unknown fault %r (known: %s)" % (fault, ", ".join(FAULTS)))
        return fault
    name, _, wanted = ASSERT_PARAM
    if name and name in trial.params and str(trial.params[name]) == wanted:
        return "assert"
    for fault, numbers in ENV_FAULTS.items():
        if trial.number in numbers:
            return fault
    return None


def strike(fault):
    sys.stdout.flush()
    sys.stderr.flush()
    if fault in ("assert", "abort"):
        sys.stderr.write(
            "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: "
            "[0,0,0], thread: [0,0,0] Assertion `-sizes[i] <= index && index < sizes[i] "
            "&& \"index out of bounds\"` failed.\n")
        if fault == "abort" or ABORT_AFTER_ASSERT:
            sys.stderr.write("terminate called after throwing an instance of "
                             "'c10::AcceleratorError'\n  what():  %s\n" % ASSERT_TEXT)
            sys.stderr.flush()
            os.abort()  # dies of SIGABRT with the CUDA text on stderr
        GPU.sticky = ASSERT_TEXT if STICKY else None
        raise AcceleratorError(ASSERT_TEXT)
    if fault == "illegal":
        GPU.sticky = ILLEGAL_TEXT if STICKY else None
        raise AcceleratorError(ILLEGAL_TEXT)
    if fault in ("segv", "oomkill"):
        os.kill(os.getpid(), signal.SIGSEGV if fault == "segv" else signal.SIGKILL)
        time.sleep(10)  # the signal is delivered before this returns
    if fault == "hang":
        while True:
            time.sleep(3600)
    if fault == "jax_oom":
        raise XlaRuntimeError(
            "RESOURCE_EXHAUSTED: Out of memory while trying to allocate 17179869184 bytes.")
    if fault == "tf_oom":
        raise ResourceExhaustedError(
            "OOM when allocating tensor with shape[1024,1024,1024] and type float on "
            "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc")


def objective(trial):
    if GPU.sticky:
        raise AcceleratorError(GPU.sticky)
    params = dict(trial.params)
    params.update(BY_NUMBER.get(str(trial.number), {}))
    mem = trial_mem(params, trial.number)
    ramp = setting(params, "ramp", "SIM_RAMP_S", 0.2)
    hold = hold_of(params, trial.number)
    steps = max(setting(params, "steps", "SIM_STEPS", 5, int), 1)
    delay = setting(params, "delay", "SIM_DELAY_START_S", 0)
    fault = choose_fault(trial, params)
    value = value_of(trial.params)
    began = time.monotonic()
    GPU.peak = GPU.usage()
    # The trial as drawn, for a bench's oracle: one that runs out of memory holds less, for
    # less time, than it would have on a card with room for it.
    planned = GPU.usage_at(mem + (parse_size(params["late"]) if params.get("late") else 0))
    outcome = "fail"
    try:
        time.sleep(delay)
        for step in range(steps):
            GPU.allocate_to(mem * (step + 1) // steps)
            if step == 0 and fault:
                strike(fault)
            trial.report(value + (steps - 1 - step), step)
            if trial.should_prune():
                raise sweepd_worker.TrialPruned()
            time.sleep(ramp / steps)
        if params.get("late"):
            time.sleep(hold / 2)
            GPU.allocate_to(mem + parse_size(params["late"]))
            time.sleep(hold / 2)
        else:
            time.sleep(hold)
        outcome = "complete"
        return value
    finally:
        GPU.free_tensors()
        if PERSISTENT:
            GPU.frag += FRAG_PER_TRIAL
        if RECORD:
            append_line(RECORD, "%d %s %d %.6f %s %d %.6f" % (
                os.getpid(), trial.number, GPU.peak, time.monotonic() - began, outcome,
                planned, delay + ramp + hold))
        GPU.publish()


def dataloader_child(size):
    """Fork a child holding ``size`` bytes on the device until its parent dies."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    registered, done = os.pipe()
    if os.fork() != 0:  # wait until the child's line is in the state file
        os.close(done)
        os.read(registered, 1)
        os.close(registered)
        return

    def on_sigterm(_signum, _frame):
        raise SystemExit(0)

    try:  # never return into the parent's code: always end in os._exit()
        if CHANNEL_FD is not None:
            os.close(int(CHANNEL_FD))  # sweepd must see EOF when the worker dies
        signal.signal(signal.SIGTERM, on_sigterm)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        append_line(STATE, "proc %d %d %d" % (DEV, os.getpid(), size))
        os.close(registered)
        os.close(done)
        while os.getppid() == parent:
            time.sleep(0.2)
    finally:
        try:
            append_line(STATE, "proc %d %d 0" % (DEV, os.getpid()))
        finally:
            os._exit(0)


def install_torch_stand_in():
    """A ``torch`` module with the calls sweepd_worker makes between trials."""
    import types

    def reset_peak_memory_stats():
        GPU.peak_alloc = GPU.alloc
        GPU.peak_reserved = GPU.allocator_reserved()

    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        empty_cache=GPU.empty_cache,
        reset_peak_memory_stats=reset_peak_memory_stats,
        max_memory_allocated=lambda: GPU.peak_alloc,
        max_memory_reserved=lambda: GPU.peak_reserved,
        memory_reserved=GPU.allocator_reserved,
    )
    sys.modules["torch"] = types.SimpleNamespace(cuda=cuda, __sweepd_simulated__=True)


def main():
    if os.environ.get("SIM_NO_TORCH") != "1":
        install_torch_stand_in()
    if not STATE:
        sys.stderr.write("gpu_sim_worker: FAKE_NVML_STATE is not set; no memory accounting\n")
    child_mem = os.environ.get("SIM_CHILD_MEM")
    if child_mem and parse_size(child_mem):
        dataloader_child(parse_size(child_mem))
    if not LAZY_CONTEXT:
        GPU.publish()  # the CUDA context
    atexit.register(GPU.release)

    def on_sigterm(signum, _frame):
        GPU.release()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)  # die of SIGTERM, as a real worker would

    signal.signal(signal.SIGTERM, on_sigterm)
    # The helper leaves with os._exit() when sweepd closes the channel, which
    # skips atexit: release first.
    exit_quietly = sweepd_worker._exit_quietly

    def release_and_exit():
        GPU.release()
        exit_quietly()

    sweepd_worker._exit_quietly = release_and_exit
    sweepd_worker.serve(objective)


if __name__ == "__main__":
    main()
