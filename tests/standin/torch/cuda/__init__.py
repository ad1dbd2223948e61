"""The stand-in's ``torch.cuda``: devices, lazy initialisation and the memory API.

As PyTorch's: ``is_available()`` and ``device_count()`` initialise nothing; ``init()``,
``current_device()``, ``get_device_properties()`` and every call that names a device initialise
CUDA (``is_initialized()`` turns true) without creating a context; a context (device memory,
``FAKE_TORCH_CONTEXT``) is created by the first allocation, ``mem_get_info()``,
``synchronize()`` or ``set_per_process_memory_fraction()`` (which asks the driver for the
device's total), as with the real primary context. Devices are numbered as the process sees them
under ``CUDA_VISIBLE_DEVICES``. The memory functions are those of ``torch.cuda.memory``.
"""

import threading

from .. import AcceleratorError, OutOfMemoryError, device as _device_type
from .._allocator import DeviceAllocator, OutOfMemory
from .._calls import recorded
from .._driver import DRIVER, CudaError

_lock = threading.RLock()
_initialized = False
_current = 0
_allocators = []


def _lazy_init():
    global _initialized
    with _lock:
        if _initialized:
            return
        if DRIVER.state() is None:
            raise RuntimeError(
                "Found no NVIDIA driver on your system. Please check that you have an NVIDIA "
                "GPU and installed a driver from http://www.nvidia.com/Download/index.aspx")
        if not DRIVER.visible():
            raise RuntimeError("No CUDA GPUs are available")
        _allocators[:] = [DeviceAllocator(d, DRIVER) for d in range(len(DRIVER.visible()))]
        _initialized = True


def _get_device_index(device, optional=False):
    """torch.cuda._utils._get_device_index: a CUDA ordinal from an int, str or device."""
    if isinstance(device, str):
        device = _device_type(device)
    if isinstance(device, _device_type):
        if device.type != "cuda":
            raise ValueError("Expected a cuda device, but got: %s" % (device,))
        device = device.index
    if device is None:
        if not optional:
            raise ValueError("Expected a torch.device with a specified index or an integer, "
                             "but got:%s" % (device,))
        return current_device()
    if isinstance(device, bool) or not isinstance(device, int):
        raise ValueError("Expected a torch.device with a specified index or an integer, "
                         "but got:%r" % (device,))
    return device


def _allocator(device):
    _lazy_init()
    if not 0 <= device < len(_allocators):
        raise AcceleratorError("CUDA error: invalid device ordinal")
    return _allocators[device]


def _malloc(allocator, nbytes):
    return _malloc_with(allocator.malloc, nbytes)


def _malloc_with(call, nbytes):
    try:
        return call(nbytes)
    except OutOfMemory as exc:
        raise OutOfMemoryError(str(exc)) from None
    except CudaError as exc:
        raise AcceleratorError(str(exc)) from None


def _context(device):
    try:
        DRIVER.ensure_context(device)
    except CudaError as exc:
        raise AcceleratorError(str(exc)) from None


@recorded("torch.cuda.is_available")
def is_available():
    state = DRIVER.state()
    return state is not None and bool(DRIVER.visible())


@recorded("torch.cuda.is_initialized")
def is_initialized():
    return _initialized


@recorded("torch.cuda.init")
def init():
    _lazy_init()


@recorded("torch.cuda.device_count")
def device_count():
    return len(DRIVER.visible()) if DRIVER.state() is not None else 0


@recorded("torch.cuda.current_device")
def current_device():
    _lazy_init()
    return _current


@recorded("torch.cuda.set_device")
def set_device(device):
    global _current
    device = _get_device_index(device)
    if device >= 0:
        _allocator(device)
        _current = device


class _CudaDeviceProperties(object):
    def __init__(self, name, total_memory):
        self.name, self.total_memory = name, total_memory
        self.major, self.minor, self.multi_processor_count = 9, 0, 132

    def __repr__(self):
        return ("_CudaDeviceProperties(name='%s', major=%d, minor=%d, total_memory=%dMB, "
                "multi_processor_count=%d)" % (self.name, self.major, self.minor,
                                               self.total_memory >> 20,
                                               self.multi_processor_count))


@recorded("torch.cuda.get_device_properties")
def get_device_properties(device=None):
    _lazy_init()
    device = _get_device_index(device, optional=True)
    if not 0 <= device < len(_allocators):
        raise AssertionError("Invalid device id")
    return _CudaDeviceProperties(DRIVER.name(device), DRIVER.total(device))


@recorded("torch.cuda.get_device_name")
def get_device_name(device=None):
    return get_device_properties(device).name


@recorded("torch.cuda.synchronize")
def synchronize(device=None):
    _lazy_init()
    _context(_get_device_index(device, optional=True))


from .memory import (  # noqa: E402  (memory needs the helpers above)
    empty_cache, get_per_process_memory_fraction, max_memory_allocated, max_memory_reserved,
    mem_get_info, memory_allocated, memory_reserved, memory_stats, reset_peak_memory_stats,
    set_per_process_memory_fraction,
)

__all__ = [
    "OutOfMemoryError", "current_device", "device_count", "empty_cache",
    "get_device_name", "get_device_properties", "get_per_process_memory_fraction", "init",
    "is_available", "is_initialized", "max_memory_allocated", "max_memory_reserved",
    "mem_get_info", "memory_allocated", "memory_reserved", "memory_stats",
    "reset_peak_memory_stats", "set_device", "set_per_process_memory_fraction", "synchronize",
]
