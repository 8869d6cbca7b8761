"""A stand-in for cupy on machines without a GPU: what sparkdbn asks of a GPU before it computes.

It answers device counts, properties, free memory and the current device/stream like cupy does,
for GPUs described by the ``FAKE_CUPY_GPUS`` environment variable (JSON, read at each call)::

    [{"name": "H100", "total": 85899345920, "free": 84825604096, "busy": false}, ...]

``FAKE_CUPY_CRASH=1`` ends the importing process at once (code 3), as a crashing driver would.
``busy`` makes opening the GPU fail as an exclusive-process GPU held by another process does.
Nothing computes: every device allocation raises :class:`cuda.memory.OutOfMemoryError`, as on a
GPU whose memory another process took.  Every call is appended to :data:`calls` (tests read it).
"""

import json
import os
import threading
import types

import numpy as np

if os.environ.get("FAKE_CUPY_CRASH") == "1":
    os._exit(3)

calls = []  # (what, detail) in call order
_local = threading.local()
uint8 = np.uint8


def _gpus():
    default = [{"name": "Fake GPU", "total": 80 << 30, "free": 70 << 30, "busy": False}]
    return json.loads(os.environ.get("FAKE_CUPY_GPUS", "null")) or default


class CUDARuntimeError(RuntimeError):
    pass


class OutOfMemoryError(MemoryError):
    pass


def _current():
    return getattr(_local, "device", 0)


class Device:
    def __init__(self, device=None):
        self.id = _current() if device is None else int(device)
        self.pci_bus_id = f"0000:{self.id + 1:02x}:00.0"

    def use(self):
        calls.append(("use", self.id))
        _local.device = self.id

    def __enter__(self):
        calls.append(("enter", self.id))
        self._previous = _current()
        _local.device = self.id
        return self

    def __exit__(self, *exc):
        _local.device = self._previous
        return False


class Stream:
    def __init__(self, non_blocking=False, name="new"):
        self.name = name

    def record(self):
        return types.SimpleNamespace(synchronize=lambda: None)

    def synchronize(self):
        calls.append(("synchronize", self.name))


_NULL_STREAM = Stream(name="current")


def get_current_stream():
    return _NULL_STREAM


def _memGetInfo():
    gpu = _gpus()[_current()]
    if gpu.get("busy"):
        raise CUDARuntimeError("cudaErrorDevicesUnavailable: CUDA-capable device(s) is/are busy or unavailable")
    return gpu["free"], gpu["total"]


def _getDeviceProperties(index):
    return {"name": _gpus()[index]["name"].encode(), "totalGlobalMem": _gpus()[index]["total"]}


class _Pool:
    """Records each release with the device it freed: cupy frees the current device's pool only."""

    def __init__(self, pinned=False):
        self.pinned = pinned

    def free_all_blocks(self):
        calls.append(("free_all_pinned_blocks", None) if self.pinned else ("free_all_blocks", _current()))


_pool, _pinned_pool = _Pool(), _Pool(pinned=True)


def get_default_memory_pool():
    return _pool


def get_default_pinned_memory_pool():
    return _pinned_pool


def _no_memory(*args, **kwargs):
    raise OutOfMemoryError("out of memory to allocate on the fake GPU")


empty = zeros = asarray = array = ones = _no_memory

cuda = types.SimpleNamespace(
    Device=Device, Stream=Stream, get_current_stream=get_current_stream,
    runtime=types.SimpleNamespace(getDeviceCount=lambda: len(_gpus()), getDeviceProperties=_getDeviceProperties,
                                  memGetInfo=_memGetInfo, CUDARuntimeError=CUDARuntimeError),
    memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError),
    alloc_pinned_memory=lambda nbytes: bytearray(nbytes),
)
