"""Host <-> GPU transfers: one pinned, asynchronous upload of a dataset; snapshots in one copy;
a per-node cache that keeps partitions on the GPU across epochs within a memory budget.

A pageable ``cupy.asarray`` of 60k x 784 float32 took 0.125 s of a 0.23 s ``RBM.fit`` on an
H100: the driver stages pageable memory through a bounce buffer at a fraction of the link's
speed.  :func:`upload` copies through two pinned staging buffers instead, the host filling one
while the GPU reads the other.
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
    stream = cupy.cuda.Stream(non_blocking=True)
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

    For the node side: ``cache.get((run, phase, partition), X)`` returns the device copy of
    ``X``, uploading it (:func:`upload`) only the first time that key is seen.  The key must
    name the data's content (a staged dataset's partition does); the cache never compares bytes.

    Parameters
    ----------
    budget_bytes : int or None
        Device memory the cache may hold; None: half of the GPU's free memory at the first call.
    """

    def __init__(self, budget_bytes: int | None = None) -> None:
        self.budget_bytes = budget_bytes
        self._entries: OrderedDict[Hashable, Any] = OrderedDict()
        self.used_bytes = self.hits = self.misses = self.evictions = 0

    def get(self, key: Hashable, array: np.ndarray, xp: Any) -> Any:
        """The device copy of ``array`` cached under ``key`` (``array`` itself on numpy)."""
        if xp is np:
            return array
        if key in self._entries:
            self.hits += 1
            self._entries.move_to_end(key)
            return self._entries[key]
        self.misses += 1
        if self.budget_bytes is None:
            free_bytes, _ = xp.cuda.runtime.memGetInfo()
            self.budget_bytes = int(free_bytes // 2)
            logger.info("device data cache: budget %.2f GB (half the free GPU memory)", self.budget_bytes / 1e9)
        copy = upload(array, xp)
        if copy.nbytes <= self.budget_bytes:
            while self._entries and self.used_bytes + copy.nbytes > self.budget_bytes:
                _, evicted = self._entries.popitem(last=False)
                self.used_bytes -= evicted.nbytes
                self.evictions += 1
            self._entries[key] = copy
            self.used_bytes += copy.nbytes
        return copy

    def report(self) -> dict[str, int | None]:
        """What the cache holds and did: bytes used, budget, entries, hits, misses, evictions."""
        return {"used_bytes": self.used_bytes, "budget_bytes": self.budget_bytes, "entries": len(self._entries),
                "hits": self.hits, "misses": self.misses, "evictions": self.evictions}
