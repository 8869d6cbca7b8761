"""``async`` queues each epoch's job behind the running one (node.modes._async, FitJobs.queue_job): the driver
half's order of starts and waits, on a fit's jobs whose Spark jobs are stand-ins (no Spark)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from node import TrainingSettings
from node._contract import AsyncOptions
from node.driver._fit_jobs import FitJobs
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
def fit() -> FitJobs:
    fit = FitJobs.__new__(FitJobs)  # its queue of jobs only: starting a job is stood in for
    fit._queued, fit._settings, fit.log = None, TrainingSettings(), []

    def start_job(phase, epochs, options):
        assert options == AsyncOptions() and len(epochs) == 1
        fit.log.append(("start", phase, epochs.start))
        return StandInJob(SimpleNamespace(phase=phase, epoch=epochs.start), fit.log)

    fit.start_job = start_job
    return fit


def test_async_starts_each_epochs_job_before_it_waits_for_the_one_before(fit):
    mode = AsyncMode()
    assert mode.run_epochs(fit, "rbm0", first=0, epochs=3) == [["report of rbm0 epoch 0"]]
    assert fit.log == [("start", "rbm0", 0), ("start", "rbm0", 1), ("reports", "rbm0", 0)]
    mode.run_epochs(fit, "rbm0", first=1, epochs=3)  # epoch 1's job is the one queued: not started again
    assert fit.log[3:] == [("start", "rbm0", 2), ("reports", "rbm0", 1)]
    mode.run_epochs(fit, "rbm0", first=2, epochs=3)  # the phase's last epoch: nothing is queued behind it
    assert fit.log[5:] == [("reports", "rbm0", 2)]
    assert fit._queued is None


def test_a_queued_job_of_another_epoch_is_stopped_not_used(fit):
    mode = AsyncMode()
    mode.run_epochs(fit, "rbm0", first=0, epochs=2)  # queues epoch 1 of rbm0 ...
    mode.run_epochs(fit, "rbm1", first=0, epochs=1)  # ... but the driver asks for another phase (not in a fit)
    assert fit.log[3:] == [("stop", "rbm0", 1), ("start", "rbm1", 0), ("reports", "rbm1", 0)]
