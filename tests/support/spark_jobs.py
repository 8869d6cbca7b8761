"""What a test's Spark jobs did, from the session's status tracker: whether any task failed."""

from __future__ import annotations

__all__ = ["failed_tasks_since", "newest_job"]


def newest_job(spark) -> int:
    """The newest job the session has started (-1: none yet)."""
    return max(spark.sparkContext.statusTracker().getJobIdsForGroup(None) or [-1])


def failed_tasks_since(spark, job: int) -> int:
    """Failed task attempts of the jobs newer than ``job``.  (Only those: Spark's status tracker forgets the
    oldest jobs past ``spark.ui.retainedJobs``, so a count over every remembered job may fall.)"""
    tracker = spark.sparkContext.statusTracker()
    failed = 0
    for job_id in tracker.getJobIdsForGroup(None) or []:
        info = tracker.getJobInfo(job_id) if job_id > job else None
        for stage_id in (info.stageIds if info else []):
            stage = tracker.getStageInfo(stage_id)
            failed += stage.numFailedTasks if stage else 0
    return failed
