"""The stand-in's ``torch.cuda.memory``: the caching allocator's figures and limits.

Names, signatures, checks and messages as ``torch/cuda/memory.py``; the figures are those of
the allocator of ``torch/_allocator.py`` (``allocated_bytes``, ``reserved_bytes`` current and
peak). Before CUDA is initialised the figures are 0, as PyTorch's (an empty ``memory_stats``).
"""

from . import _allocator, _context, _get_device_index, _lazy_init, current_device
from . import is_initialized as _is_initialized
from . import _allocators
from .._calls import recorded
from .._driver import DRIVER


@recorded("torch.cuda.set_per_process_memory_fraction")
def set_per_process_memory_fraction(fraction, device=None):
    """The caching allocator may reserve at most ``int(fraction * total)`` bytes on ``device``;
    checked when it asks the driver for a new segment. Creates the device's context."""
    _lazy_init()
    if device is None:
        device = current_device()
    device = _get_device_index(device)
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError("Invalid fraction value: %s. Allowed range: 0~1" % (fraction,))
    _context(device)
    _allocator(device).set_memory_fraction(fraction)


@recorded("torch.cuda.get_per_process_memory_fraction")
def get_per_process_memory_fraction(device=None):
    _lazy_init()
    if device is None:
        device = current_device()
    device = _get_device_index(device)
    _context(device)
    return _allocator(device).memory_fraction()


@recorded("torch.cuda.empty_cache")
def empty_cache():
    """Every cached segment no tensor uses goes back to the driver."""
    if _is_initialized():
        for allocator in list(_allocators):
            allocator.empty_cache()


@recorded("torch.cuda.memory_stats")
def memory_stats(device=None):
    if not _is_initialized():
        return {}
    return _allocator(_get_device_index(device, optional=True)).stats()


@recorded("torch.cuda.memory_allocated")
def memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.current", 0)


@recorded("torch.cuda.max_memory_allocated")
def max_memory_allocated(device=None):
    return memory_stats(device=device).get("allocated_bytes.all.peak", 0)


@recorded("torch.cuda.memory_reserved")
def memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.current", 0)


@recorded("torch.cuda.max_memory_reserved")
def max_memory_reserved(device=None):
    return memory_stats(device=device).get("reserved_bytes.all.peak", 0)


@recorded("torch.cuda.reset_peak_memory_stats")
def reset_peak_memory_stats(device=None):
    _allocator(_get_device_index(device, optional=True)).reset_peak_stats()


@recorded("torch.cuda.mem_get_info")
def mem_get_info(device=None):
    """(free, total) bytes of the device, as cudaMemGetInfo: every process's use counted."""
    if device is None:
        device = current_device()
    device = _get_device_index(device)
    _allocator(device)
    _context(device)
    return DRIVER.mem_get_info(device)
