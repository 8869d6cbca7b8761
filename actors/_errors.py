"""The actors package's exceptions: one hierarchy, each with a message a user can act on."""

from __future__ import annotations

__all__ = ["ActorsError", "MessageError", "MergeError", "PublishError", "NodeStoppedError", "NodeAddressError"]


class ActorsError(Exception):
    """Base class of every error raised by :mod:`actors`."""


class MessageError(ActorsError, ValueError):
    """A frame from the network was refused.

    ``reason`` is the counter it is dropped under (``"bad_signature"``, ``"wrong_run"``,
    ``"malformed"``, ``"schema"``), so the receive loop can count it and carry on.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class MergeError(ActorsError, ValueError):
    """Snapshots could not be merged: non-finite values, or names/shapes that do not match."""


class PublishError(ActorsError, ValueError):
    """Weights could not be published (non-finite values, or the store write failed)."""


class NodeStoppedError(ActorsError, RuntimeError):
    """The node was used after :meth:`~actors.NodeHandle.stop`."""


class NodeAddressError(ActorsError, OSError):
    """A node cannot bind its endpoint: the host is not local, or every port of its range is taken."""
