"""Host <-> GPU transfers: one pinned, asynchronous upload of a dataset; snapshots in one copy;
a per-node cache that keeps partitions on the GPU across epochs within a memory budget.

A pageable ``cupy.asarray`` of 60k x 784 float32 took 0.125 s of a 0.23 s ``RBM.fit`` on an
H100: the driver stages pageable memory through a bounce buffer at a fraction of the link's
speed.  :func:`upload` copies through two pinned staging buffers instead, the host filling one
while the GPU reads the other, on the current stream (ordered after what is already queued there).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any, Hashable, Mapping

import numpy as np

__all__ = ["upload", "download_all", "DeviceDataCache", "PINNED_CHUNK_BYTES"]

logger = logging.getLogger(__name__)

PINNED_CHUNK_BYTES = 16 << 20  # per staging buffer: large enough to run the link at full speed


def upload(array: np.ndarray, xp: Any) -> Any:
    """A device copy of host ``array`` through pinned staging buffers (asynchronous, chunked)."""
    import cupy

    host = np.ascontiguousarray(array)
    out = cupy.empty(host.shape, dtype=host.dtype)
    flat_host, flat_out = host.reshape(-1).view(np.uint8), out.reshape(-1).view(cupy.uint8)
    size = flat_host.size
    if size == 0:
        return out
    chunk = min(PINNED_CHUNK_BYTES, size)
    # The copies run on the current stream, the one ``out`` was allocated on and the one its readers
    # use: memory the pool hands back after a kernel queued there freed it is only written once that
    # kernel is done (a separate stream would need to wait on this one to be as safe).
    stream = cupy.cuda.get_current_stream()
    buffers = [np.frombuffer(cupy.cuda.alloc_pinned_memory(chunk), dtype=np.uint8, count=chunk) for _ in range(2)]
    events: list[Any] = [None, None]
    for index, start in enumerate(range(0, size, chunk)):
        slot, stop = index % 2, min(start + chunk, size)
        if events[slot] is not None:
            events[slot].synchronize()  # the GPU has read this staging buffer: refill it
        staging = buffers[slot][: stop - start]
        staging[...] = flat_host[start:stop]
        flat_out[start:stop].set(staging, stream=stream)
        events[slot] = stream.record()
    stream.synchronize()
    return out


def download_all(arrays: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Host copies of named device arrays in one device-to-host transfer (a snapshot to publish).

    The arrays are packed into one device buffer per dtype (one kernel each), copied once and
    cut apart on the host; numpy arrays are copied as they are.
    """
    result: dict[str, np.ndarray] = {}
    groups: dict[Any, list[tuple[str, Any]]] = {}
    for name, value in arrays.items():
        if isinstance(value, np.ndarray):
            result[name] = value.copy()
        else:
            groups.setdefault(value.dtype, []).append((name, value))
    for members in groups.values():
        import cupy

        packed = cupy.concatenate([value.reshape(-1) for _, value in members]).get()
        offset = 0
        for name, value in members:
            result[name] = packed[offset: offset + value.size].reshape(value.shape).copy()
            offset += value.size
    return {name: result[name] for name in arrays}


