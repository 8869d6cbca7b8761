"""What a test's Spark jobs did, from the session's status store: whether any task failed.

Read from Spark's status store, which holds every job the session remembers, in any job group.  PySpark's
status tracker lists, for ``getJobIdsForGroup(None)``, only the jobs of no job group; a fit runs its jobs in
a group of its own (:class:`node.driver.SparkJob`), so tests that counted through it saw none of a fit's jobs
and counted 0 failed tasks whatever happened.
"""

from __future__ import annotations

__all__ = ["failed_tasks_since", "newest_job"]


def _every_job(spark) -> list:
    """The status store's data of every job it remembers, in any job group (``JobData`` Java objects)."""
    jobs = spark.sparkContext._jsc.sc().statusStore().jobsList(None)  # private[spark] in Scala, public to py4j
    found, iterator = [], jobs.iterator()
    while iterator.hasNext():
        found.append(iterator.next())
    return found


def newest_job(spark) -> int:
    """The newest job the session has started, in any job group (-1: none yet)."""
    return max((job.jobId() for job in _every_job(spark)), default=-1)


def failed_tasks_since(spark, job: int) -> int:
    """Failed task attempts of the jobs newer than ``job``, in any job group.  (Only those: Spark's status store
    forgets the oldest jobs past ``spark.ui.retainedJobs``, so a count over every remembered job may fall.)"""
    return sum(int(data.numFailedTasks()) for data in _every_job(spark) if data.jobId() > job)
