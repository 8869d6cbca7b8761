"""How the labels spread, from the partitions' summaries: over the partitions (:func:`grouped_labels`) and over
the classes (:func:`id_like_labels`).

Data sorted by label and cut into partitions gives each node a few classes, and the merged model comes out
worse without an error (digits in 4 partitions by label range: 0.72 held out, against 0.96 shuffled).  A fit
shuffles what it can (numpy rows, DataFrames); an RDD, a DataFrame with ``shuffle=False`` or a staged
dataset's shards come as they are, and this is how the driver tells the user when they look grouped.

The partitions' test is one no shuffle fails by chance: a partition that holds no row of a class of which it
would hold at least :data:`MIN_EXPECTED_ROWS` had the rows been shuffled.  A shuffled partition of ``n`` rows
misses a class of share ``q`` with probability ``(1 - q) ** n``, below ``exp(-n q)`` = ``exp(-20)``, about 2e-9.

A label column of row ids (or any value unique to its row) is taken as classes by scikit-learn and by a fit
alike: a classifier of as many classes as rows, which learns nothing.  Where most classes have a single row,
:func:`id_like_labels` says so.
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["MIN_EXPECTED_ROWS", "grouped_labels", "id_like_labels"]

#: Rows of a class a shuffled partition would hold, at least, for its absence to say the rows are grouped.
MIN_EXPECTED_ROWS = 20


def grouped_labels(summaries: Iterable[dict[str, Any]]) -> str | None:
    """How the partitions' classes show the rows are grouped by label (``"partition 2 holds no row of class 3,
    of which it would hold about 36 were the rows shuffled (and 5 more partitions lack a class so)"``), else None.

    Parameters
    ----------
    summaries : iterable of dict
        Per-partition summaries (:func:`~node.data._partitions.summarize_block`): their ``rows`` and their
        labels' ``values`` and ``counts``.  Partitions without counted labels are left out.
    """
    counted = _counted(summaries)
    rows = sum(n for _, n, _ in counted)
    totals = _class_totals(counts for _, _, counts in counted)
    lacking = [(partition, label, total * n / rows) for partition, n, counts in counted
               for label, total in sorted(totals.items(), key=lambda item: -item[1])
               if label not in counts and total * n / rows >= MIN_EXPECTED_ROWS]
    if not lacking:
        return None
    partition, label, expected = lacking[0]
    others = len({where for where, _, _ in lacking}) - 1
    more = f" (and {others} more partition{'s' if others > 1 else ''} lack a class so)" if others else ""
    return (f"partition {partition} holds no row of class {label!r}, of which it would hold about {expected:.0f} were "
            f"the rows shuffled{more}: the rows look sorted or grouped by label, so each node trains on a few "
            "classes and the model comes out worse")


def id_like_labels(summaries: Iterable[dict[str, Any]]) -> str | None:
    """``"480 of the 480 classes have a single row (480 rows): the labels look like row ids ..."`` where most
    classes have one row and there are more than :data:`MIN_EXPECTED_ROWS` of them, else None.

    Parameters
    ----------
    summaries : iterable of dict
        As :func:`grouped_labels` takes them.
    """
    counted = _counted(summaries)
    totals = _class_totals(counts for _, _, counts in counted)
    single = sum(1 for count in totals.values() if count == 1)
    if len(totals) <= MIN_EXPECTED_ROWS or 2 * single <= len(totals):
        return None
    rows = sum(n for _, n, _ in counted)
    return (f"{single} of the {len(totals)} classes have a single row ({rows} rows): the labels look like row ids "
            "rather than classes, and a classifier learns nothing of a class seen once")


def _counted(summaries: Iterable[dict[str, Any]]) -> list[tuple[int, int, dict[Any, int]]]:
    """``(partition, rows, {label: count})`` of each partition whose labels were all counted."""
    return [(int(s["partition"]), int(s["rows"]), dict(zip(s["labels"]["values"], s["labels"]["counts"])))
            for s in summaries
            if s.get("rows") and "counts" in (s.get("labels") or {})
            and len(s["labels"]["values"]) == int(s["labels"]["distinct"])]


def _class_totals(partitions: Iterable[dict[Any, int]]) -> dict[Any, int]:
    """Rows of each class over the partitions."""
    totals: dict[Any, int] = {}
    for counts in partitions:
        for label, count in counts.items():
            totals[label] = totals.get(label, 0) + int(count)
    return totals
