"""A run's folders in the store, as the driver and the CLI meet them before and between fits.

:func:`open_checked_store` opens the store and proves it answers (so the CLI can say so before
Spark starts); :func:`sweep_temporaries` removes what writers killed mid-write left in a run's
folders (at a fit's start and at each phase end).
"""

from __future__ import annotations

import logging

import storage

from .._errors import StoreAccessError

__all__ = ["open_checked_store", "sweep_temporaries", "STALE_TEMPORARY_S"]

logger = logging.getLogger(__name__)

#: A temporary file this old in a run's folders belongs to a writer that died mid-write.
STALE_TEMPORARY_S = 10.0


def open_checked_store(url: str, retry_timeout_s: float = 30.0) -> storage.Store:
    """Open the store at ``url`` and prove it answers, or raise :class:`~node.StoreAccessError`."""
    try:
        store = storage.open_store(url, retry_timeout_s=retry_timeout_s)
        store.makedirs("runs")
        store.exists("runs")
    except storage.StoreError as error:
        raise StoreAccessError(f"the store {url!r} is unreachable or not writable ({type(error).__name__}: {error}); "
                               "check the URL, that the service is up and the permissions") from error
    except OSError as error:
        raise StoreAccessError(f"the store {url!r} cannot be used: {error}") from error
    return store


def sweep_temporaries(store: storage.Store, run: str, older_than_s: float = STALE_TEMPORARY_S) -> int:
    """Remove temporaries that writers killed mid-write left anywhere in a run's folders."""
    prefix = f"runs/{run}"
    folders = [prefix] + [f"{prefix}/{name}" for name in ("peers", "phases", "model", "faults", "record", "lease")]
    folders += [f"{prefix}/model/{generation}" for generation in store.list(f"{prefix}/model")
                if generation.isdigit()]
    for phase in store.list(f"{prefix}/weights"):
        folders += [f"{prefix}/weights/{phase}"] + [f"{prefix}/weights/{phase}/{node}"
                                                    for node in _children(store, f"{prefix}/weights/{phase}")]
    folders += [f"{prefix}/metrics/{node}" for node in store.list(f"{prefix}/metrics")]
    removed = sum(store.remove_stale_temporaries(folder, older_than_s=older_than_s) for folder in folders)
    if removed:
        logger.info("run %s: removed %d temporary file(s) left by writers that died", run, removed)
    return removed


def _children(store: storage.Store, folder: str) -> list[str]:
    """The names in ``folder``; none when a file was planted where the folder should be."""
    try:
        return store.list(folder)
    except storage.StoreEntryTypeError:
        return []
