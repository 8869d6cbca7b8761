"""Say a thing once: the one helper for warnings that would otherwise repeat (per peer, per epoch, per job).

In the lowest layer, so that every package may use it: the store, the nodes (actors) and the driver (node).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Hashable

__all__ = ["SayOnce"]


class SayOnce:
    """Logs a message at warning level the first time its key is seen; repeats go to ``repeats_at`` (or nowhere).

    A hostile or broken peer then costs one warning however often it repeats, and a condition every
    epoch shares is told once per fit.  Thread-safe; at most ``max_remembered`` keys are remembered
    (the least recently seen is forgotten first, and would be said again).

    Parameters
    ----------
    logger : logging.Logger
        Where the messages go.
    repeats_at : int or None
        The level of a repeat (default ``logging.DEBUG``); None: a repeat is not logged at all.
    max_remembered : int
    """

    def __init__(self, logger: logging.Logger, *, repeats_at: int | None = logging.DEBUG,
                 max_remembered: int = 4096) -> None:
        self._logger = logger
        self._repeats_at = repeats_at
        self._max = int(max_remembered)
        self._lock = threading.Lock()
        self._seen: OrderedDict[Hashable, None] = OrderedDict()

    def first(self, key: Hashable) -> bool:
        """Whether ``key`` is seen for the first time (remembered from now on; a repeat renews it)."""
        with self._lock:
            first = key not in self._seen
            self._seen[key] = None
            self._seen.move_to_end(key)
            if len(self._seen) > self._max:
                self._seen.popitem(last=False)
        return first

    def seen(self, key: Hashable) -> bool:
        """Whether ``key`` was seen (and is still remembered); does not remember it."""
        with self._lock:
            return key in self._seen

    def say(self, key: Hashable, message: str, *args: object) -> bool:
        """Log ``message % args`` as a warning the first time ``key`` is seen, later at ``repeats_at``;
        returns whether it was the first time."""
        first = self.first(key)
        # stacklevel=2: the record names the caller's file and line, not this helper's
        if first:
            self._logger.warning(message, *args, stacklevel=2)
        elif self._repeats_at is not None:
            self._logger.log(self._repeats_at, message, *args, stacklevel=2)
        return first
