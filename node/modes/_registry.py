"""Training modes: how nodes combine their progress, chosen by name (like Deeplearning4j's TrainingMaster).

A mode has two halves that live together in one file, so a mode's whole behaviour reads in one
place: the driver half runs a phase's epochs as Spark jobs of one task per node
(:meth:`TrainingMode.run_epochs`, :func:`node.modes._base.one_task_per_node`), the executor half trains
a node's share of a job (:meth:`TrainingMode.train_task`).  Tasks name their mode, and the
executor looks it up here.

* ``"async"`` (:mod:`node.modes._async`): merge fresh peer snapshots, train, publish, per partition.
* ``"sync"`` (:mod:`node.modes._sync`): train ``averaging_frequency`` partitions, average every
  node's parameters behind a barrier, continue from the average (parameter averaging).
* ``"sharing"`` (:mod:`node.modes._sharing`): publish the accumulated change as sparse
  threshold-quantized updates, keep the residual, apply every peer update once (Strom 2015).
"""

from __future__ import annotations

from ._base import TrainingMode
from ._async import AsyncMode
from ._sharing import SharingMode
from ._sync import SyncMode

__all__ = ["MODE_NAMES", "TrainingMode", "mode_named"]

_MODES: dict[str, TrainingMode] = {mode.name: mode for mode in (AsyncMode(), SyncMode(), SharingMode())}

#: Every mode's name, in the order the README presents them.
MODE_NAMES = tuple(_MODES)


def mode_named(name: str) -> TrainingMode:
    """The mode called ``name``."""
    if name not in _MODES:
        raise ValueError(f"unknown training mode {name!r}; known modes: {', '.join(MODE_NAMES)}")
    return _MODES[name]
