"""Where a node computes: the GPU Spark assigned to its task, or the CPU.

Spark hands GPUs to tasks by its resource scheduling: an executor owns the addresses a discovery
script printed (on a standalone cluster, its worker's script), each task takes
``spark.task.resource.gpu.amount`` of them, and a task finds its own in
``TaskContext.get().resources()["gpu"].addresses``; tasks running at once on an executor hold
distinct addresses.  A node -- made by the first task of a fit in a Python worker -- takes the first
address of that task: with one GPU per task, one node per GPU.

Addresses are GPU indices as the discovery script printed them: ``nvidia-smi``'s, which count every
GPU of the host in PCI bus order.  A process sees the GPUs ``CUDA_VISIBLE_DEVICES`` lets it see,
numbered from 0 in that list's order: :func:`cuda_index` maps an address to that number, and
:func:`see_device` sets ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (unless it is set) before CUDA starts, so
that cupy counts the GPUs as nvidia-smi does.

What a node does with its model's ``device``:

* ``"cpu"``: the CPU, whatever Spark assigned;
* ``"auto"``: the assigned GPU when cupy sees it, else the CPU, saying why (no GPU assigned, no
  cupy, an address cupy does not see); a reduced ``precision`` then does not apply;
* ``"gpu"``: the assigned GPU, else a :attr:`~node._contract.NodeDevice.problem`, which the driver's
  probe (:func:`node.executor.probe_device_task`) turns into one clear error before any training.

A GPU is usable when this process can open it and has at least :data:`MIN_FREE_BYTES` free on it:
a GPU in exclusive-process mode that another process holds refuses the context, and a full one
cannot take a replica -- both are said (``"gpu"``: a problem; ``"auto"``: the CPU, with the reason),
never raised, and the free memory (not the total) is what the node reports.

Every CUDA call of a node is bound to its GPU, not left to the process's default (device 0):
cupy's current device is per thread, so the node's task thread takes it before each task
(:func:`use_device`) and any other thread doing CUDA work for the node enters :func:`bound_to`.
``CUDA_VISIBLE_DEVICES`` is not set: CUDA reads it once, when it starts in the process, and
Spark reuses a Python worker for tasks holding other addresses -- a variable set for the first
task would hide the GPU of every later one.  A reused worker whose node finds its task on another
address than the node's GPU replaces the node there (:func:`moved_from`): two nodes never share
one GPU while another idles.

:func:`see_device` never raises: what a node cannot use, it says.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import socket
from dataclasses import replace
from typing import Any, Iterator, Sequence

from pyspark import TaskContext

import rbm

from .._contract import NodeDevice
from .._errors import NodeDeviceError

__all__ = ["GPU_RESOURCE", "MIN_FREE_BYTES", "task_gpu_addresses", "cuda_index", "see_device", "device_failure",
           "use_device", "bound_to", "moved_from", "serving_device", "serving_spec", "release_gpu_memory", "build_replica",
           "gpu_refused", "replica_on", "warm_up_key", "warm_up_once"]

logger = logging.getLogger(__name__)

#: The name of the resource Spark schedules (``spark.task.resource.gpu.amount``).
GPU_RESOURCE = "gpu"

#: The least free memory a node needs on its GPU (a replica, its minibatches and cuDNN's workspaces):
#: below it the GPU counts as full.
MIN_FREE_BYTES = 256 << 20

_serving: dict[tuple[str, ...], NodeDevice] = {}  # task GPU addresses -> where a model serves with them
_warmed: set[str] = set()  # the models whose GPU kernels this process compiled (or loaded) already


def task_gpu_addresses() -> tuple[str, ...]:
    """The GPU addresses Spark assigned to the running task (empty outside a task, or when it assigned none)."""
    context = TaskContext.get()
    if context is None:
        return ()
    resource = context.resources().get(GPU_RESOURCE)
    return tuple(str(address) for address in resource.addresses) if resource is not None else ()


def cuda_index(address: str, visible: str | None) -> int:
    """cupy's index of the GPU Spark calls ``address``, in a process with ``CUDA_VISIBLE_DEVICES=visible``.

    Unset, every GPU is visible and the address is the index.  A list of indices makes the address
    its position there (``CUDA_VISIBLE_DEVICES=2,3``: address ``3`` is cupy's GPU 1).  A list of
    UUIDs or MIG names leaves the numbering to the discovery script: the address is the position.

    Raises
    ------
    ValueError
        The address is no index, or ``CUDA_VISIBLE_DEVICES`` hides it.
    """
    entries = [entry.strip() for entry in (visible or "").split(",") if entry.strip()]
    if visible is not None and address in entries:
        return entries.index(address)
    if not address.isdigit():
        raise ValueError(f"GPU address {address!r} is no GPU index (the discovery script should print indices)")
    if visible is not None and (not entries or all(entry.isdigit() for entry in entries)):
        raise ValueError(f"CUDA_VISIBLE_DEVICES={visible!r} hides GPU {address} from this process")
    return int(address)


def see_device(requested: str, node: str, addresses: Sequence[str] | None = None) -> NodeDevice:
    """Where a node of a model with ``device=requested`` computes in this task (never raises).

    ``addresses`` are the task's GPU addresses (default: the running task's).  ``problem`` is set
    when ``requested`` is ``"gpu"`` and the task has no usable GPU.
    """
    addresses = task_gpu_addresses() if addresses is None else tuple(str(address) for address in addresses)
    seen = NodeDevice(kind="cpu", host=socket.gethostname(), node=node, requested=requested,
                      spark_addresses=addresses, address=addresses[0] if addresses else None)
    if requested not in ("gpu", "auto"):
        return replace(seen, reason=f"device={requested!r}")
    if not addresses:
        return _on_cpu(seen, "Spark assigned no GPU to the task (spark.task.resource.gpu.amount is not set)")
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # cupy counts GPUs as nvidia-smi (and the script) do
    try:
        cupy = importlib.import_module("cupy")
        index = cuda_index(seen.address, os.environ.get("CUDA_VISIBLE_DEVICES"))
        count = cupy.cuda.runtime.getDeviceCount()
        if index >= count:
            raise ValueError(f"this process sees {count} GPU(s), none with index {index}")
        properties = cupy.cuda.runtime.getDeviceProperties(index)
        with cupy.cuda.Device(index):  # opens the context: an exclusive-process GPU held elsewhere refuses here
            free_bytes, total_bytes = (int(value) for value in cupy.cuda.runtime.memGetInfo())
    except ImportError:
        return _on_cpu(seen, f"Spark assigned GPU {seen.address}, but cupy is not installed "
                             "(pip install 'sparkdbn[gpu]')")
    except Exception as error:  # noqa: BLE001 - cupy's CUDARuntimeError (no driver, busy, exclusive): said, never raised
        return _on_cpu(seen, f"Spark assigned GPU {seen.address}, but it is not usable here: "
                             f"{type(error).__name__}: {error}")
    name = properties["name"]
    seen = replace(seen, index=index, name=name.decode() if isinstance(name, bytes) else str(name),
                   memory_bytes=total_bytes, free_bytes=free_bytes)
    if free_bytes < MIN_FREE_BYTES:
        return _on_cpu(seen, f"Spark assigned GPU {seen.address} ({seen.name}), but it is full: "
                             f"{free_bytes / 2**20:.0f} MiB free of {total_bytes / 2**20:.0f} MiB, a node needs "
                             f"{MIN_FREE_BYTES / 2**20:.0f} MiB")
    return replace(seen, kind="gpu", reason=f"Spark assigned GPU {seen.address} ({free_bytes / 2**30:.1f} GiB free "
                                            f"of {total_bytes / 2**30:.1f} GiB)")


def _on_cpu(seen: NodeDevice, why: str) -> NodeDevice:
    if seen.requested == "gpu":
        return replace(seen, reason=why, problem=f"device='gpu' but no usable GPU: {why}")
    return replace(seen, reason=f"device='auto' computes on the CPU: {why}")


def device_failure(device: NodeDevice) -> str:
    """One line for a node that cannot compute where its model asks: the node, its host and its GPU address."""
    address = f"GPU address {device.address}" if device.address is not None else "no GPU address"
    return f"node {device.node} on host {device.host} ({address}): {device.problem}"


def use_device(device: NodeDevice) -> None:
    """Make the node's GPU the current one of this thread (cupy allocates and launches there); nothing on the CPU."""
    if device.kind == "gpu":
        importlib.import_module("cupy").cuda.Device(device.index).use()


