"""A fit's work folders in the store: the claims of work stealing, the stored training partitions and the
round records of ``sync``.

::

    runs/<run>/claims/<fit>/<phase>/<epoch:04d>-<partition:05d>      who trains a partition (node.modes._stealing)
    runs/<run>/blocks/<fit>/<partition:05d>-<sha256>-<mac>.block     the fit's partitions (node.executor._resident)
    runs/<run>/rounds/<fit>/<phase>/<first epoch:04d>/<attempt>/...  a sync job's rounds (node.modes._sync_rounds)

``<fit>`` is the first 12 characters of the fit's id.  The driver removes a fit's folders when it
ends, and every earlier fit's when a fit starts under the run's lease (:func:`remove_work_folders`).
"""

from __future__ import annotations

import storage

__all__ = ["blocks_folder", "claims_folder", "rounds_folder", "remove_work_folders"]

#: The kinds of work folder, each ``runs/<run>/<kind>/<fit>/...``.
WORK_FOLDERS = ("claims", "blocks", "rounds")


def claims_folder(run: str, fit_id: str, phase: str) -> str:
    """Where the nodes of fit ``fit_id`` claim the partitions of ``phase`` they train."""
    return f"runs/{run}/claims/{fit_id[:12]}/{phase}"


def blocks_folder(run: str, fit_id: str) -> str:
    """Where fit ``fit_id`` stores its training partitions."""
    return f"runs/{run}/blocks/{fit_id[:12]}"


def rounds_folder(run: str, fit_id: str, phase: str) -> str:
    """Where the sync jobs of fit ``fit_id`` keep the round records of ``phase``."""
    return f"runs/{run}/rounds/{fit_id[:12]}/{phase}"


def remove_work_folders(store: storage.Store, run: str, fit_id: str | None = None) -> None:
    """Remove the claims, stored partitions and round records of fit ``fit_id`` of ``run`` (of every fit of it
    when None).

    The driver calls it when a fit ends (its own) and when one starts under the run's lease (what
    earlier fits that did not end cleanly left).
    """
    for kind in WORK_FOLDERS:
        fits = store.list(f"runs/{run}/{kind}") if fit_id is None else [fit_id[:12]]
        for fit in fits:
            store.delete(f"runs/{run}/{kind}/{fit}", recursive=True)
        if not store.list(f"runs/{run}/{kind}"):  # nothing left in it (or never made)
            store.delete(f"runs/{run}/{kind}", recursive=True)
