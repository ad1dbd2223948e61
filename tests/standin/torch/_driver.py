"""The stand-in's CUDA driver: devices and device memory in the fake NVML state file.

Not PyTorch: what the CUDA driver does under it, as far as sweepd's tests need. The devices are
the ``gpu`` lines of the file ``FAKE_NVML_STATE`` names (the state of ``fake-nvml/fake_nvml.c``),
numbered as CUDA numbers them under ``CUDA_VISIBLE_DEVICES`` (entries are NVML indices, as
sweepd sets them with ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; the list stops at the first entry that
is not one, as CUDA's does). What this process holds on a device (its context and the segments
its allocator took from the driver) is written as a ``proc <nvml index> <pid> <bytes>`` line
each time it changes, one ``os.write`` of a whole line on an ``O_APPEND`` descriptor, so the
fake NVML, the daemon and other processes see it; a ``proc ... 0`` line when the process exits
through Python (a killed one leaves its line to the fake's ``prune_dead_pids``).

A device's free memory is its total less every process's line (the dead left out under
``prune_dead_pids``), as the fake NVML computes it: a segment the driver cannot fit fails as
``cudaMalloc`` does, and the allocator above raises PyTorch's out-of-memory error.

``FAKE_TORCH_CONTEXT`` (a size, default 500M) is the CUDA context, created at the first call
that needs one (an allocation, ``mem_get_info``, ``set_per_process_memory_fraction``, ...), never
at import or ``torch.cuda.init()``.
"""

import atexit
import os
import re
import threading

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
NVML_VALUE_NOT_AVAILABLE = (1 << 64) - 1  # nvml.h's -1 in an unsigned long long
_UNITS = {"": 1, "K": KIB, "M": MIB, "G": GIB, "T": 1 << 40}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)

