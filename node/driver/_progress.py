"""Driver-side progress: a phase's progress bar, each Spark job run in a helper thread while
the caller's thread reports finished partitions (Spark's status tracker, no SparkListener), and
the epoch summaries."""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any, Callable, Mapping

import numpy as np
from tqdm.auto import tqdm

import storage

from .._errors import TrainingError, short_error
from ..modes import scaling_warning
from ..watch import merges_by_node, merges_text

__all__ = ["EpochProgress", "partitions_done", "progress_postfix", "SparkJob", "summarize_epoch", "summary_line"]

logger = logging.getLogger(__name__)

POLL_S = 0.2  # how often the progress bar asks Spark's status tracker
SUBMIT_TIMEOUT_S = 10.0  # how long SparkJob.submitted waits for Spark to have the job
CLAIMS_POLL_S = 1.0  # how often it counts the partitions the nodes claimed (a store listing)
# tqdm's own rate would be partitions/s: the bar shows samples/s and the time left in its postfix instead.
BAR_FORMAT = "{l_bar}{bar}| {n_fmt}/{total_fmt} partitions [{elapsed}{postfix}]"


def partitions_done(done_tasks: int, tasks: int, partitions: int, claimed: int) -> int:
    """The job's partitions trained so far, from its finished tasks and the nodes' claims.

    A finished task trained its share (``partitions / tasks`` on average); a running task holds at
    most one claimed partition it has not finished, so ``claimed - running tasks`` were trained.
    """
    by_tasks = done_tasks * partitions // tasks
    return max(0, min(partitions, max(by_tasks, claimed - (tasks - done_tasks))))


class SparkJob:
    """A Spark job collected in a helper thread: it starts when made, its records come when waited for.

    The job has the Spark local properties of the thread that made it (``spark.scheduler.pool``, say),
    and its own job group.

    Several jobs of one group may run at once (``async`` queues each epoch's job behind the one
    running, :mod:`node.modes._async`).  A job counts its own finished tasks: those of the first of
    the group's jobs that Spark started after this one was made -- so a caller that starts another
    job while this one runs waits for :meth:`submitted` first.
    """

    def __init__(self, sc: Any, rdd: Any, group: str, description: str) -> None:
        self.description = description
        self.tasks = rdd.getNumPartitions()
        self._group = group
        self._tracker = sc.statusTracker()
        self._earlier = set(self._tracker.getJobIdsForGroup(group) or [])  # e.g. the group's finished epochs
        self._id: int | None = None  # Spark's id of this job, once found (_job_id)
        self._outcome: dict[str, Any] = {}
        self.started = time.perf_counter()
        self.seconds: float | None = None  # from made to ended, once it ended
        # The caller's Spark local properties (its FAIR scheduler pool, above all) go with the job: a thread of
        # its own starts with none, and two fits of one session in two pools shared the default pool.
        jvm_context = sc._jsc.sc() if getattr(sc, "_jsc", None) is not None else None  # none in a stand-in
        self._properties = None if jvm_context is None else jvm_context.getLocalProperties().clone()
        self._thread = threading.Thread(target=self._collect, args=(sc, rdd), name=f"sparkdbn-job-{description}",
                                        daemon=True)
        self._thread.start()

    def _collect(self, sc: Any, rdd: Any) -> None:
        if self._properties is not None:
            sc._jsc.sc().setLocalProperties(self._properties)
        sc.setJobGroup(self._group, self.description, interruptOnCancel=True)
        try:
            self._outcome["records"] = rdd.collect()
        except BaseException as error:  # handed to the waiting thread by wait()
            self._outcome["error"] = error
        finally:
            self.seconds = time.perf_counter() - self.started

    def _job_id(self) -> int | None:
        """This job's Spark id once Spark has it (asked until then: a py4j call per job of the group)."""
        if self._id is None:
            started = set(self._tracker.getJobIdsForGroup(self._group) or []) - self._earlier
            self._id = min(started) if started else None
        return self._id

    def submitted(self, timeout_s: float = SUBMIT_TIMEOUT_S) -> None:
        """Return once Spark has the job (or it ended, or ``timeout_s`` passed)."""
        deadline = time.monotonic() + timeout_s
        while self._thread.is_alive() and self._job_id() is None and time.monotonic() < deadline:
            self._thread.join(timeout=0.01)

    def wait(self, on_progress: Callable[[int], None] | None = None) -> list[Any]:
        """The job's records, reporting its finished tasks to ``on_progress`` while it runs
        (every :data:`POLL_S`; without it Spark's status tracker is not asked).

        Raises
        ------
        TrainingError
            The job failed (its cause chained).
        """
        while self._thread.is_alive():
            self._thread.join(timeout=POLL_S)
            if on_progress is not None:
                on_progress(self._completed_tasks())
        if "error" in self._outcome:
            error = self._outcome["error"]
            raise TrainingError(f"Spark job {self.description!r} failed: {short_error(error)}") from error
        return self._outcome["records"]

    def _completed_tasks(self) -> int:
        job_id = self._job_id()
        job = None if job_id is None else self._tracker.getJobInfo(job_id)
        if job is None or job.status not in ("RUNNING", "SUCCEEDED"):
            return 0
        stages = (self._tracker.getStageInfo(stage_id) for stage_id in job.stageIds)
        return max((stage.numCompletedTasks for stage in stages if stage is not None), default=0)


