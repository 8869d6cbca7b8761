"""A fit counts its nodes after the executors the session asked for registered (node.driver._slots).

A sync fit started on a standalone cluster just up counted the one executor registered then, and trained
every phase on 1 node of the 5 asked for, without a word.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import pytest

from node.driver import _slots
from node.driver._slots import asked_task_slots, registered_wait_s, wait_for_task_slots


@pytest.mark.parametrize("master, conf, asked", [
    ("spark://m:7077", {"spark.cores.max": "5"}, 5),
    ("spark://m:7077", {"spark.cores.max": "8", "spark.task.cpus": "2"}, 4),
    ("local-cluster[2, 3, 1024]", {}, 6),
    ("yarn", {"spark.executor.instances": "4", "spark.executor.cores": "2"}, 8),
    ("k8s://https://api:6443", {"spark.executor.instances": "3"}, 3),
    ("spark://m:7077", {}, None),  # takes what the cluster has: nothing to wait for
    ("local[2]", {}, None),
    ("spark://m:7077", {"spark.cores.max": "5", "spark.dynamicAllocation.enabled": "true"}, None),
    ("spark://m:7077", {"spark.cores.max": "4", "spark.task.resource.gpu.amount": "1"}, None),  # slots are GPUs
    ("spark://m:7077", {"spark.cores.max": "many"}, None),
])
def test_the_slots_a_session_asked_for_are_read_from_its_master_and_conf(master, conf, asked):
    assert asked_task_slots(master, conf) == asked


def test_the_wait_is_sparks_own_setting_in_its_own_units():
    assert registered_wait_s({}) == 30.0
    assert registered_wait_s({"spark.scheduler.maxRegisteredResourcesWaitingTime": "2min"}) == 120.0
    assert registered_wait_s({"spark.scheduler.maxRegisteredResourcesWaitingTime": "1500"}) == 1.5  # ms
    assert registered_wait_s({"spark.scheduler.maxRegisteredResourcesWaitingTime": "250ms"}) == 0.25


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def waited(monkeypatch, registered, conf, application="app-1", started_ago_s=0.0):
    """``(slots, warnings said, seconds waited)`` where ``registered(t)`` slots have registered at time t, the
    application having started ``started_ago_s`` before the fit."""
    clock = Clock()
    monkeypatch.setattr(_slots, "task_slots", lambda sc: registered(clock.now))
    sc = SimpleNamespace(master="spark://m:7077", applicationId=application, startTime=-started_ago_s * 1000)
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        slots = wait_for_task_slots(sc, conf, clock=clock, sleep=clock.sleep)
    return slots, [str(warning.message) for warning in told], clock.now


def test_a_fit_waits_for_the_executors_that_register_late_and_counts_them_all(monkeypatch):
    slots, said, seconds = waited(monkeypatch, lambda t: 1 if t < 4 else 5, {"spark.cores.max": "5"})
    assert (slots, said) == (5, []) and 4 <= seconds < 5


def test_fewer_slots_than_asked_after_sparks_wait_are_counted_and_said_once_per_application(monkeypatch):
    conf = {"spark.cores.max": "8", "spark.scheduler.maxRegisteredResourcesWaitingTime": "3s"}
    slots, said, seconds = waited(monkeypatch, lambda t: 5, conf, application="app-2")
    assert slots == 5 and 3 <= seconds < 3.5
    assert said == ["5 of the 8 task slots the session asked for (spark://m:7077) had registered after 3 s "
                    "(spark.scheduler.maxRegisteredResourcesWaitingTime): the fit counts a node per registered "
                    "slot; ask for the cores the cluster has, or wait longer"]
    assert waited(monkeypatch, lambda t: 5, conf, application="app-2") == (5, [], 0.0)  # its next fit: no wait


def test_the_wait_counts_from_the_applications_start_so_a_wait_spark_made_already_is_not_made_twice(monkeypatch):
    conf = {"spark.cores.max": "8", "spark.scheduler.maxRegisteredResourcesWaitingTime": "30s"}
    slots, said, seconds = waited(monkeypatch, lambda t: 5, conf, application="app-5", started_ago_s=26)
    assert slots == 5 and 4 <= seconds < 4.5 and "after 30 s" in said[0]
    assert waited(monkeypatch, lambda t: 5, conf, application="app-6", started_ago_s=31)[1:] == ([said[0]], 0.0)


def test_nothing_is_waited_for_where_all_registered_or_nothing_was_asked(monkeypatch):
    assert waited(monkeypatch, lambda t: 5, {"spark.cores.max": "5"}, application="app-3") == (5, [], 0.0)
    assert waited(monkeypatch, lambda t: 1, {}, application="app-4") == (1, [], 0.0)