class DeviceDataCache:
    """Partitions kept on the GPU across epochs, least recently used first out, within a budget.

    For the node side: ``cache.get((run, phase, partition), X, xp)`` returns the device copy of
    ``X``, uploading it (:func:`upload`) only the first time that key is seen.  The key must
    name the data's content (a staged dataset's partition does); the cache never compares bytes.

    The cache evicts *before* it uploads, so it never holds more than its budget, not even for
    the length of one upload.  A partition larger than the whole budget is uploaded for each
    pass and not kept: said once in the log, and counted (``oversize``) in :meth:`report`.

    Parameters
    ----------
    budget_bytes : int or None
        Device memory the cache may hold.  None: this process's share of the GPU's pool, agreed
        with the other processes on that GPU (:class:`~rbm._gpu._budget.SharedGpuBudget`) and
        read again at every call: a share that shrinks (another node joined the GPU) evicts at the
        next call, hit or miss.
    shared : SharedGpuBudget, optional
        The agreement to use when ``budget_bytes`` is None (default: the current GPU's, by its
        PCI bus id).
    """

    def __init__(self, budget_bytes: int | None = None, shared: Any = None) -> None:
        if budget_bytes is not None and int(budget_bytes) < 0:
            raise ValueError(f"budget_bytes must be >= 0 or None, got {budget_bytes}")
        self.budget_bytes = None if budget_bytes is None else int(budget_bytes)
        self._fixed = budget_bytes is not None
        self.shared = shared
        self._joined = False
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self.used_bytes = self.hits = self.misses = self.evictions = self.oversize = 0
        self.peak_bytes = 0  # the most the cache held at once, uploads included
        self._said_oversize = False

    def _budget(self, xp: Any) -> int:
        """The bytes this cache may hold now."""
        if self._fixed:
            return int(self.budget_bytes)
        if self.shared is None:
            from ._budget import SharedGpuBudget

            self.shared = SharedGpuBudget(str(xp.cuda.Device().pci_bus_id))
        if not self._joined:
            free_bytes, _ = xp.cuda.runtime.memGetInfo()
            share = self.shared.join(int(free_bytes))
            self._joined = True
            logger.info("device data cache: a share of %.2f GB of the GPU's pool of %.2f GB (%s)", share / 1e9,
                        self.shared.pool_bytes() / 1e9, self.shared.folder)
        self.budget_bytes = self.shared.share_bytes()
        return self.budget_bytes

    def get(self, key: Hashable, array: np.ndarray, xp: Any) -> Any:
        """The device copy of ``array`` cached under ``key`` (``array`` itself on numpy)."""
        if xp is np:
            return array
        budget = self._budget(xp)
        if key in self._entries:
            self.hits += 1
            self._entries.move_to_end(key)
            copy = self._entries[key]
            self._evict_to(budget)  # a share that shrank (another node joined the GPU) is kept on hits too
            return copy
        self.misses += 1
        size = int(array.nbytes)
        if size > budget:
            self.oversize += 1
            if not self._said_oversize:
                self._said_oversize = True
                logger.warning("device data cache: a partition of %.1f MB is larger than the cache's budget of %.1f MB: "
                               "it is uploaded again for every pass (more nodes per GPU than its memory holds? "
                               "fewer, or more partitions)", size / 1e6, budget / 1e6)
            self._evict_to(budget - size)  # what the cache holds and this copy still fit the budget where they can
            self.peak_bytes = max(self.peak_bytes, self.used_bytes + size)
            return upload(array, xp)
        self._evict_to(budget - size)
        self.peak_bytes = max(self.peak_bytes, self.used_bytes + size)
        copy = upload(array, xp)
        self._entries[key] = copy
        self.used_bytes += int(copy.nbytes)
        return copy

    def _evict_to(self, limit_bytes: int) -> None:
        """Drop the least recently used partitions until the cache holds at most ``limit_bytes``."""
        while self._entries and self.used_bytes > max(0, limit_bytes):
            _, evicted = self._entries.popitem(last=False)
            self.used_bytes -= int(evicted.nbytes)
            self.evictions += 1

    def clear(self) -> None:
        """Drop every partition and give the share of the GPU's pool back."""
        self._evict_to(0)
        if self.shared is not None and self._joined:
            self.shared.leave()
            self._joined = False

    def report(self) -> dict[str, int | None]:
        """What the cache holds and did: bytes used, budget, peak, entries, hits, misses, evictions, oversize."""
        return {"used_bytes": self.used_bytes, "budget_bytes": self.budget_bytes, "peak_bytes": self.peak_bytes,
                "entries": len(self._entries), "hits": self.hits, "misses": self.misses,
                "evictions": self.evictions, "oversize": self.oversize}
