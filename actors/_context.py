"""One ZeroMQ context for every transport of the process, terminated when the last closes.

A process forked after a transport started gets a fresh context in the child (the parent's is unusable there,
and must not be terminated there): a node started in the child makes its own.
"""

from __future__ import annotations

import os
import threading

import zmq

__all__ = ["acquire_context", "release_context"]

_context_lock = threading.Lock()
_context: zmq.Context | None = None
_context_users = 0


def _forget_context_after_fork() -> None:
    # The parent's context is unusable in a forked child (and must not be terminated there):
    # a node started in the child gets a fresh one.
    global _context, _context_users, _context_lock
    _context_lock = threading.Lock()
    _context, _context_users = None, 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_context_after_fork)


def acquire_context() -> zmq.Context:
    """The process's shared ZeroMQ context (made on first use); pair each call with :func:`release_context`."""
    global _context, _context_users
    with _context_lock:
        if _context is None or _context.closed:
            _context = zmq.Context()
        _context_users += 1
        return _context


def release_context() -> None:
    """One user fewer; the last terminates the context (every socket closed with a bounded linger by then)."""
    global _context, _context_users
    with _context_lock:
        _context_users -= 1
        if _context_users == 0 and _context is not None:
            _context.term()  # every socket is closed with a bounded linger by now
            _context = None
