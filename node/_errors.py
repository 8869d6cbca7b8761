"""The exception hierarchy of the ``node`` package (driver, executor, evaluation, CLI)."""

from __future__ import annotations

import storage

__all__ = ["NodeError", "InputDataError", "StoreAccessError", "TrainingError", "NodeDeviceError", "STORE_FAILURES",
           "error_chain", "short_error", "store_failure"]

#: Store failures a Spark task reports instead of raising: the store down past its ``retry_timeout_s``, refusing
#: the run's files, or full.  Every attempt Spark would make again meets the same store.
STORE_FAILURES = (storage.StoreUnavailableError, storage.StorePermissionError, storage.StoreFullError)


class NodeError(Exception):
    """Base class of every error raised by ``node``."""


class InputDataError(NodeError, ValueError):
    """The training or evaluation data is unusable (wrong width, NaN, bad labels, missing dataset).

    Raised on the driver before any training time is spent; the message names the
    problem and, where it can, the partition and row.
    """


class StoreAccessError(NodeError, OSError):
    """The store cannot be reached or written (the message names the URL and the operation)."""


class TrainingError(NodeError, RuntimeError):
    """A training run cannot start or continue (mismatched resume, failed Spark job, ...)."""


class NodeDeviceError(TrainingError):
    """A node cannot compute where its model asks: ``device="gpu"`` on a Spark that hands its tasks no
    GPU, or a node whose task has no usable GPU (the message names the node, its host and GPU address)."""


def error_chain(error: BaseException | None, *, context: bool = True) -> list[BaseException]:
    """``error`` and what it was raised from (``__cause__``) or, with ``context``, raised while handling
    (``__context__``), each once, outermost first.

    Parameters
    ----------
    error : BaseException or None
        The exception (None: an empty chain).
    context : bool
        Whether to follow ``__context__`` where there is no ``__cause__`` (an error raised in an
        ``except`` block); else only what it was raised ``from``.
    """
    chain: list[BaseException] = []
    while error is not None and all(error is not seen for seen in chain):
        chain.append(error)
        error = error.__cause__ or (error.__context__ if context else None)
    return chain


def short_error(error: BaseException, limit: int = 600) -> str:
    """The line of a (possibly Spark-wrapped) exception that says what happened."""
    text = f"{type(error).__name__}: {error}"
    # Spark wraps Python errors in long Java traces; the last Python "...Error: ..." line is the news.
    for line in reversed(text.splitlines()):
        if "Error" in line and not line.startswith("\tat "):
            return line.strip()[:limit]
    return text[:limit]


def store_failure(error: BaseException) -> storage.StoreError | None:
    """The :data:`STORE_FAILURES` error that ``error`` is, or was raised from (a node's failed publish is
    raised from the store's error), else None.

    Parameters
    ----------
    error : BaseException
        What a task raised.
    """
    return next((link for link in error_chain(error, context=False) if isinstance(link, STORE_FAILURES)), None)
