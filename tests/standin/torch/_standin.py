"""Not PyTorch: hooks the simulated workers use to play a training process.

A test of sweepd's helper never needs these; a simulated training process does, to model
what a real one shows that PyTorch's API does not name: what NVML sees of the process,
fragmentation, memory taken outside the allocator (which no memory fraction checks).
"""

from . import cuda
from ._driver import DRIVER

_pinned = []  # the live blocks that keep fragmented segments reserved
_outside = []  # (device, bytes) taken outside the allocator


def usage(device=None):
    """What NVML shows for this process on ``device``: its context, the allocator's segments
    and what it took outside the allocator."""
    return DRIVER.held(_ordinal(device))


def context(device=None):
    """The bytes of the device's context (0 before it exists)."""
    return DRIVER.context.get(_ordinal(device), 0)


def ensure_context(device=None):
    """Creates the device's context, as the first CUDA call that needs one does."""
    cuda._lazy_init()
    cuda._context(_ordinal(device))


def reset_usage_peak(device=None):
    d = _ordinal(device)
    DRIVER.peak[d] = DRIVER.held(d)


def usage_peak(device=None):
    """The most ``usage()`` reached since ``reset_usage_peak()``."""
    d = _ordinal(device)
    return max(DRIVER.peak.get(d, 0), DRIVER.held(d))


def fragment(nbytes, device=None):
    """Leaves ``nbytes`` (rounded up to 2 MiB) reserved by the allocator for good, unused but
    reusable by requests that fit: a split segment that a live block keeps from the driver."""
    allocator = cuda._allocator(_ordinal(device))
    _pinned.append(cuda._malloc_with(allocator.fragment, nbytes))


def outside_allocator(nbytes, device=None):
    """Takes ``nbytes`` from the driver outside the caching allocator (a library's own
    workspace, NCCL's buffers): no memory fraction sees it. False when the device has no room."""
    d = _ordinal(device)
    cuda._allocator(d)
    if not DRIVER.malloc(d, nbytes):
        return False
    _outside.append((d, nbytes))
    return True


def release_outside():
    """Gives back what ``outside_allocator`` took."""
    while _outside:
        DRIVER.cuda_free(*_outside.pop())


def release():
    """What the driver does when the process exits: its lines in the state go to 0."""
    DRIVER.release()


def _ordinal(device):
    if device is None:
        return cuda.current_device()
    return cuda._get_device_index(device)