def summarize_epoch(run: str, phase: str, epoch: int, records: list[dict], wall_s: float, *,
                    batch_size: int | None = None, node_batch_size: int | None = None,
                    staged: bool = False) -> dict[str, Any]:
    """One epoch's summary from its partitions' records.

    ``batch_size`` is the model's minibatch, ``node_batch_size`` the nodes' where the scaling rule
    made it smaller (:func:`node.modes._scaling.node_batch_size`; None: the model's): the minibatch the
    small-partition warning counts steps of; ``staged``: the data is a staged dataset (the warning's advice
    names its shards, not ``partitions``).
    """
    samples = sum(r["samples"] for r in records)
    loss = sum(r["loss"] * r["samples"] for r in records) / samples if samples else float("nan")
    staleness = [r["staleness_s"] for r in records if r.get("staleness_s") is not None]
    node_s = sum(r["task_s"] for r in records)
    return {
        "run": run, "phase": phase, "epoch": epoch, "samples": samples, "loss": loss, "wall_s": wall_s,
        "samples_per_s": samples / wall_s if wall_s > 0 else float("nan"),
        "merges": sum(r["merged"] for r in records),
        "merges_by_node": merges_by_node(records),
        "staleness_s": float(np.mean(staleness)) if staleness else None,
        "merge_fraction": sum(r["merge_s"] for r in records) / node_s if node_s else 0.0,
        "publish_fraction": sum(r["publish_s"] for r in records) / node_s if node_s else 0.0,
        "nodes": sorted({r["node"] for r in records}),
        "versions": epoch_versions(records),
        "learning_rate_scale": float(np.mean([r.get("learning_rate_scale", 1.0) for r in records])) if records else 1.0,
        "nodes_merging": max((int(r.get("nodes_merging", 1)) for r in records), default=1),
        "node_batch_size": node_batch_size,
        "warning": small_partition_warning(records, node_batch_size or batch_size, staged=staged),
        "records": records,
    }


def epoch_versions(records: list[dict]) -> dict[str, int]:
    """``{node: version}``: the newest snapshot each node's reports of the epoch name (nodes whose mode names none absent)."""
    versions: dict[str, int] = {}
    for record in records:
        if int(record.get("version") or 0) > 0:
            versions[record["node"]] = max(versions.get(record["node"], 0), int(record["version"]))
    return versions


def small_partition_warning(records: list[dict], batch_size: int | None, *, staged: bool = False) -> str | None:
    """What to change when the nodes' shares of the epoch are too small to learn from, else None."""
    per_node: dict[str, int] = {}
    for record in records:
        per_node[record["node"]] = per_node.get(record["node"], 0) + int(record["samples"])
    return scaling_warning(per_node, len(records), batch_size, staged=staged)


def summary_line(summary: Mapping[str, Any], epochs: int, *, full_warning: bool = True) -> str:
    """One epoch's summary; its warning in full, or (``full_warning`` False: said already) in a few words."""
    warning = summary.get("warning")
    if warning and not full_warning:
        warning = "too few minibatch steps per node (said above)"
    staleness = "-" if summary["staleness_s"] is None else f"{summary['staleness_s']:.2f}s"
    by_node = summary.get("merges_by_node") or {}
    counted = any(counts["announced"] or counts["listed"] for counts in by_node.values())
    how = f" ({merges_text(by_node)})" if counted else ""  # sync and sharing exchange through the store: no count
    return (f"[{summary['run']}] {summary['phase']} epoch {summary['epoch'] + 1}/{epochs}: "
            f"loss {summary['loss']:.4f}, {summary['samples_per_s']:.0f} samples/s, "
            f"{_count(summary['merges'], 'merge')}{how}, "
            f"staleness {staleness}, {_count(len(summary['nodes']), 'node')}, "
            f"learning rate x{summary.get('learning_rate_scale', 1.0):.2f}"
            + (f" and minibatch {summary['node_batch_size']}" if summary.get("node_batch_size") else "")
            + f" for {_count(summary.get('nodes_merging', 1), 'node')} merging"
            + (", outer step {:.3g}/{:.3g}".format(*summary["outer_step"]) if summary.get("outer_step") else "")
            + "".join(f", {name} {value:.4f}" for name, value in (summary.get("validation") or {}).items())
            + (f"; WARNING: {warning}" if warning else ""))