@contextlib.contextmanager
def bound_to(device: NodeDevice | None) -> Iterator[None]:
    """Within the block, this thread's CUDA work goes to the node's GPU (a thread's default is device 0)."""
    if device is None or device.kind != "gpu":
        yield
        return
    with importlib.import_module("cupy").cuda.Device(device.index):
        yield


def moved_from(device: NodeDevice | None, addresses: Sequence[str]) -> str | None:
    """Why a node on ``device`` must be replaced in a task holding GPU ``addresses``, or None when it may stay.

    A node stays on the GPU it started on; a task of its worker that holds other addresses means
    Spark counts that GPU as another task's now (the worker was reused after its executor's pool
    changed): the node moves to the task's GPU, else two nodes would share one while another idles.
    """
    if device is None or device.kind != "gpu" or not addresses or device.address in addresses:
        return None
    return (f"node {device.node} runs on GPU {device.address} but its task holds GPU {','.join(addresses)}: "
            "the node is replaced on the task's GPU")


def release_gpu_memory(device: NodeDevice | None = None) -> None:
    """Hand the memory cupy pools on ``device``'s GPU back to the driver (what a finished probe or a stopped node held).

    cupy pools memory per GPU and frees the current device's pool only: the release is bound to
    ``device`` (default: this thread's current GPU), whichever GPU the calling thread used last.
    """
    try:
        cupy = importlib.import_module("cupy")
    except ImportError:
        return
    with bound_to(device):
        cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()


