"""Training modes: how nodes combine their progress, chosen by name (like Deeplearning4j's TrainingMaster).

A mode has two halves that live together in one file, so a mode's whole behaviour reads in one
place: the driver half runs a phase's epochs as Spark jobs of one task per node
(:meth:`TrainingMode.run_epochs`, through a :class:`~node.modes.ModeDriver`), the executor half
trains a node's share of a job (:meth:`TrainingMode.train_task`, on a :class:`~node.modes.ModeNode`).
Tasks name their mode, and the executor looks it up here.

* ``"async"`` (:mod:`node.modes._async`): merge fresh peer snapshots, train, publish, per partition.
* ``"sync"`` (:mod:`node.modes._sync`): train ``averaging_frequency`` partitions, average every
  node's parameters behind a barrier, continue from the average (parameter averaging).
* ``"sharing"`` (:mod:`node.modes._sharing`): publish the accumulated change as sparse
  threshold-quantized updates, keep the residual, apply every peer update once (Strom 2015).
"""

from __future__ import annotations

from ._async import AsyncMode
from ._base import TrainingMode
from ._sharing import SharingMode
from ._sync import SyncMode

__all__ = ["MODE_NAMES", "TrainingMode", "check_mode", "mode_named"]

_MODES: dict[str, TrainingMode] = {mode.name: mode for mode in (AsyncMode(), SyncMode(), SharingMode())}

#: Every mode's name, in the order docs/training-modes.md presents them.
MODE_NAMES = tuple(_MODES)


def mode_named(name: str) -> TrainingMode:
    """The mode called ``name``."""
    if name not in _MODES:
        raise ValueError(f"unknown training mode {name!r}; known modes: {', '.join(MODE_NAMES)}")
    return _MODES[name]


def check_mode(name: str, *, early_stopping: bool = False, param: str = "mode",
               early_param: str = "early_stopping") -> None:
    """Raise ``ValueError`` unless ``name`` is a mode that can train as asked (``early_stopping``: between epochs).

    ``param`` and ``early_param`` are the names the caller's user gave the two settings (``trainingMode`` and
    ``earlyStoppingPatience`` in Spark ML), so the message names what they wrote.
    """
    if name not in _MODES:
        raise ValueError(f"{param} must be one of {', '.join(MODE_NAMES)}, got {name!r}")
    if early_stopping and not _MODES[name].epoch_per_job:
        usable = " or ".join(f"{param}={other!r}" for other, mode in _MODES.items() if mode.epoch_per_job)
        raise ValueError(f"{early_param} ends a phase between two epochs, and {param} {name!r} trains a phase "
                         f"in one Spark job (validated at its end only): use {usable} with {early_param}")
