"""``async`` queues each epoch's job behind the running one (node.modes._async, Fit.queue_job): the driver
half's order of starts and waits, on a Fit whose Spark jobs are stand-ins (no Spark)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import node.modes._async
from node.driver._fit import Fit
from node.modes._async import AsyncMode


class StandInJob:
    """A started training job: notes when its reports are asked for, and whether it was stopped."""

    def __init__(self, task: SimpleNamespace, log: list) -> None:
        self.task, self.log = task, log
        self.job = SimpleNamespace(submitted=lambda: None)

    def reports(self) -> list:
        self.log.append(("reports", self.task.phase, self.task.epoch))
        return [f"report of {self.task.phase} epoch {self.task.epoch}"]

    def stop(self) -> None:
        self.log.append(("stop", self.task.phase, self.task.epoch))


@pytest.fixture
def fit(monkeypatch) -> Fit:
    monkeypatch.setattr(node.modes._async, "one_task_per_node", lambda fit: ([[0, 2], [1, 3]], "the slots' rdd"))
    fit = Fit.__new__(Fit)  # its queue of jobs only: starting a job is stood in for
    fit._queued, fit.log = None, []
    fit.task = lambda phase, epoch, mode, options: SimpleNamespace(phase=phase, epoch=epoch, options=options)

    def start_partitions(task, rdd):
        assert rdd == "the slots' rdd" and task.options == {"slots": [[0, 2], [1, 3]]}
        fit.log.append(("start", task.phase, task.epoch))
        return StandInJob(task, fit.log)

    fit.start_partitions = start_partitions
    return fit


def test_async_starts_each_epochs_job_before_it_waits_for_the_one_before(fit):
    mode = AsyncMode()
    assert mode.run_epochs(fit, "rbm0", 0, 3) == [["report of rbm0 epoch 0"]]
    assert fit.log == [("start", "rbm0", 0), ("start", "rbm0", 1), ("reports", "rbm0", 0)]
    mode.run_epochs(fit, "rbm0", 1, 3)  # epoch 1's job is the one queued: not started again
    assert fit.log[3:] == [("start", "rbm0", 2), ("reports", "rbm0", 1)]
    mode.run_epochs(fit, "rbm0", 2, 3)  # the phase's last epoch: nothing is queued behind it
    assert fit.log[5:] == [("reports", "rbm0", 2)]
    assert fit._queued is None


def test_a_queued_job_of_another_epoch_is_stopped_not_used(fit):
    mode = AsyncMode()
    mode.run_epochs(fit, "rbm0", 0, 2)  # queues epoch 1 of rbm0 ...
    mode.run_epochs(fit, "rbm1", 0, 1)  # ... but the driver asks for another phase (cannot happen in a fit)
    assert fit.log[3:] == [("stop", "rbm0", 1), ("start", "rbm1", 0), ("reports", "rbm1", 0)]
