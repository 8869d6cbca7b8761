"""Driver-side progress: an epoch's Spark job run in a helper thread while the caller's thread
reports finished partitions (Spark's status tracker, no SparkListener), and the epoch summaries."""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Callable, Mapping

import numpy as np

from ._errors import TrainingError, short_error

__all__ = ["run_job", "advance", "progress_bar", "report", "summarize_epoch", "summary_line"]

logger = logging.getLogger(__name__)

POLL_S = 0.2  # how often the progress bar asks Spark's status tracker


def run_job(sc: Any, rdd: Any, group: str, description: str, on_progress: Callable[[int], None]) -> list[dict]:
    """``rdd.collect()`` in a helper thread while the caller's thread reports finished tasks."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        sc.setJobGroup(group, description, interruptOnCancel=True)
        try:
            outcome["records"] = rdd.collect()
        except BaseException as error:  # handed to the caller's thread below
            outcome["error"] = error

    tracker = sc.statusTracker()
    earlier = set(tracker.getJobIdsForGroup(group) or [])  # the group's finished epochs
    thread = threading.Thread(target=target, name=f"sparkdbn-job-{description}", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(timeout=POLL_S)
        on_progress(_completed_tasks(tracker, group, earlier))
    if "error" in outcome:
        error = outcome["error"]
        raise TrainingError(f"Spark job {description!r} failed: {short_error(error)}") from error
    return outcome["records"]


def _completed_tasks(tracker: Any, group: str, earlier: set[int]) -> int:
    best = 0
    for job_id in set(tracker.getJobIdsForGroup(group) or []) - earlier:
        job = tracker.getJobInfo(job_id)
        if job is None or job.status not in ("RUNNING", "SUCCEEDED"):
            continue
        for stage_id in job.stageIds:
            stage = tracker.getStageInfo(stage_id)
            if stage is not None:
                best = max(best, stage.numCompletedTasks)
    return best


def summarize_epoch(run: str, phase: str, epoch: int, records: list[dict], wall_s: float) -> dict[str, Any]:
    samples = sum(r["samples"] for r in records)
    loss = sum(r["loss"] * r["samples"] for r in records) / samples if samples else float("nan")
    staleness = [r["staleness_s"] for r in records if r.get("staleness_s") is not None]
    node_s = sum(r["task_s"] for r in records)
    return {
        "run": run, "phase": phase, "epoch": epoch, "samples": samples, "loss": loss, "wall_s": wall_s,
        "samples_per_s": samples / wall_s if wall_s > 0 else float("nan"),
        "merges": sum(r["merged"] for r in records),
        "staleness_s": float(np.mean(staleness)) if staleness else None,
        "merge_fraction": sum(r["merge_s"] for r in records) / node_s if node_s else 0.0,
        "publish_fraction": sum(r["publish_s"] for r in records) / node_s if node_s else 0.0,
        "nodes": sorted({r["node"] for r in records}),
        "records": records,
    }


def summary_line(summary: Mapping[str, Any], epochs: int) -> str:
    staleness = "-" if summary["staleness_s"] is None else f"{summary['staleness_s']:.2f}s"
    return (f"[{summary['run']}] {summary['phase']} epoch {summary['epoch'] + 1}/{epochs}: "
            f"loss {summary['loss']:.4f}, {summary['samples_per_s']:.0f} samples/s, "
            f"{summary['merges']} merges, staleness {staleness}, {len(summary['nodes'])} nodes")


def advance(bar: Any, base: int, done: int) -> None:
    if base + done > bar.n:  # update(0) would redraw the bar on every poll
        bar.update(base + done - bar.n)


def report(progress: bool, bar: Any, line: str) -> None:
    logger.info("%s", line)
    if progress:
        bar.write(line, file=sys.stderr)


def progress_bar(enabled: bool, total: int, description: str) -> Any:
    from tqdm.auto import tqdm

    # disable=None turns the bar off when stderr is not a terminal (logs, CI); the epoch
    # summary lines are still written.
    return tqdm(total=total, desc=description, unit="partition", disable=None if enabled else True,
                file=sys.stderr, leave=False, mininterval=0.5)
