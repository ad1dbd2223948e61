"""The stand-in's CUDA caching allocator, after PyTorch's ``c10/cuda/CUDACachingAllocator.cpp``.

What it keeps of the real one, in its default configuration (no ``max_split_size_mb``, no
``roundup_power2_divisions``, no ``garbage_collection_threshold``, and no expandable segments:
``PYTORCH_CUDA_ALLOC_CONF`` is not read):

* sizes rounded up to 512 bytes; requests of at most 1 MiB from the small pool, larger ones from
  the large pool;
* a request no cached block fits asks the driver for a new segment of 2 MiB (small requests),
  20 MiB (requests under 10 MiB) or the request rounded up to 2 MiB (``get_allocation_size``);
* the best-fitting cached block (smallest, then lowest address) is used first and split when
  the rest is worth keeping (small pool: at least 512 bytes left; large pool: more than 1 MiB);
  a freed block merges with free neighbours of its segment and stays reserved;
* ``set_per_process_memory_fraction``: ``allowed = int(fraction * total)``, checked where the
  allocator asks the driver for a segment: reserved + the new segment > allowed fails that
  request as a failed ``cudaMalloc`` does (pytorch#69688: a request served from the cache, and
  memory the process holds outside the allocator, are never checked);
* a failed segment frees every cached segment that is not split, then tries once more, then
  raises ``torch.OutOfMemoryError`` with PyTorch's text: "Tried to allocate" names the segment
  asked for, "N allowed; " appears whenever a fraction is set (a cap hit and a full device
  alike), and the processes NVML lists on the device are named as PyTorch names them.
"""

import os
import threading

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_LARGE_BUFFER = 20 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_ROUND_LARGE = 2 << 20

