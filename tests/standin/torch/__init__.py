"""A stand-in for PyTorch, for sweepd's tests and benchmarks: no GPU, no PyTorch.

The part of PyTorch's public API that a training script and sweepd's helper use to hold,
measure and limit CUDA memory, with the names, signatures, errors and texts of PyTorch's (2.x):
``torch.empty``/``torch.zeros`` on ``device="cuda"`` (a tensor's memory goes back to the
allocator's cache when the tensor is deleted), ``torch.OutOfMemoryError``, and ``torch.cuda``
(see its docstring). Device memory comes from the caching allocator of ``torch/_allocator.py``,
which takes its segments from the driver of ``torch/_driver.py``: lines in the fake NVML state
file (``FAKE_NVML_STATE``), so the fake NVML, the daemon and other processes see them.

Put ``tests/standin`` on ``sys.path`` (or ``PYTHONPATH``) to use it. ``FAKE_TORCH_CALLS=PATH``
appends one JSON line per call of the public API to PATH (``{"call": "torch.cuda.
set_per_process_memory_fraction", "args": [0.25, 0], "kwargs": {}}``), calls made inside the
stand-in left out: tests check what the code under test called. ``torch._standin`` has the
few hooks that are not PyTorch's (what NVML shows for the process, fragmentation), for the
simulated workers.

Every module of the package reaches the others by relative import, so that a copy loaded and
then removed from ``sys.modules`` (a simulated worker whose framework reports nothing) keeps
working.
"""

import builtins as _builtins

from ._calls import recorded
from ._driver import DRIVER as _DRIVER, CUDA_HINT as _CUDA_HINT

__version__ = "2.8.0+standin"


class OutOfMemoryError(RuntimeError):
    """CUDA out of memory (``torch.OutOfMemoryError``, also ``torch.cuda.OutOfMemoryError``)."""


class AcceleratorError(RuntimeError):
    """A CUDA error (``torch.AcceleratorError``), e.g. "CUDA error: out of memory"."""


for _cls in (OutOfMemoryError, AcceleratorError):
    _cls.__module__ = "torch"


class dtype(object):
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return "torch." + self.name


uint8, int8, int16 = dtype("uint8", 1), dtype("int8", 1), dtype("int16", 2)
int32, int64, bool = dtype("int32", 4), dtype("int64", 8), dtype("bool", 1)  # noqa: A001
float16, bfloat16 = dtype("float16", 2), dtype("bfloat16", 2)
float32, float64 = dtype("float32", 4), dtype("float64", 8)
half, float, double, int, long = float16, float32, float64, int32, int64  # noqa: A001


class device(object):
    """``torch.device("cuda")``, ``torch.device("cuda:1")``, ``torch.device("cpu")``."""

    def __init__(self, spec, index=None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index
        elif not isinstance(spec, str):
            spec, index = "cuda", spec
        kind, _, num = str(spec).partition(":")
        if kind not in ("cuda", "cpu"):
            raise RuntimeError("Expected one of cpu, cuda device type at start of device "
                               "string: %s" % (spec,))
        self.type = kind
        self.index = _builtins.int(num) if num else index

    def __repr__(self):
        return "device(type=%r%s)" % (self.type, "" if self.index is None
                                      else ", index=%d" % self.index)

    def __str__(self):
        return self.type + ("" if self.index is None else ":%d" % self.index)


class Tensor(object):
    """A tensor's storage and no data: its memory is held until the tensor is deleted."""

    def __init__(self, shape, dtype_, device_, block=None, allocator=None):
        self.shape, self.dtype, self.device = shape, dtype_, device_
        self._block, self._allocator = block, allocator

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def element_size(self):
        return self.dtype.itemsize

    @property
    def nbytes(self):
        return self.numel() * self.element_size()

    @property
    def is_cuda(self):
        return self.device.type == "cuda"

    def __del__(self):
        block, self._block = getattr(self, "_block", None), None
        if block is not None:
            self._allocator.free(block)

    def __repr__(self):
        return "tensor(<%s>, device=%r, dtype=%r)" % (
            "x".join(str(d) for d in self.shape), str(self.device), self.dtype)


def _shape(size):
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    for d in size:
        if not isinstance(d, _builtins.int) or d < 0:
            raise RuntimeError("Trying to create tensor with negative dimension %r" % (d,))
    return tuple(size)


@recorded("torch.empty")
def empty(*size, dtype=None, device=None, **_ignored):
    """A tensor of ``size`` elements of ``dtype`` (default float32) on ``device``."""
    dtype_ = dtype if dtype is not None else float32
    dev = globals()["device"]("cpu" if device is None else device)
    t = Tensor(_shape(size), dtype_, dev)
    if dev.type != "cuda":
        return t
    index = cuda._get_device_index(dev, optional=True)
    dev.index = index
    allocator = cuda._allocator(index)
    try:
        _DRIVER.ensure_context(index)
    except RuntimeError as exc:
        raise AcceleratorError(str(exc)) from None
    if t.nbytes:
        t._block, t._allocator = cuda._malloc(allocator, t.nbytes), allocator
    return t


@recorded("torch.zeros")
def zeros(*size, dtype=None, device=None, **kwargs):
    return empty(*size, dtype=dtype, device=device, **kwargs)


from . import cuda  # noqa: E402  (cuda needs the names above)
from . import _standin  # noqa: E402,F401

del _cls
