"""Where a fit's nodes compute, seen from the driver -- which never builds a GPU model.

On a cluster the driver has no GPU and must not need one: it checks and sizes the model,
consolidates the phases and validates on a CPU copy (:func:`driver_spec`, :func:`driver_model`),
while each node builds its replica from the model's own spec where its task's GPU is
(:mod:`node.executor._device`).  The fit hands the result back in the caller's model where that
model can hold it on the driver (:func:`hand_back`).

A model asking for ``device="gpu"`` on a Spark that hands its tasks no GPU is refused before any
job, with what to set (:func:`check_gpu_conf`; :func:`gpu_spark_conf` is that configuration).  A
fit whose nodes may compute on GPUs first runs one short job of a task per node
(:func:`probe_nodes`): each task says where its node would compute and whether the replica builds
there, and a node that cannot -- ``device="gpu"`` without a usable GPU -- ends the fit with one line
naming the node, its host and GPU address (:class:`~node.NodeDeviceError`): no training time
spent, no task retried.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Mapping

import rbm

from .._contract import NodeConfig, NodeDevice, decode, encode
from .._errors import NodeDeviceError
from ..executor import GPU_RESOURCE, device_failure, probe_device_task
from ._progress import SparkJob

__all__ = ["TASK_GPU_AMOUNT", "DEVICES", "requested_device", "gpu_spark_conf", "check_gpu_conf", "task_gpus",
           "probe_nodes", "driver_spec", "driver_model", "hand_back"]

logger = logging.getLogger(__name__)

TASK_GPU_AMOUNT = f"spark.task.resource.{GPU_RESOURCE}.amount"
DEVICES = ("cpu", "gpu", "auto")

_HOW = ("start the session with spark.executor.resource.gpu.amount=<GPUs per executor>, "
        "spark.task.resource.gpu.amount=1 and a discovery script (sparkdbn train or sparkdbn-submit "
        "--gpus-per-executor N [--gpu-discovery-script PATH]; node.gpu_spark_conf(N) for "
        "get_spark_session(conf=...)), or use device='auto'")


def requested_device(spec: Mapping[str, Any]) -> str:
    """The model's ``device`` (``"cpu"`` for a model without one).

    Raises
    ------
    NodeDeviceError
        A device sparkdbn does not know.
    """
    device = spec.get("device", "cpu")
    if device not in DEVICES:
        raise NodeDeviceError(f"device must be one of {', '.join(DEVICES)}; the {spec.get('kind')} model asks for "
                              f"{device!r}")
    return str(device)


def gpu_spark_conf(gpus_per_executor: int, discovery_script: str | None = None) -> dict[str, str]:
    """Spark settings for one node per GPU: ``gpus_per_executor`` GPUs per executor, one per task.

    ``discovery_script`` (a path on every executor host) prints the executor's GPUs, e.g.
    ``scripts/sparkdbn-gpus``; it is named for the executors (YARN, Kubernetes) and for the
    workers of a ``local-cluster`` master (a standalone cluster's workers have their own
    ``spark.worker.resource.gpu.*``).  Settings of the session: give them before it starts.

    Raises
    ------
    ValueError
        ``gpus_per_executor`` below 1.
    """
    if int(gpus_per_executor) < 1:
        raise ValueError(f"gpus_per_executor must be >= 1, got {gpus_per_executor}")
    amount = str(int(gpus_per_executor))
    conf = {f"spark.executor.resource.{GPU_RESOURCE}.amount": amount, TASK_GPU_AMOUNT: "1",
            f"spark.worker.resource.{GPU_RESOURCE}.amount": amount}
    if discovery_script:
        for scope in ("executor", "worker"):
            conf[f"spark.{scope}.resource.{GPU_RESOURCE}.discoveryScript"] = str(discovery_script)
    return conf


def task_gpus(conf: Mapping[str, str]) -> float:
    """GPUs each task holds under ``conf`` (0: Spark assigns tasks none)."""
    text = conf.get(TASK_GPU_AMOUNT)
    try:
        return max(0.0, float(text)) if text is not None else 0.0
    except ValueError:
        return 0.0


def check_gpu_conf(master: str, conf: Mapping[str, str], spec: Mapping[str, Any]) -> None:
    """Refuse ``device="gpu"`` where Spark hands tasks no GPU, saying what to set; warn where nodes would share.

    Raises
    ------
    NodeDeviceError
        A ``local[N]`` master (it schedules no GPUs: Spark waits forever for them), or no
        ``spark.task.resource.gpu.amount``.
    """
    if requested_device(spec) != "gpu":
        return
    if master.startswith("local") and not master.startswith("local-cluster"):
        raise NodeDeviceError(f"device='gpu' needs Spark to hand a GPU to every task, and a {master} master hands "
                              "out none (asked to, Spark waits forever): run on a cluster manager whose executors "
                              f"have GPUs (a standalone master and workers on this machine will do) and {_HOW}")
    amount = task_gpus(conf)
    if amount <= 0:
        raise NodeDeviceError(f"device='gpu' but Spark assigns no GPU to tasks ({TASK_GPU_AMOUNT} is "
                              f"{conf.get(TASK_GPU_AMOUNT, 'not set')}): {_HOW}")
    if amount < 1:
        logger.warning("%s=%s: %d nodes share each GPU (one node per GPU: 1)", TASK_GPU_AMOUNT, conf[TASK_GPU_AMOUNT],
                       int(1 / amount))
    elif amount > 1:
        logger.warning("%s=%s: each task holds %g GPUs and its node uses one (one node per GPU: 1)", TASK_GPU_AMOUNT,
                       conf[TASK_GPU_AMOUNT], amount)


def probe_nodes(sc: Any, group: str, config: NodeConfig, nodes: int, gpus_per_task: float) -> list[NodeDevice]:
    """Where each of ``nodes`` tasks would compute (none asked when every node computes on its CPU).

    One Spark job in the fit's job ``group``, a task per node; each task reports and never raises.
    ``gpus_per_task`` is what Spark gives each task (:func:`task_gpus` of the session's conf):
    ``device="auto"`` asks no node where there is none.

    Raises
    ------
    NodeDeviceError
        A task's node cannot compute where the model asks: the first such, naming node, host
        and GPU address (and how many more).
    """
    requested = requested_device(config.spec)
    if requested == "cpu" or (requested == "auto" and gpus_per_task <= 0):
        if requested == "auto":
            logger.info("device='auto' and Spark assigns tasks no GPU (%s not set): the nodes compute on their CPUs",
                        TASK_GPU_AMOUNT)
        return []
    rdd = sc.parallelize(range(nodes), nodes).mapPartitionsWithIndex(
        functools.partial(probe_device_task, encode(config)))
    devices = [decode(item, NodeDevice) for item in SparkJob(sc, rdd, group, f"{config.run} device probe").wait()]
    for device in devices:
        logger.info("run %s: node %s on %s computes on %s (%s)", config.run, device.node, device.host,
                    f"GPU {device.address} ({device.name})" if device.kind == "gpu" else "its CPU", device.reason)
    failed = [device for device in devices if device.problem]
    if failed:
        more = f" (and {len(failed) - 1} more of the {len(devices)} probed)" if len(failed) > 1 else ""
        raise NodeDeviceError(device_failure(failed[0]) + more)
    return devices


def driver_spec(spec: dict) -> dict:
    """The spec of the driver's copy of the model: ``spec`` itself on the CPU, else with ``device="cpu"``
    (and ``precision="float32"``: the tensor-core settings apply on GPUs only)."""
    if requested_device(spec) == "cpu":
        return spec
    cpu = {**spec, "device": "cpu"}
    if cpu.get("precision", "float32") != "float32":
        cpu["precision"] = "float32"
    return cpu


def driver_model(model: Any, spec: dict) -> Any:
    """``model`` where it computes on the CPU; else a CPU copy of it -- with its weights when it has some."""
    cpu = driver_spec(spec)
    if cpu is spec:
        return model
    copy = rbm.model_from_spec(cpu)
    width = getattr(model, "n_features_in_", None)
    if width is not None:  # an initialized model (a warm start): the fit starts from its weights
        copy.initialize(getattr(model, "input_shape_", None) or width, getattr(model, "classes_", None))
        copy.set_parameters(model.parameters())
    return copy


def hand_back(model: Any, trained: Any) -> Any:
    """The fit's result: ``model`` holding ``trained``'s weights, or -- when ``model`` cannot hold them on
    this machine (``device="gpu"`` without a GPU here) -- ``trained``, the CPU copy, said in the log."""
    if trained is model:
        return model
    try:
        model.initialize(getattr(trained, "input_shape_", None) or trained.n_features_in_,
                         getattr(trained, "classes_", None))
        model.set_parameters(trained.parameters())
    except ValueError as error:
        logger.warning("the fit returns a CPU copy of the model (device='cpu'): the %s given cannot hold its weights "
                       "on the driver (%s)", type(model).__name__, error)
        return trained
    return model
