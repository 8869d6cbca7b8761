"""The task slots a fit's nodes are counted from, waited for where the session asked for more than have registered.

A fit has a node per task slot, counted once when it starts (:attr:`node.driver._fit.Fit.nodes`).  On a
cluster, executors register with the driver seconds after the session starts, and Spark's own wait for them
(``spark.scheduler.minRegisteredResourcesRatio``) is off for a standalone master: a fit started at once
counted what had registered -- on a virtual cluster of 5 one-core workers, a ``sync`` fit trained every phase
on 1 node of the 5 asked for, without a word.  So where the session says how many slots it asked for
(:func:`asked_task_slots`), :func:`wait_for_task_slots` waits for them, at most Spark's
``spark.scheduler.maxRegisteredResourcesWaitingTime`` (30 s) from the application's start, once per Spark
application, and warns when fewer came.  From the start, not from the fit's: where Spark waited itself (a
``minRegisteredResourcesRatio`` set), a fit started after that wait and waited it once more -- 6 minutes of
silence on a virtual cluster whose ``maxRegisteredResourcesWaitingTime`` was 180 s.
"""

from __future__ import annotations

import re
import time
import warnings
from typing import Any, Callable, Mapping

from ._session import dynamic_allocation, task_slots

__all__ = ["asked_task_slots", "registered_wait_s", "wait_for_task_slots"]

#: Spark's default of ``spark.scheduler.maxRegisteredResourcesWaitingTime``.
DEFAULT_WAIT_S = 30.0
_POLL_S = 0.25
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]$")
_TIME = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$")
_UNIT_S = {"ms": 1e-3, None: 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}  # a bare number: ms, as Spark
_waited: set[str] = set()  # the applications whose fits waited once


def asked_task_slots(master: str, conf: Mapping[str, str]) -> int | None:
    """The tasks at once the session asked its executors for: cores (a standalone master's ``spark.cores.max``,
    ``local-cluster[N, C, M]``'s N x C, YARN's or Kubernetes' ``spark.executor.instances`` x
    ``spark.executor.cores``) over ``spark.task.cpus``.  None where it does not say: a local master, dynamic
    allocation, tasks that take GPUs or other resources (their slots are not the cores'), or settings missing."""
    if dynamic_allocation(conf) or any(key.startswith("spark.task.resource.") for key in conf):
        return None
    try:
        task_cpus = max(1, int(conf.get("spark.task.cpus", "1")))
        matched = _LOCAL_CLUSTER.match(master.strip())
        if matched:
            cores = int(matched[1]) * int(matched[2])
        elif master.startswith("spark://"):
            cores = int(conf["spark.cores.max"])
        elif master.startswith(("yarn", "k8s://")):
            cores = int(conf["spark.executor.instances"]) * int(conf.get("spark.executor.cores", "1"))
        else:
            return None
    except (KeyError, ValueError):
        return None
    return cores // task_cpus or None


def registered_wait_s(conf: Mapping[str, str]) -> float:
    """``spark.scheduler.maxRegisteredResourcesWaitingTime`` in seconds (Spark's forms: ``30s``, ``500ms``,
    ``1min``; a bare number is milliseconds), else Spark's default, 30 s."""
    matched = _TIME.match(conf.get("spark.scheduler.maxRegisteredResourcesWaitingTime", ""))
    return float(matched[1]) * _UNIT_S[matched[2]] if matched else DEFAULT_WAIT_S


def wait_for_task_slots(sc: Any, conf: Mapping[str, str], *, clock: Callable[[], float] = time.time,
                        sleep: Callable[[float], None] = time.sleep) -> int | None:
    """``sc``'s task slots (:func:`~node.driver._session.task_slots`), after waiting for those the session asked
    for (:func:`asked_task_slots`) until :func:`registered_wait_s` after the application started
    (``sc.startTime``, milliseconds since the epoch on this host's clock, which ``clock`` reads in seconds), once
    per application; a ``UserWarning`` says when fewer came."""
    asked = asked_task_slots(str(sc.master), conf)
    slots = task_slots(sc)
    application = str(sc.applicationId)
    if asked is None or (slots or 0) >= asked or application in _waited:
        return slots
    _waited.add(application)
    wait_s = registered_wait_s(conf)
    deadline = sc.startTime / 1000.0 + wait_s
    while (slots or 0) < asked and clock() < deadline:
        sleep(_POLL_S)
        slots = task_slots(sc)
    if (slots or 0) < asked:
        warnings.warn(f"{slots or 0} of the {asked} task slots the session asked for ({sc.master}) had registered "
                      f"after {wait_s:g} s (spark.scheduler.maxRegisteredResourcesWaitingTime): the fit counts a "
                      "node per registered slot; ask for the cores the cluster has, or wait longer",
                      UserWarning, stacklevel=2)
    return slots
