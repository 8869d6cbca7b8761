"""The executor side: the node of a fit inside a Spark Python worker, its data and its address.

* :mod:`._tasks` -- what Spark runs there: the training task, the process's nodes, the device probe;
* :mod:`._node` -- :class:`ExecutorNode`, what a training mode's executor half trains on (its
  partition's pass in :mod:`._node_training`, its reports in :mod:`._node_reports`, its outer
  step in :mod:`._node_outer`);
* :mod:`._device` -- where a node computes: the GPU Spark assigned to its task, or the CPU;
* :mod:`._resident` -- the fit's partitions, written once to the store, kept in memory (:class:`NodeData`);
* :mod:`._network` -- the address a node binds and advertises; :mod:`._worker_heap` -- the garbage collector.
"""

from ._device import GPU_RESOURCE, device_failure, serving_device, serving_spec
from ._network import (
    check_host_settings,
    check_ports_for_nodes,
    driver_address,
    is_local_master,
    local_master_threads,
)
from ._node import ExecutorNode
from ._node_outer import outer_step_in
from ._resident import NodeData, block_sink, write_partition
from ._tasks import probe_device_task, release_run_task, run_training_task, start_worker_task
from ._worker_heap import settle_worker_heap

__all__ = ["GPU_RESOURCE", "device_failure", "serving_device", "serving_spec", "check_host_settings", "is_local_master",
           "check_ports_for_nodes", "driver_address", "local_master_threads",
           "ExecutorNode", "NodeData", "outer_step_in", "block_sink", "write_partition", "probe_device_task",
           "release_run_task", "run_training_task", "settle_worker_heap", "start_worker_task"]
