"""What a test's Spark jobs did, from the session's status tracker: whether any task failed.

PySpark's status tracker lists, for ``getJobIdsForGroup(None)``, only the jobs of no job group; a fit runs
its jobs in a group of its own (:class:`node.driver.SparkJob`), so ``any_group=True`` reads Spark's
status store instead, which holds every job.
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


def newest_job(spark, *, any_group: bool = False) -> int:
    """The newest job the session has started (-1: none yet); of no job group unless ``any_group``."""
    if any_group:
        return max((job.jobId() for job in _every_job(spark)), default=-1)
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None) or [-1])


def failed_tasks_since(spark, job: int, *, any_group: bool = False) -> int:
    """Failed task attempts of the jobs newer than ``job``, of no job group unless ``any_group``.  (Only those:
    Spark's status tracker forgets the oldest jobs past ``spark.ui.retainedJobs``, so a count over every
    remembered job may fall.)"""
    if any_group:
        return sum(int(data.numFailedTasks()) for data in _every_job(spark) if data.jobId() > job)
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for job_id in tracker.getJobIdsForGroup(None) or []:
        info = tracker.getJobInfo(job_id) if job_id > job else None
        for stage_id in (info.stageIds if info else []):
            stage = tracker.getStageInfo(stage_id)
            failed += stage.numFailedTasks if stage else 0
    return failed