def gpu_refused(device: NodeDevice, error: BaseException) -> NodeDevice:
    """``device`` once its GPU refused the model (out of memory, a precision it does not take ...):
    with ``"gpu"`` a :attr:`~node._contract.NodeDevice.problem`, with ``"auto"`` the CPU, saying why."""
    why = f"the model cannot be built on GPU {device.address}: {type(error).__name__}: {error}"
    if device.requested == "gpu":
        return replace(device, problem=why)
    return replace(device, kind="cpu", reason=f"device='auto' computes on the CPU: {why}")


def build_replica(spec: dict, feature_shape: tuple[int, ...], classes: Any, device: NodeDevice) -> Any:
    """The model of ``spec`` on ``device``, initialized for ``feature_shape`` and ``classes``.

    The spec's ``device`` becomes the node's decision (``"auto"`` landing on the CPU is ``"cpu"``
    there, with ``precision`` float32: the tensor-core settings apply on GPUs only).

    Raises
    ------
    ValueError
        The model refuses the spec or the input (the model's own words).
    """
    if "device" in spec:
        spec = {**spec, "device": device.kind}
        if device.kind == "cpu" and spec.get("precision", "float32") != "float32":
            logger.info("precision=%r applies on GPUs only: this node computes in float32", spec["precision"])
            spec["precision"] = "float32"
    if device.kind == "gpu":
        use_device(device)
        rbm.configure_kernel_cache()  # before anything compiles: the host's nodes share their kernels
    model = rbm.model_from_spec(spec)
    model.initialize(feature_shape if len(feature_shape) > 1 else int(feature_shape[0]), classes)
    return model


def replica_on(spec: dict, feature_shape: tuple[int, ...], classes: Any, device: NodeDevice) -> tuple[Any, NodeDevice]:
    """A node's replica on ``device``, its kernels warmed up there, and the device it ended on.

    A GPU that cannot hold it (out of memory in the build or the warm-up, a precision it does not
    take) leaves ``"auto"`` on the CPU, saying why, as the driver's probe does: the GPU may have
    filled since the probe, or the probe ran in another worker.

    Raises
    ------
    NodeDeviceError
        ``device="gpu"`` and the GPU cannot hold the replica.
    ValueError
        The model refuses the spec or the input (the model's own words).
    """
    try:
        model = build_replica(spec, feature_shape, classes, device)
        if device.kind == "gpu" and spec.get("kind") == "convnet":
            device = replace(device, convolutions=rbm.conv.convolution_backend())
        return model, warm_up_once(model, device)
    except Exception as error:  # noqa: BLE001 - cupy's OutOfMemoryError and CUDARuntimeError among them
        if device.kind != "gpu":
            raise
        refused = gpu_refused(device, error)
        if refused.problem:
            raise NodeDeviceError(device_failure(refused)) from error
    model = None  # what the build allocated on the GPU goes back to it before the CPU replica is built
    release_gpu_memory(device)
    logger.warning("node %s: %s", device.node, refused.reason)
    return build_replica(spec, feature_shape, classes, refused), refused


def serving_device() -> NodeDevice:
    """Where a model serves (predicts, evaluates) in the running task, made this thread's current device.

    The task's first GPU when Spark assigned it one and it is usable (:func:`see_device` with
    ``"auto"``: checked once per process and address), else the CPU -- whatever device the model
    was fitted on: a model fitted on GPUs serves on CPU executors, and on the GPU each task holds.
    """
    addresses = task_gpu_addresses()
    device = _serving.get(addresses)
    if device is None:
        device = _serving[addresses] = see_device("auto", f"{socket.gethostname()}-{os.getpid()}", addresses)
        logger.info("models serve on %s in tasks holding GPU(s) %s (%s)",
                    f"GPU {device.address}" if device.kind == "gpu" else "the CPU", ",".join(addresses) or "none",
                    device.reason)
    use_device(device)
    return device


def serving_spec(spec: dict, device: NodeDevice) -> dict:
    """``spec`` for a replica serving on ``device``: its ``device`` the task's, ``precision`` float32 on the CPU."""
    if "device" not in spec:
        return spec
    serving = {**spec, "device": device.kind}
    if device.kind == "cpu" and serving.get("precision", "float32") != "float32":
        serving["precision"] = "float32"  # the tensor-core settings apply on GPUs only
    return serving


def warm_up_key(model: Any, device: NodeDevice) -> str:
    """What a warm-up is done for: the model's spec and input shape, on one GPU of one process."""
    return json.dumps([model.to_spec(), getattr(model, "input_shape_", None) or model.n_features_in_, device.address,
                       device.index], sort_keys=True, default=str)


def warm_up_once(model: Any, device: NodeDevice) -> NodeDevice:
    """``device`` with the seconds :func:`rbm.warm_up` took: once per model, GPU and process, 0 after (and on the CPU).

    The warm-up trains on synthetic rows in the model's own minibatch size, so the cuDNN plans
    and kernels it builds are those the first real partition uses.
    """
    if device.kind != "gpu":
        return device
    key = warm_up_key(model, device)
    if key in _warmed:
        return device
    seconds = rbm.warm_up(model)
    _warmed.add(key)
    return replace(device, warm_up_s=float(seconds))
