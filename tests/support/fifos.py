"""Running store readers beside FIFOs planted in a store, without a test that hangs when a reader waits on one.

A process that opens a FIFO for reading blocks until a writer opens it: a reader the product failed
to guard would hang the test for ever.  :func:`call_beside_fifos` runs the work in a thread, and when
it has not ended in time releases every reader waiting on the FIFOs and fails the test, saying so.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from typing import Any, Callable, Iterable

__all__ = ["call_beside_fifos", "release_fifo_readers"]


def release_fifo_readers(fifo: str | os.PathLike) -> None:
    """Give any process blocked opening ``fifo`` for reading its end of file (a no-op when none waits)."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError as error:
        if error.errno != errno.ENXIO:  # ENXIO: no reader has it open
            raise


def call_beside_fifos(work: Callable[[], Any], fifos: Iterable[str | os.PathLike], *, wait_s: float,
                      stuck: str, release_s: float = 60.0) -> Any:
    """``work()``'s result (or its exception, raised here); fails with ``stuck`` when it has not ended after
    ``wait_s``, once its readers are released from ``fifos`` (for at most ``release_s``)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except BaseException as error:  # reported below, in the test's thread
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(wait_s)
    was_stuck = thread.is_alive()
    deadline = time.monotonic() + release_s
    while thread.is_alive() and time.monotonic() < deadline:
        for fifo in fifos:
            release_fifo_readers(fifo)
        thread.join(0.1)
    assert not was_stuck, stuck
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