OOM_ADVICE = (
    " If reserved but unallocated memory is large try setting"
    " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid"
    " fragmentation.  See documentation for Memory Management "
    " (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)


def format_size(size):
    """c10's format_size: bytes up to 1 KiB, then KiB, MiB, GiB with two decimals."""
    if size <= 1024:
        return "%d bytes" % size
    if size <= 1048576:
        return "%.2f KiB" % (size / 1024.0)
    if size <= 1073741824:
        return "%.2f MiB" % (size / 1048576.0)
    return "%.2f GiB" % (size / 1073741824.0)


def round_size(size):
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    return K_MIN_BLOCK * ((size + K_MIN_BLOCK - 1) // K_MIN_BLOCK)


def allocation_size(size):
    """The segment the driver is asked for when no cached block fits ``size`` (rounded)."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return K_ROUND_LARGE * ((size + K_ROUND_LARGE - 1) // K_ROUND_LARGE)


class Block(object):
    __slots__ = ("size", "ptr", "small", "allocated", "prev", "next", "requested")

    def __init__(self, size, ptr, small):
        self.size, self.ptr, self.small = size, ptr, small
        self.allocated, self.prev, self.next, self.requested = False, None, None, 0

    def is_split(self):
        return self.prev is not None or self.next is not None


class Stat(object):
    __slots__ = ("current", "peak")

    def __init__(self):
        self.current = self.peak = 0

    def add(self, n):
        self.current += n
        self.peak = max(self.peak, self.current)

    def sub(self, n):
        self.current -= n


class OutOfMemory(Exception):
    """The allocator's OOM, with PyTorch's message; torch raises it as OutOfMemoryError."""


class DeviceAllocator(object):
    """One device's allocator (PyTorch's DeviceCachingAllocator)."""

    def __init__(self, device, driver):
        self.device, self.driver = device, driver
        self.lock = threading.RLock()
        self.pools = {True: [], False: []}  # small? -> cached free blocks
        self.next_ptr = 1 << 40              # segment addresses, never reused
        self.allocated, self.reserved, self.requested = Stat(), Stat(), Stat()
        self.segments = Stat()
        self.num_ooms = self.num_alloc_retries = 0
        self.set_fraction = False
        self.allowed = 0

    # -- the calls torch makes ---------------------------------------------

    def malloc(self, orig_size):
        with self.lock:
            size = round_size(orig_size)
            small = size <= K_SMALL_SIZE
            alloc_size = allocation_size(size)
            block = self._free_block(small, size)
            if block is None:
                block = self._alloc_block(alloc_size, small)
                if block is None:
                    self._release_cached_blocks()
                    self.num_alloc_retries += 1
                    block = self._alloc_block(alloc_size, small)
                if block is None:
                    self.num_ooms += 1
                    raise OutOfMemory(self._oom_message(alloc_size))
            if self._should_split(block, size):
                block = self._split(block, size)
            block.allocated, block.requested = True, orig_size
            self.allocated.add(block.size)
            self.requested.add(orig_size)
            return block

    def free(self, block):
        with self.lock:
            block.allocated = False
            self.allocated.sub(block.size)
            self.requested.sub(block.requested)
            pool = self.pools[block.small]
            for other in (block.prev, block.next):
                if other is not None and not other.allocated:
                    pool.remove(other)
                    if other is block.prev:
                        block.ptr, block.prev = other.ptr, other.prev
                        if block.prev is not None:
                            block.prev.next = block
                    else:
                        block.next = other.next
                        if block.next is not None:
                            block.next.prev = block
                    block.size += other.size
            pool.append(block)

    def empty_cache(self):
        with self.lock:
            self._release_cached_blocks()

    def set_memory_fraction(self, fraction):
        with self.lock:
            _, total = self.driver.mem_get_info(self.device)
            self.allowed = int(fraction * total)
            self.set_fraction = True

    def memory_fraction(self):
        with self.lock:
            if not self.set_fraction:
                return 1.0
            _, total = self.driver.mem_get_info(self.device)
            return self.allowed / float(total)

    def reset_peak_stats(self):
        with self.lock:
            for stat in (self.allocated, self.reserved, self.requested, self.segments):
                stat.peak = stat.current

    def stats(self):
        with self.lock:
            out = {"num_ooms": self.num_ooms, "num_alloc_retries": self.num_alloc_retries}
            for name, stat in (("allocated_bytes", self.allocated),
                               ("reserved_bytes", self.reserved),
                               ("requested_bytes", self.requested),
                               ("segment", self.segments)):
                out[name + ".all.current"] = stat.current
                out[name + ".all.peak"] = stat.peak
            return out

    # -- inside the allocator ----------------------------------------------

    def _free_block(self, small, size):
        """The best fit among the cached blocks: the smallest that holds ``size``."""
        fits = [b for b in self.pools[small] if b.size >= size]
        if not fits:
            return None
        block = min(fits, key=lambda b: (b.size, b.ptr))
        self.pools[small].remove(block)
        return block

    def _alloc_block(self, size, small):
        """A new segment from the driver, or None (a cap hit or a device without room)."""
        if self.set_fraction and self.reserved.current + size > self.allowed:
            return None
        if not self.driver.malloc(self.device, size):
            return None
        block = Block(size, self.next_ptr, small)
        self.next_ptr += size + K_ROUND_LARGE  # a gap: segments never look adjacent
        self.reserved.add(size)
        self.segments.add(1)
        return block

    def _should_split(self, block, size):
        remaining = block.size - size
        if block.small:
            return remaining >= K_MIN_BLOCK
        return remaining > K_SMALL_SIZE

    def _split(self, block, size):
        """``block`` cut in two: the first ``size`` bytes returned, the rest cached."""
        head = Block(size, block.ptr, block.small)
        head.prev, head.next = block.prev, block
        if head.prev is not None:
            head.prev.next = head
        block.prev = head
        block.ptr += size
        block.size -= size
        self.pools[block.small].append(block)
        return head

    def _release_cached_blocks(self):
        """Every cached segment no live block shares goes back to the driver."""
        for small in (True, False):
            for block in list(self.pools[small]):
                if not block.is_split():
                    self.pools[small].remove(block)
                    self.driver.cuda_free(self.device, block.size)
                    self.reserved.sub(block.size)
                    self.segments.sub(1)

    def _oom_message(self, alloc_size):
        free, total = self.driver.mem_get_info(self.device)
        allowed = format_size(self.allowed) + " allowed; " if self.set_fraction else ""
        procs = "".join(
            "%s has %s memory in use. " % (
                "Including non-PyTorch memory, this process" if pid == os.getpid()
                else "Process %d" % pid, format_size(used))
            for pid, used in self.driver.listed(self.device))
        return (
            "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of "
            "which %s is free. %s%sOf the allocated memory %s is allocated by PyTorch, and %s "
            "is reserved by PyTorch but unallocated.%s" % (
                format_size(alloc_size), self.device, format_size(total), format_size(free),
                procs, allowed, format_size(self.allocated.current),
                format_size(self.reserved.current - self.allocated.current), OOM_ADVICE))

    # -- not PyTorch: what torch._standin offers the simulations -------------

    def fragment(self, nbytes):
        """A segment of ``nbytes`` (rounded up to 2 MiB) that a 512-byte live block keeps
        reserved for good: the rest is cached, reusable by requests it fits, never released.
        The shape of fragmentation that mixed sizes leave in a long-lived process."""
        with self.lock:
            size = allocation_size(max(round_size(nbytes), K_MIN_LARGE_ALLOC))
            block = self._alloc_block(size, False)
            if block is None:
                self._release_cached_blocks()
                block = self._alloc_block(size, False)
            if block is None:
                raise OutOfMemory(self._oom_message(size))
            pin = Block(K_MIN_BLOCK, block.ptr, False)
            pin.next, block.prev = block, pin
            block.ptr += K_MIN_BLOCK
            block.size -= K_MIN_BLOCK
            pin.allocated = True
            self.allocated.add(K_MIN_BLOCK)
            self.pools[False].append(block)
            return pin
