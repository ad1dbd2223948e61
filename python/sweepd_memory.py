"""Device memory for sweepd's helper (``sweepd_worker``): the cap a trial runs under, what its
framework reports while it runs, and what its out-of-memory error says.

sweepd admits each GPU trial with a memory figure and tells the worker its *cap*: the bytes the
trial's framework allocator may hold (``memory_cap`` in the ``trial`` message, or
``SWEEPD_MEMORY_CAP`` in the environment). The helper enforces it with the framework's own
limit, so a trial that grows past its estimate fails alone at its cap instead of taking memory
its neighbours were admitted with:

* PyTorch: ``torch.cuda.set_per_process_memory_fraction(cap / total_memory, device)``, set at
  each trial's start (the cap can change between trials of a persistent worker) and, where
  ``SWEEPD_MEMORY_CAP`` is set, as soon as ``torch`` is imported (at ``import sweepd_worker``
  when torch already is, else right after the script imports it), so that a oneshot script's
  first allocation, even one at module level, is already capped. PyTorch is never imported
  here: a worker that does not use it pays nothing. Setting the fraction initialises CUDA and
  creates the device's context, memory a GPU trial takes at its first allocation anyway.
* TensorFlow (best effort): a logical device with ``memory_limit`` (MiB) on the first GPU,
  right after ``tensorflow`` is imported; TensorFlow takes it only before it initialises the
  GPU, so it stays fixed for the process's life.
* JAX: sweepd sets ``XLA_PYTHON_CLIENT_MEM_FRACTION`` at spawn; nothing to do here.

The check is PyTorch's: it happens where the caching allocator asks the driver for memory
(pytorch#69688): memory taken outside the allocator, or a spike between two checks, passes it.
NVML stays the authority for what the device has free.

While a trial runs, a thread sends ``{"type": "memory", "trial_id", "reserved",
"peak_reserved"}`` (and ``context`` where it was measured) at most every 0.5 s and only when a
figure moved by 1 MiB or more: what sweepd attributes to the trial where NVML cannot name the
process (container PID namespaces, per-process memory unavailable, MIG).

This module uses only the standard library and never imports ``sweepd_worker``.
"""

import ctypes
import gc
import os
import re
import sys
import threading
import time

#: The environment variable that carries the cap (bytes) at spawn.
ENV_CAP = "SWEEPD_MEMORY_CAP"

#: ``memory`` messages: at most one per interval, only when a figure moved by a step.
MEMORY_INTERVAL_S = 0.5
MEMORY_STEP_BYTES = 1 << 20

_POLL_S = 0.1
_MIB = 1 << 20

