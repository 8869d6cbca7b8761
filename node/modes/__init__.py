"""Training modes: how the nodes combine their progress (async, sync, sharing), and work stealing.

* :mod:`._registry` -- the modes by name (:func:`mode_named`, :data:`MODE_NAMES`, :func:`check_mode`);
* :mod:`._base` -- :class:`TrainingMode`, a driver half and an executor half;
* :mod:`._protocols` -- what the modes use of the driver (:class:`ModeDriver`) and of a node
  (:class:`ModeNode`), and the value a node reports a partition from (:class:`PartitionWork`);
* :mod:`._async`, :mod:`._sync`, :mod:`._sharing` -- the three modes; :mod:`._stealing` -- work stealing;
* :mod:`._scaling` -- how learning rates follow the number of nodes merging, and the schedules' clock.
"""

from ._base import TrainingMode
from ._protocols import ModeDriver, ModeNode, ModeSettings, NodePartitions, PartitionWork, StartedJob, Trained
from ._registry import MODE_NAMES, check_mode, mode_named
from ._scaling import (SCALE_RULES, NodeScaling, default_warmup_partitions, max_learning_rate_factor, outer_gain,
                       rates_cap, scaling_warning, schedule_epoch, schedule_place)
from ._sharing import remove_updates
from ._stealing import claimed_partitions, stop_epoch, trained_by_lost_attempts, untrained_partitions_error

__all__ = ["TrainingMode", "ModeDriver", "ModeNode", "ModeSettings", "NodePartitions", "PartitionWork", "StartedJob",
           "Trained", "MODE_NAMES", "check_mode", "mode_named", "SCALE_RULES", "NodeScaling",
           "default_warmup_partitions", "max_learning_rate_factor", "outer_gain", "rates_cap", "scaling_warning",
           "schedule_epoch", "schedule_place", "claimed_partitions", "stop_epoch", "trained_by_lost_attempts",
           "untrained_partitions_error", "remove_updates"]
