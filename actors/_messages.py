"""Wire messages (frozen dataclasses with an explicit schema version) and the merged-snapshot type.

Messages are deliberately small: a weight announcement names a snapshot in the store; the
weights themselves travel through the store, written once and read by whoever needs them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping, Union

import numpy as np

from ._errors import MessageError

__all__ = ["SCHEMA_VERSION", "WeightAnnouncement", "Goodbye", "Message", "Snapshot", "message_to_dict", "message_from_dict"]

#: Bumped whenever a message's fields change; frames with another schema are dropped and counted.
SCHEMA_VERSION = 2


@dataclass(frozen=True)
class WeightAnnouncement:
    """``node`` wrote version ``version`` of its ``phase`` weights to the store.

    ``sha256`` is the hex digest of the file and ``mac`` its authentication under the run's key
    (together they name the file: :class:`storage.SnapshotRef`); ``samples_seen`` the samples
    the node has trained on so far, ``sent_at`` a Unix time (s).  Schema 2: ``path`` gave way
    to ``mac`` (a reader derives the path, it never follows one from the network).
    """

    run: str
    node: str
    phase: str
    version: int
    sha256: str
    mac: str
    samples_seen: int
    sent_at: float
    schema: int = SCHEMA_VERSION


@dataclass(frozen=True)
class Goodbye:
    """``node`` is leaving the run cleanly; peers may disconnect from it."""

    run: str
    node: str
    sent_at: float
    schema: int = SCHEMA_VERSION


Message = Union[WeightAnnouncement, Goodbye]

# The type tag on the wire; one entry per message class.
_TYPES: dict[str, type] = {"announce": WeightAnnouncement, "goodbye": Goodbye}
_TAGS: dict[type, str] = {cls: tag for tag, cls in _TYPES.items()}


@dataclass(frozen=True)
class Snapshot:
    """A peer's verified weights, ready to merge.

    ``params`` maps parameter names to host arrays (e.g. ``"W"`` of shape (n_visible, n_hidden)).
    ``sent_at`` is the announcement time (Unix s).  For a version found in the store by
    anti-entropy, no announcement was heard: ``sent_at`` is when it was found,
    ``samples_seen`` is 0 (unknown) and ``announced`` is False.
    """

    node: str
    phase: str
    version: int
    samples_seen: int
    sent_at: float
    params: dict[str, np.ndarray]
    announced: bool = True


def message_to_dict(message: Message) -> dict[str, Any]:
    """The plain dict that is msgpack-encoded on the wire (``"type"`` tags the class)."""
    payload = dataclasses.asdict(message)
    payload["type"] = _TAGS[type(message)]
    return payload


def _check_field(cls: type, name: str, value: Any, expected: type) -> Any:
    # bool is an int subclass; a float field accepts ints (msgpack may pack 1.0 as float anyway).
    if expected is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, expected) or isinstance(value, bool):
        raise MessageError("malformed", f"{cls.__name__}.{name} must be {expected.__name__}, got {type(value).__name__}")
    return value


def message_from_dict(payload: Any) -> Message:
    """Rebuild a message from a decoded dict; raises :class:`MessageError` with the drop reason.

    Checks, in order: a dict with a known ``type`` (else ``malformed``), the ``schema``
    (``schema``), then exactly the class's fields with the right types (``malformed``).
    The run is checked by the caller, which knows which run it belongs to.
    """
    if not isinstance(payload, Mapping):
        raise MessageError("malformed", f"a message must be a map, got {type(payload).__name__}")
    schema = payload.get("schema")
    if schema != SCHEMA_VERSION:
        raise MessageError("schema", f"unknown message schema {schema!r} (this node speaks {SCHEMA_VERSION})")
    tag = payload.get("type")
    cls = _TYPES.get(tag) if isinstance(tag, str) else None  # a list or map is no tag (and unhashable)
    if cls is None:
        raise MessageError("malformed", f"unknown message type {payload.get('type')!r}")
    fields = {field.name: field for field in dataclasses.fields(cls)}
    given = set(payload) - {"type"}
    if given != set(fields):
        raise MessageError("malformed", f"{cls.__name__} fields {sorted(given)} != expected {sorted(fields)}")
    values = {}
    for name, field in fields.items():
        type_name = field.type if isinstance(field.type, str) else field.type.__name__
        expected = {"str": str, "int": int, "float": float}[type_name]
        values[name] = _check_field(cls, name, payload[name], expected)
    return cls(**values)
