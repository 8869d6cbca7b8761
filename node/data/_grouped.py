"""Partitions whose rows look sorted or grouped by label, found from their summaries (:func:`grouped_labels`).

Data sorted by label and cut into partitions gives each node a few classes, and the merged model comes out
worse without an error (digits in 4 partitions by label range: 0.72 held out, against 0.96 shuffled).  A fit
shuffles what it can (numpy rows, DataFrames); an RDD, a DataFrame with ``shuffle=False`` or a staged
dataset's shards come as they are, and this is how the driver tells the user when they look grouped.

The test is one no shuffle fails by chance: a partition that holds no row of a class of which it would hold
at least :data:`MIN_EXPECTED_ROWS` had the rows been shuffled.  A shuffled partition of ``n`` rows misses a
class of share ``q`` with probability ``(1 - q) ** n``, below ``exp(-n q)`` = ``exp(-20)``, about 2e-9.
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["MIN_EXPECTED_ROWS", "grouped_labels"]

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
    counted = [(int(s["partition"]), int(s["rows"]), dict(zip(s["labels"]["values"], s["labels"]["counts"])))
               for s in summaries
               if s.get("rows") and "counts" in (s.get("labels") or {})
               and len(s["labels"]["values"]) == int(s["labels"]["distinct"])]
    rows = sum(n for _, n, _ in counted)
    totals: dict[Any, int] = {}
    for _, _, counts in counted:
        for label, count in counts.items():
            totals[label] = totals.get(label, 0) + int(count)
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
