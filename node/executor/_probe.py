"""The device probe of a fit, run in a short-lived child process of the task's Python worker.

Opening a GPU leaves a CUDA context (hundreds of MB) and cupy's pooled memory in the process
that opened it, until that process ends.  Spark reuses Python workers, and the worker that ran
the probe may never host a node -- or host one on another GPU.  So the probe task
(:func:`node.executor.probe_device_task`) hands the question to a child process
(:func:`probe_in_child`): the child sees the task's GPU, builds the replica there, answers, and
ends, taking its context and memory with it.

The child reads the encoded :class:`~node._contract.NodeConfig` on its standard input and writes
one encoded :class:`~node._contract.NodeDevice` on its standard output (the contract's msgpack,
never a pickle); the task's GPU addresses and node name travel as arguments.  Whatever goes wrong
in the child -- an out-of-memory error, a crash, a timeout -- becomes the device's ``problem``
(``device="gpu"``) or a reason to compute on the CPU (``"auto"``), never an exception: Spark
would retry the task, and the same GPU refuses the same way.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import subprocess
import sys
from typing import Sequence

import numpy as np

from .._contract import ContractError, NodeConfig, NodeDevice, decode, encode

__all__ = ["probe_in_child", "probe_here", "PROBE_TIMEOUT_S"]

logger = logging.getLogger(__name__)

#: How long the child may take: a cold import of cupy and the first kernels' compilation included.
PROBE_TIMEOUT_S = 300.0


def probe_here(config: NodeConfig, node: str, addresses: Sequence[str]) -> NodeDevice:
    """Where a node of ``config`` would compute with GPU ``addresses``, its replica built there (never raises)."""
    from ._device import build_replica, gpu_refused, see_device
    from ._node import replica_spec

    device = see_device(str(config.spec.get("device", "cpu")), node, addresses)
    if device.kind != "gpu":
        return device
    try:  # what the node would refuse at its start: a precision its dtype does not take, no memory left ...
        build_replica(replica_spec(config), config.feature_shape,
                      None if config.classes is None else np.asarray(config.classes), device)
    except Exception as error:  # noqa: BLE001 - cupy's OutOfMemoryError and CUDARuntimeError among them
        return gpu_refused(device, error)
    return device


def probe_in_child(encoded_config: bytes, node: str, addresses: Sequence[str],
                   timeout_s: float = PROBE_TIMEOUT_S) -> NodeDevice:
    """:func:`probe_here` in a child process of this one (its CUDA context ends with it); never raises."""
    config = decode(encoded_config, NodeConfig)
    environment = dict(os.environ)
    # The child imports sparkdbn from where this worker did (a shipped zip on a cluster).
    environment["PYTHONPATH"] = os.pathsep.join(entry for entry in sys.path if entry)
    command = [sys.executable, "-c", _CHILD, node, json.dumps(list(addresses))]
    try:
        finished = subprocess.run(command, input=encoded_config, capture_output=True, timeout=timeout_s,
                                  env=environment, check=False)
        if finished.returncode != 0:
            tail = finished.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
            raise RuntimeError(f"the probe process ended with code {finished.returncode}: {tail[0]}")
        return decode(finished.stdout, NodeDevice)
    except (OSError, RuntimeError, ContractError, subprocess.TimeoutExpired) as error:
        requested = str(config.spec.get("device", "cpu"))
        device = NodeDevice(kind="cpu", host=socket.gethostname(), node=node, requested=requested,
                            spark_addresses=tuple(addresses), address=addresses[0] if addresses else None)
        why = f"{type(error).__name__}: {error}"
        if requested == "gpu":
            return dataclasses.replace(device, problem=f"the device probe failed: {why}")
        return dataclasses.replace(device, reason=f"device='auto' computes on the CPU: the device probe failed: {why}")


_CHILD = "import sys; from node.executor._probe import child_main; sys.exit(child_main())"


def child_main() -> int:
    """The child's body: the config on stdin, node name and addresses as arguments; the device on stdout."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    node, addresses = sys.argv[1], json.loads(sys.argv[2])
    config = decode(sys.stdin.buffer.read(), NodeConfig)
    sys.stdout.buffer.write(encode(probe_here(config, node, [str(address) for address in addresses])))
    sys.stdout.buffer.flush()
    return 0