def _count(number: int, noun: str) -> str:
    """``"1 node"``, ``"2 nodes"``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def progress_postfix(partitions_done: int, partitions_total: int, samples_done: float, elapsed_s: float) -> str:
    """The bar's figures after ``elapsed_s`` of a phase: samples per second and the time left.

    The time left assumes the partitions still to train take as long as those done did, so it
    includes what the driver does between epochs (validation, the run record).
    """
    if partitions_done <= 0 or elapsed_s <= 0:
        return "? samples/s, ? left"
    left_s = elapsed_s / partitions_done * max(0, partitions_total - partitions_done)
    return f"{samples_done / elapsed_s:,.0f} samples/s, {tqdm.format_interval(left_s)} left"


class EpochProgress:
    """The progress bar of one phase and the summary lines of its epochs.

    Parameters
    ----------
    enabled : bool
        Show the bar and the summary lines (they are always logged).
    sc : pyspark.SparkContext
    group : str
        The fit's Spark job group.
    total : int
        Partitions the phase will train.
    description : str
    samples_per_partition : float
        Mean rows of a partition, for the samples per second.
    """

    def __init__(self, *, enabled: bool, sc: Any, group: str, total: int, description: str,
                 samples_per_partition: float = 0.0) -> None:
        self.enabled = enabled
        self.sc = sc
        self.group = group
        self.description = description
        self.samples_per_partition = samples_per_partition
        # disable=None turns the bar off when stderr is not a terminal (logs, CI); the epoch
        # summary lines are still written.
        self.bar = tqdm(total=total, desc=description, unit="partition", disable=None if enabled else True,
                        file=sys.stderr, leave=False, mininterval=0.5, bar_format=BAR_FORMAT)
        self.started = time.perf_counter()

    def epoch(self, epoch: int, epochs: int) -> None:
        self.bar.set_description(f"{self.description} epoch {epoch + 1}/{epochs}")

    def run_job(self, rdd: Any, description: str, partitions: int,
                claimed: Callable[[], int] | None = None) -> list[Any]:
        """Collect ``rdd`` in the fit's job group, moving the bar as its partitions are trained (see :meth:`wait`)."""
        return self.wait(self.start(rdd, description), partitions, claimed)

    def start(self, rdd: Any, description: str) -> SparkJob:
        """Start collecting ``rdd`` in the fit's job group; :meth:`wait` for its records."""
        return SparkJob(self.sc, rdd, self.group, description)

    def wait(self, job: SparkJob, partitions: int, claimed: Callable[[], int] | None = None) -> list[Any]:
        """``job``'s records, moving the bar as its partitions are trained.

        ``partitions``: the training partitions the job trains (a task may train several).
        ``claimed``: how many of them the nodes have claimed so far (:mod:`node.modes._stealing`),
        asked at most every :data:`CLAIMS_POLL_S`; without it the bar moves by finished tasks.
        A bar that is off (``enabled=False``, or stderr not a terminal) asks neither Spark nor the store.
        """
        if self.bar.disable:
            return job.wait()
        base, tasks = self.bar.n, max(1, job.tasks)
        asked = {"at": 0.0, "claimed": 0}

        def moved(done_tasks: int) -> None:
            if claimed is not None and time.perf_counter() - asked["at"] >= CLAIMS_POLL_S:
                asked["at"] = time.perf_counter()
                try:
                    asked["claimed"] = claimed()
                except storage.StoreError as error:  # the bar waits for the next poll; the job goes on
                    logger.debug("progress: cannot count the claimed partitions: %s", error)
            self._advance(base + partitions_done(done_tasks, tasks, partitions, asked["claimed"]))

        records = job.wait(moved)
        self._advance(base + partitions)
        return records

    def report(self, line: str) -> None:
        logger.info("%s", line)
        if self.enabled:
            self.bar.write(line, file=sys.stderr)

    def close(self) -> None:
        self.bar.close()

    def _advance(self, done: int) -> None:
        if done > self.bar.n:  # update(0) would redraw the bar on every poll
            self.bar.set_postfix_str(progress_postfix(done, self.bar.total, done * self.samples_per_partition,
                                                      time.perf_counter() - self.started), refresh=False)
            self.bar.update(done - self.bar.n)
