"""Training modes: how nodes combine their progress, chosen by name (like Deeplearning4j's TrainingMaster).

A mode has two halves that live together in one file, so a mode's whole behaviour reads in one
place: the driver half runs a phase's epochs as Spark jobs of one task per node
(:meth:`TrainingMode.run_epochs`, :func:`node._mode.one_task_per_node`), the executor half trains
a node's share of a job (:meth:`TrainingMode.train_task`).  Tasks name their mode, and the
executor looks it up here.

* ``"async"`` (:mod:`node._mode_async`): merge fresh peer snapshots, train, publish, per partition.
* ``"sync"`` (:mod:`node._mode_sync`): train ``averaging_frequency`` partitions, average every
  node's parameters behind a barrier, continue from the average (parameter averaging).
* ``"sharing"`` (:mod:`node._mode_sharing`): publish the accumulated change as sparse
  threshold-quantized updates, keep the residual, apply every peer update once (Strom 2015).
"""

from __future__ import annotations

from ._mode import TrainingMode
from ._mode_async import AsyncMode
from ._mode_sharing import SharingMode
from ._mode_sync import SyncMode

__all__ = ["MODE_NAMES", "TrainingMode", "mode_named"]

_MODES: dict[str, TrainingMode] = {mode.name: mode for mode in (AsyncMode(), SyncMode(), SharingMode())}

#: Every mode's name, in the order the README presents them.
MODE_NAMES = tuple(_MODES)


def mode_named(name: str) -> TrainingMode:
    """The mode called ``name``."""
    if name not in _MODES:
        raise ValueError(f"unknown training mode {name!r}; known modes: {', '.join(MODE_NAMES)}")
    return _MODES[name]