# c10's format_size units, as PyTorch's out-of-memory message writes them.
_SIZE_UNITS = {"bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
_TRIED_RE = re.compile(r"Tried to allocate ([0-9]+(?:\.[0-9]+)?) (bytes|KiB|MiB|GiB)")

# Modules whose objects can hold device memory until the garbage collector frees them.
_DEVICE_FRAMEWORKS = ("torch", "tensorflow", "jax", "cupy")


def _warn(text):
    try:
        sys.stderr.write("sweepd_worker: %s\n" % (text,))
        sys.stderr.flush()
    except Exception:
        pass


# --------------------------------------------------------------------------
# Decisions (pure)


def read_cap(value, source):
    """A cap in bytes from ``value`` (an int, or the text of one), or None for no cap.

    ``source`` names where it came from, for the ValueError a value that is not a byte count
    raises (the caller warns and runs the trial uncapped: a bad cap must not fail a trial).
    """
    if value is None:
        return None
    if isinstance(value, str):
        text = value.strip()
        if text == "" or text.lower() in ("none", "null"):
            return None
        try:
            value = int(text)
        except ValueError:
            raise ValueError("%s=%r is not a number of bytes" % (source, value))
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("%s=%r is not a number of bytes" % (source, value))
    return value


def cap_fraction(cap, total):
    """The fraction for ``set_per_process_memory_fraction``: ``cap / total`` within [0, 1];
    1.0 (no limit) for no cap or a device of unknown size."""
    if cap is None or not total or total <= 0:
        return 1.0
    return min(max(float(cap) / float(total), 0.0), 1.0)


def requested_bytes(message):
    """The allocation a PyTorch out-of-memory message names ("Tried to allocate 1.50 GiB"), in
    bytes as the message writes it (two decimals), or None."""
    m = _TRIED_RE.search(message or "")
    if not m:
        return None
    return int(round(float(m.group(1)) * _SIZE_UNITS[m.group(2)]))


def is_framework_oom(exc):
    """Whether ``exc`` is a framework's out-of-memory error (PyTorch's OutOfMemoryError, or
    its text under another type)."""
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    try:
        return str(exc).startswith("CUDA out of memory.")
    except Exception:
        return False


def memory_due(last, figures, since_s):
    """Whether a ``memory`` message with ``figures`` is due: ``since_s`` seconds after the last
    one (None: none sent yet), which carried ``last`` (None: nothing sent, read as zeros).
    Due when MEMORY_INTERVAL_S has passed and a figure moved by MEMORY_STEP_BYTES or more."""
    if since_s is not None and since_s < MEMORY_INTERVAL_S:
        return False
    last = last or {}
    return any(abs(v - last.get(k, 0)) >= MEMORY_STEP_BYTES for k, v in figures.items())


# --------------------------------------------------------------------------
# The frameworks (never imported here)


def _cuda_torch():
    """PyTorch, if the objective imported it and initialized CUDA (never imported here)."""
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
            return torch
    except Exception:
        pass
    return None


def reset_framework_peaks():
    torch = _cuda_torch()
    if torch is not None:
        try:
            torch.cuda.reset_peak_memory_stats()
        except Exception:
            pass


def framework_memory():
    """The framework's own peak figures for the trial that just ended, where it is imported
    and they are cheap to ask: {"framework": ..., "peak_allocated": bytes, "peak_reserved":
    bytes}, or None. sweepd measures memory with NVML; these say what the framework saw, which
    NVML's readings, seconds apart, can miss in a short trial (see framework_reserved)."""
    torch = _cuda_torch()
    if torch is None:
        return None
    try:
        return {
            "framework": "torch",
            "peak_allocated": int(torch.cuda.max_memory_allocated()),
            "peak_reserved": int(torch.cuda.max_memory_reserved()),
        }
    except Exception:
        return None


def framework_reserved():
    """What the framework's allocator still reserves now (bytes), or None. Asked right after
    release_caches(): sweepd reads NVML for the worker then, and NVML's figure less this one is
    what the process holds outside the allocator (the CUDA context, library workspaces), which
    with "peak_reserved" gives the trial's peak as NVML would have seen it."""
    torch = _cuda_torch()
    if torch is None:
        return None
    try:
        return int(torch.cuda.memory_reserved())
    except Exception:
        return None


def release_caches():
    """Give the device memory a finished trial left cached back to the driver.

    A persistent worker waits between trials holding its CUDA context; PyTorch's caching
    allocator would also keep every block the trial freed, so an idle worker would hold a
    trial's peak and sweepd could not admit the next trial into that memory. Called between
    trials by serve() in persistent mode: garbage collection (tensors in reference cycles)
    where a device framework is imported, then torch.cuda.empty_cache() and TensorFlow's
    clear_session() where those are imported (nothing is imported here). JAX keeps freed
    memory in its own pool whatever is called; sweepd sets XLA_PYTHON_CLIENT_PREALLOCATE=false
    so that the pool grows only as needed.
    """
    # Only a framework's objects hold device memory; without one a full collection per trial
    # frees nothing worth its time (0.5 ms in a bare process, more the more objects it holds;
    # about 1 ms of CPU per trial in the PostgreSQL coordination benchmark).
    if any(name in sys.modules for name in _DEVICE_FRAMEWORKS):
        gc.collect()
    torch = _cuda_torch()
    if torch is not None:
        try:
            torch.cuda.empty_cache()
        except Exception as exc:
            _warn("torch.cuda.empty_cache() failed: %s" % (exc,))
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        try:
            tf.keras.backend.clear_session()
        except Exception:
            pass


def _nvml_index(cuda_device):
    """The NVML index of the device CUDA numbers ``cuda_device``, or None: sweepd sets
    CUDA_VISIBLE_DEVICES to NVML indices."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return cuda_device
    entries = [e.strip() for e in visible.split(",")]
    if cuda_device >= len(entries) or not entries[cuda_device].isdigit():
        return None
    return int(entries[cuda_device])


class _Nvml:
    """NVML (``libnvidia-ml``, through ctypes: the helper has no dependency), open for the
    readings of one measurement, so that they are taken as close together as NVML allows.
    Every reading is None where NVML or the device cannot give it."""

    class _Memory(ctypes.Structure):  # nvmlMemory_v2_t
        _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong),
                    ("reserved", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                    ("used", ctypes.c_ulonglong)]

    class _Process(ctypes.Structure):  # nvmlProcessInfo_t (v2 and v3)
        _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                    ("gpuInstanceId", ctypes.c_uint), ("computeInstanceId", ctypes.c_uint)]

    def __enter__(self):
        self.lib = None
        try:
            lib = ctypes.CDLL(os.environ.get("SWEEPD_NVML_LIB") or "libnvidia-ml.so.1")
            if lib.nvmlInit_v2() == 0:
                self.lib = lib
        except (OSError, AttributeError):
            pass
        return self

    def __exit__(self, *exc):
        if self.lib is not None:
            self.lib.nvmlShutdown()
        return False

    def _handle(self, cuda_device):
        index = _nvml_index(cuda_device)
        if self.lib is None or index is None:
            return None
        handle = ctypes.c_void_p()
        try:
            if self.lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(index),
                                                      ctypes.byref(handle)) != 0:
                return None
        except AttributeError:
            return None
        return handle

    def device_used(self, cuda_device):
        """The bytes NVML counts as used on the device, every process's included. Device-wide,
        so it works where NVML cannot name this process (a container's PID namespace)."""
        handle = self._handle(cuda_device)
        if handle is None:
            return None
        mem = self._Memory()
        mem.version = ctypes.sizeof(self._Memory) | (2 << 24)  # NVML_MEMORY_V2
        try:
            if self.lib.nvmlDeviceGetMemoryInfo_v2(handle, ctypes.byref(mem)) != 0:
                return None
        except AttributeError:
            return None
        return int(mem.used)

    def process_used(self, cuda_device):
        """The bytes NVML counts for this process on the device: None where it lists this
        process under another PID (a container's PID namespace) or gives no figure per process
        (NVML_VALUE_NOT_AVAILABLE, as on Windows' WDDM or some vGPUs)."""
        handle = self._handle(cuda_device)
        if handle is None:
            return None
        try:
            fn = self.lib.nvmlDeviceGetComputeRunningProcesses_v3
        except AttributeError:
            return None
        for _ in range(3):  # the list may grow between the count and the read
            count = ctypes.c_uint(0)
            rc = fn(handle, ctypes.byref(count), None)
            if rc == 0:
                return None  # no process at all: not this one either
            infos = (self._Process * (count.value + 4))()
            count = ctypes.c_uint(count.value + 4)
            if fn(handle, ctypes.byref(count), infos) == 0:
                for info in infos[:count.value]:
                    if info.pid == os.getpid():
                        used = int(info.usedGpuMemory)
                        return None if used >= (1 << 63) else used
                return None
        return None


# --------------------------------------------------------------------------
# The cap and the figures of this process


class _Memory(object):
    """This process's cap and figures; one instance, ``MEMORY``."""

    def __init__(self):
        self.lock = threading.RLock()
        self.cap = None            # the cap of the running trial (or the spawn's)
        self.spawn_cap = None      # SWEEPD_MEMORY_CAP, read once at import
        self.torch_set = None      # (device, fraction) torch was last told, or None
        self.torch_warned = False
        self.tf_done = False
        self.tf_cap = None         # the memory_limit TensorFlow took, or None
        self.context = None        # bytes held outside the allocator, once measured
        self.context_tried = False
        self.total = None          # the device's total as the framework sees it
        self.announced = False     # context and total sent (ready or memory)
        self.trial = None          # (channel, trial_id) of the running trial
        self.last_sent, self.last_time = None, None
        self.thread = None

    # -- the cap -------------------------------------------------------------

    def apply(self, cap):
        """Makes ``cap`` (bytes or None) the limit of what follows, in every framework that is
        imported (none is imported here)."""
        with self.lock:
            self.cap = cap
            if "torch" in sys.modules:
                self._apply_torch(sys.modules["torch"])
            if "tensorflow" in sys.modules:
                self._apply_tensorflow(sys.modules["tensorflow"])

    def _apply_torch(self, torch):
        try:
            if self.cap is None and self.torch_set is None:
                return  # never limited: leave CUDA uninitialised
            if not torch.cuda.is_available():
                return
            if self.context_tried:
                self._set_torch_fraction(torch, None)
            else:
                self.context_tried = True
                with _Nvml() as nvml:  # one NVML session: its readings close together
                    self._set_torch_fraction(torch, nvml)
        except Exception as exc:
            if not self.torch_warned:  # once: the same failure would repeat at every trial
                self.torch_warned = True
                _warn("could not set PyTorch's memory fraction for a cap of %s bytes (the "
                      "trials run uncapped): %s" % (self.cap, exc))

    def _set_torch_fraction(self, torch, nvml):
        """Sets the cap as PyTorch's fraction of the device; with ``nvml``, measures the
        context too where this call is what creates it."""
        # NVML's reading before anything here initialises CUDA (whatever creates the context:
        # the initialisation or, as with PyTorch's lazy one, the fraction's call).
        before = None
        if nvml is not None:
            if not torch.cuda.is_initialized():
                before = (0, nvml.device_used(0))  # CUDA's device until the script picks one
            elif torch.cuda.memory_reserved() == 0:
                before = (torch.cuda.current_device(),
                          nvml.device_used(torch.cuda.current_device()))
        device = torch.cuda.current_device()
        total = int(torch.cuda.get_device_properties(device).total_memory)
        fraction = cap_fraction(self.cap, total)
        if self.torch_set == (device, fraction):
            return
        torch.cuda.set_per_process_memory_fraction(fraction, device)
        self.torch_set, self.total = (device, fraction), total
        if nvml is not None:
            self._measure_context(torch, nvml, device,
                                  before[1] if before is not None and before[0] == device
                                  else None)

    def _measure_context(self, torch, nvml, device, before):
        """The context: what NVML counts for this process, less what the allocator reserves
        (whenever the context was created). Where NVML cannot name this process, what it counts
        more on the whole device since ``before`` (None: the context existed before, no figure),
        less the same: racy, as other processes allocate and free meanwhile (on a card that
        trials were filling, it came out two and three times too large, and every cap as much
        too small), so only a plausible figure is kept."""
        reserved = int(torch.cuda.memory_reserved(device))
        own = nvml.process_used(device)
        if own is not None:
            context = own - reserved
        else:
            after = nvml.device_used(device)
            if after is None or before is None:
                return
            context = after - before - reserved
        if _MIB <= context < (self.total or 0) // 2:
            self.context = context

    def _apply_tensorflow(self, tf):
        if self.tf_done or self.cap is None:
            return
        self.tf_done = True
        try:
            gpus = tf.config.list_physical_devices("GPU")
            if gpus:
                tf.config.set_logical_device_configuration(
                    gpus[0], [tf.config.LogicalDeviceConfiguration(
                        memory_limit=max(self.cap // _MIB, 1))])
                self.tf_cap = self.cap
        except Exception as exc:  # TensorFlow had initialised the GPU already
            _warn("could not give TensorFlow a memory_limit of %d MiB: %s"
                  % (self.cap // _MIB, exc))

    def hook_imports(self):
        """Applies the cap right after ``torch`` or ``tensorflow`` is imported, for a script
        that imports them after ``sweepd_worker``."""
        wanted = [n for n in ("torch", "tensorflow") if n not in sys.modules]
        if wanted:
            sys.meta_path.insert(0, _AfterImport(wanted, lambda _name: self.apply(self.cap)))

    # -- the figures ---------------------------------------------------------

    def worker_figures(self):
        """{"framework", "context", "total"} once the context was measured, else None."""
        with self.lock:
            if self.context is None:
                return None
            return {"framework": "torch", "context": self.context, "total": self.total}

    def ready_memory(self):
        """The ``memory`` object of ``ready``, or None; once sent, later messages omit it."""
        with self.lock:
            figures = self.worker_figures()
            if figures is not None:
                self.announced = True
            return figures

    def start_trial(self, channel, trial_id, cap):
        """The trial's cap applied, its peaks reset, and its figures sent while it runs."""
        self.apply(cap)
        reset_framework_peaks()
        with self.lock:
            self.trial = (channel, trial_id) if channel is not None else None
            self.last_sent, self.last_time = None, None
            if self.trial is not None and self.thread is None:
                self.thread = threading.Thread(target=self._watch, name="sweepd-memory",
                                               daemon=True)
                self.thread.start()

    def end_trial(self):
        """No ``memory`` message for the trial after this returns."""
        with self.lock:
            self.trial = None

    def _watch(self):
        while True:
            time.sleep(_POLL_S)
            try:
                self._tick()
            except Exception as exc:
                _warn("memory figures not sent: %s" % (exc,))

    def _tick(self):
        trial, torch = self.trial, _cuda_torch()
        if torch is None or trial is None:
            return
        figures = {"reserved": int(torch.cuda.memory_reserved()),
                   "peak_reserved": int(torch.cuda.max_memory_reserved())}
        with self.lock:  # held while sending: end_trial() waits for a send under way
            if self.trial is not trial:
                return
            now = time.monotonic()
            since = None if self.last_time is None else now - self.last_time
            if not memory_due(self.last_sent, figures, since):
                return
            channel, trial_id = self.trial
            msg = {"type": "memory", "trial_id": trial_id}
            msg.update(figures)
            if self.context is not None:
                msg["context"] = self.context
                if not self.announced:
                    msg["memory"] = self.worker_figures()
                    self.announced = True
            channel.send(msg)
            self.last_sent, self.last_time = figures, now

    def enforced_cap(self):
        """The cap a framework holds the running trial to: PyTorch's fraction as last set for
        it, or the memory_limit TensorFlow took; None where the cap was only told (a torch that
        cannot take a fraction, JAX, no framework): an out-of-memory error there is the
        device's, not the trial's cap."""
        with self.lock:
            if self.cap is None:
                return None
            if self.torch_set is not None and self.total:
                if self.torch_set[1] == cap_fraction(self.cap, self.total):
                    return self.cap
            return self.tf_cap

    def error_figures(self, exc, memory):
        """``memory`` (the error message's, or None) with the cap a framework held the trial
        to and, from a framework's out-of-memory text, the allocation that failed."""
        cap = self.enforced_cap()
        requested = requested_bytes(str(exc)) if is_framework_oom(exc) else None
        if cap is None and requested is None:
            return memory
        memory = dict(memory or {})
        if cap is not None:
            memory["cap"] = cap
        if requested is not None:
            memory["requested"] = requested
        return memory


class _AfterImport(object):
    """A meta path finder that calls ``then(name)`` once a top-level module of ``names`` has
    been executed, and removes itself when all have been."""

    def __init__(self, names, then):
        self.names, self.then, self.busy = set(names), then, False

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.names or self.busy:
            return None
        import importlib.util

        self.busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return None
        run, finder = loader.exec_module, self

        def exec_module(module):
            try:
                del loader.exec_module  # the loader's own again, for a reload
            except AttributeError:
                pass
            run(module)
            finder.names.discard(fullname)
            if not finder.names and finder in sys.meta_path:
                sys.meta_path.remove(finder)
            try:
                finder.then(fullname)
            except Exception as exc:
                _warn("applying the memory cap after importing %s: %s" % (fullname, exc))

        try:
            loader.exec_module = exec_module
        except (AttributeError, TypeError):
            return None  # a loader that takes no attribute: torch will be capped at serve()
        return spec


MEMORY = _Memory()


def cap_from_env():
    """SWEEPD_MEMORY_CAP, or None (unset, or not a byte count: then with a warning)."""
    try:
        return read_cap(os.environ.get(ENV_CAP), ENV_CAP)
    except ValueError as exc:
        _warn("%s; running without a memory cap" % (exc,))
        return None


def cap_from_trial(msg):
    """The ``memory_cap`` of a trial message, or None (absent, null, or not a byte count:
    then with a warning)."""
    try:
        return read_cap(msg.get("memory_cap"), "memory_cap")
    except ValueError as exc:
        _warn("%s; running the trial without a memory cap" % (exc,))
        return None


def at_import():
    """What ``import sweepd_worker`` does: the spawn's cap, applied to the frameworks already
    imported and to those imported later."""
    cap = MEMORY.spawn_cap = cap_from_env()
    if cap is not None:
        MEMORY.apply(cap)
        MEMORY.hook_imports()
