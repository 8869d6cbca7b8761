"""A training job of a fit: it starts when made, and its nodes' reports come when the driver asks.

:meth:`node.driver.FitJobs.start_job` makes one (a Spark job over the slots' numbers, collected
in a helper thread).  Asking for its reports moves the phase's progress bar as the nodes claim
its partitions.  ``async`` starts the next epoch's job while one runs (:mod:`node.modes._async`),
so a node that ends its share of an epoch starts the next at once; when the driver will not wait
for such a job (early stopping ended the phase), :meth:`TrainingJob.stop` has the nodes skip
what they have not started and waits for them.
"""

from __future__ import annotations

import functools
import logging

import storage

from .._contract import PartitionReport, TaskSpec, decode
from .._errors import InputDataError, StoreAccessError, TrainingError, short_error
from ..data import PreparedData, filled_partitions
from ..modes import claimed_partitions, stop_epoch
from ._progress import EpochProgress, SparkJob

__all__ = ["TrainingJob"]

logger = logging.getLogger(__name__)


class TrainingJob:
    """One started training job of ``task`` (see the module docstring).

    Parameters
    ----------
    progress : EpochProgress
        The phase's progress bar, which started ``job``.
    task : TaskSpec
    job : SparkJob
    prepared : PreparedData
        The fit's training data (its partitions, and its source for error messages).
    store : storage.Store
    fit_id : str
    """

    def __init__(self, progress: EpochProgress, task: TaskSpec, *, job: SparkJob, prepared: PreparedData,
                 store: storage.Store, fit_id: str) -> None:
        self.task, self.job = task, job
        self._progress, self._prepared, self._store, self._fit_id = progress, prepared, store, fit_id
        self.epochs = task.epochs

    def reports(self) -> list[PartitionReport]:
        """The nodes' reports, one per partition trained, once the job has ended.

        Raises
        ------
        StoreAccessError
            A node's store stayed unreachable past its ``retry_timeout_s``, or refused the run's files
            (reported once, not retried); the message names the store's URL or path and the operation.
        InputDataError
            A partition's data was refused on a node (reported once, not retried).
        TrainingError
            The Spark job failed, or a node could not start where the settings say (no free port of
            ``port_range``; reported once, not retried).
        """
        claimed = functools.partial(claimed_partitions, self._store, self.task.node.run, self._fit_id,
                                    self.task.phase, self.epochs)
        records = self._progress.wait(self.job, self._prepared.partitions * len(self.epochs), claimed)
        reports = [decode(item, PartitionReport) for item in records]
        outages = [report.store_error for report in reports if report.store_error]
        if outages:  # each task that met it reported it once, Spark ran none of them again
            raise StoreAccessError(outages[0])
        unstarted = [report.node_error for report in reports if report.node_error]
        if unstarted:  # as an outage: reported once, not run again on the host that cannot start a node
            raise TrainingError(unstarted[0])
        refused = [report.error for report in reports if report.error]
        if refused:
            more = f" (and {len(refused) - 1} more partition(s))" if len(refused) > 1 else ""
            raise InputDataError(f"{self._prepared.source}: {refused[0]}{more}")
        return reports

    def stop(self) -> None:
        """End a job the driver will not wait for: the nodes skip every partition they have not claimed,
        finish the ones they are training, and end; their reports are dropped (logged)."""
        partitions = filled_partitions(self._prepared.rows_per_partition)
        stopped = sum(stop_epoch(self._store, self.task.node.run, self._fit_id, self.task.phase, epoch, partitions)
                      for epoch in self.epochs)
        try:
            trained = len(self.job.wait())
        except TrainingError as error:
            logger.warning("run %s: the stopped job %r failed: %s", self.task.node.run, self.job.description,
                           short_error(error))
            return
        logger.info("run %s: stopped the job %r (%d partition(s) skipped, %d trained and not reported)",
                    self.task.node.run, self.job.description, stopped, trained)