CUDA_HINT = (
    "\nCUDA kernel errors might be asynchronously reported at some other API call, "
    "so the stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)


def parse_size(text):
    """Bytes in a size: plain bytes or a number with a K/M/G/T suffix (binary units)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError("not a size: %r" % (text,))
    return int(float(m.group(1)) * _UNITS[m.group(2).upper()])


def pid_alive(pid):
    """Whether ``pid`` is a live process (a zombie has freed its device memory)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class State(object):
    """The state file as the fake NVML reads it (a malformed line is skipped here)."""

    def __init__(self):
        self.totals = {}       # nvml index -> total bytes
        self.names = {}        # nvml index -> device name
        self.procs = []        # [idx, pid, bytes], in the fake's order
        self.prune = False
        self.pid_offset = 0
        self.pid_map = {}
        self.unavailable = set()  # devices whose per-process memory NVML does not report
        self.all_unavailable = False

    def apply(self, words):
        kw = words[0]
        if kw == "gpu" and len(words) >= 3:
            idx = int(words[1])
            self.totals[idx] = parse_size(words[2])
            self.names[idx] = " ".join(words[3:]) or "Fake NVIDIA GPU"
        elif kw == "proc" and len(words) == 4:
            idx, pid, size = int(words[1]), int(words[2]), parse_size(words[3])
            at = next((i for i, p in enumerate(self.procs) if p[:2] == [idx, pid]), None)
            if size == 0:
                if at is not None:  # the fake's order: the last entry takes the slot
                    last = self.procs.pop()
                    if at < len(self.procs):
                        self.procs[at] = last
            elif at is None:
                self.procs.append([idx, pid, size])
            else:
                self.procs[at][2] = size
        elif words == ["prune_dead_pids"]:
            self.prune = True
        elif kw == "pid_offset" and len(words) == 2:
            self.pid_offset = int(words[1])
        elif kw == "pid_map" and len(words) == 3:
            if int(words[2]):
                self.pid_map[int(words[1])] = int(words[2])
            else:
                self.pid_map.pop(int(words[1]), None)
        elif kw == "proc_memory_unavailable":
            if len(words) == 1:
                self.all_unavailable = True
            else:
                self.unavailable.add(int(words[1]))

    def device_procs(self, idx):
        """(pid, bytes) of the processes on device ``idx``, the dead left out if pruned."""
        return [(pid, size) for i, pid, size in self.procs
                if i == idx and (not self.prune or pid_alive(pid))]

    def listed(self, idx):
        """(pid, usedGpuMemory) as NVML lists device ``idx``'s processes."""
        hidden = self.all_unavailable or idx in self.unavailable
        return [(self.pid_map.get(pid, pid + self.pid_offset),
                 NVML_VALUE_NOT_AVAILABLE if hidden else size)
                for pid, size in self.device_procs(idx)]


def read_state(path):
    """The state file at ``path``, or None when there is none (no driver)."""
    state = State()
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for line in lines:
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        try:
            state.apply(words)
        except ValueError:
            continue
    return state


def append_line(path, line):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class CudaError(RuntimeError):
    """Raised by the driver; torch turns it into its own exception types."""


class Driver(object):
    """This process's view of the devices, and what it holds on each."""

    def __init__(self):
        self.lock = threading.RLock()
        self.path = os.environ.get("FAKE_NVML_STATE") or None
        self._visible = None
        self.context = {}     # cuda ordinal -> context bytes, once created
        self.segments = {}    # cuda ordinal -> bytes held by cudaMalloc
        self.peak = {}        # cuda ordinal -> the most held (context + segments) since reset
        self.written = set()  # nvml indices this process wrote a non-zero line for
        atexit.register(self.release)

    def state(self):
        return read_state(self.path) if self.path else None

    def visible(self):
        """NVML indices of the devices CUDA shows, in CUDA's order (read once, as cuInit)."""
        if self._visible is None:
            state = self.state()
            present = sorted(state.totals) if state is not None else []
            raw = os.environ.get("CUDA_VISIBLE_DEVICES")
            if raw is None:
                self._visible = present
            else:
                out = []
                for entry in raw.split(","):
                    entry = entry.strip()
                    if not entry.isdigit() or int(entry) not in present or int(entry) in out:
                        break
                    out.append(int(entry))
                self._visible = out
        return self._visible

    def nvml_index(self, device):
        return self.visible()[device]

    def total(self, device):
        state = self.state()
        total = state.totals.get(self.nvml_index(device)) if state is not None else None
        if total is None:
            raise CudaError("CUDA error: unspecified launch failure" + CUDA_HINT)
        return total

    def name(self, device):
        state = self.state()
        return state.names.get(self.nvml_index(device), "") if state is not None else ""

    def held(self, device):
        return self.context.get(device, 0) + self.segments.get(device, 0)

    def free(self, device):
        """cudaMemGetInfo's free: the total less every process's line, ours included."""
        state = self.state()
        idx = self.nvml_index(device)
        used = sum(size for _, size in state.device_procs(idx))
        return max(state.totals[idx] - used, 0)

    def _publish(self, device):
        held = self.held(device)
        self.peak[device] = max(self.peak.get(device, 0), held)
        idx = self.nvml_index(device)
        if self.path and (held or idx in self.written):
            append_line(self.path, "proc %d %d %d" % (idx, os.getpid(), held))
            self.written.add(idx)

    def ensure_context(self, device):
        """The primary context of ``device``, created on first need (it takes device memory)."""
        with self.lock:
            if device in self.context:
                return
            size = parse_size(os.environ.get("FAKE_TORCH_CONTEXT") or "500M")
            if self.free(device) < size:
                raise CudaError("CUDA error: out of memory" + CUDA_HINT)
            self.context[device] = size
            self._publish(device)

    def mem_get_info(self, device):
        with self.lock:
            self.ensure_context(device)
            return self.free(device), self.total(device)

    def malloc(self, device, size):
        """cudaMalloc of ``size`` bytes: True, or False when the device has no room."""
        with self.lock:
            self.ensure_context(device)
            if self.free(device) < size:
                return False
            self.segments[device] = self.segments.get(device, 0) + size
            self._publish(device)
            return True

    def cuda_free(self, device, size):
        with self.lock:
            self.segments[device] -= size
            self._publish(device)

    def listed(self, device):
        """(pid, usedGpuMemory) of the device's processes as NVML lists them."""
        return self.state().listed(self.nvml_index(device))

    def release(self):
        """What the driver does when the process exits: every line back to 0."""
        with self.lock:
            for idx in sorted(self.written):
                try:
                    append_line(self.path, "proc %d %d 0" % (idx, os.getpid()))
                except OSError:
                    pass  # the state is gone: nobody reads it any more
            self.written.clear()
            self.context.clear()
            self.segments.clear()


DRIVER = Driver()
