"""The wire format: ``[topic, payload, mac]`` frames, msgpack payload, HMAC-SHA256 over a per-run secret.

* ``topic`` is the fixed :data:`TOPIC`; subscribers take every topic so that frames of other
  runs or formats reach :func:`decode_frames` and are *counted* rather than silently filtered.
* ``payload`` is msgpack (never pickle) of :func:`~actors._messages.message_to_dict`.
* ``mac`` is HMAC-SHA256(secret, topic + payload), compared in constant time; it is checked
  *before* the payload is parsed, so unauthenticated bytes never reach the decoder.
"""

from __future__ import annotations

import hashlib
import hmac

import msgpack

from ._errors import MessageError
from ._messages import Goodbye, Message, WeightAnnouncement, message_from_dict, message_to_dict

__all__ = ["TOPIC", "MAX_PAYLOAD_BYTES", "sign", "encode_message", "decode_frames"]

TOPIC = b"sparkdbn"
#: Announcements are a few hundred bytes; anything much larger is not ours.
MAX_PAYLOAD_BYTES = 64 * 1024
_MAC_BYTES = hashlib.sha256().digest_size


def sign(secret: bytes, topic: bytes, payload: bytes) -> bytes:
    """HMAC-SHA256 of ``topic + payload`` under ``secret`` (32 bytes)."""
    return hmac.new(secret, topic + payload, hashlib.sha256).digest()


def encode_message(message: Message, secret: bytes) -> list[bytes]:
    """The signed frames ``[TOPIC, payload, mac]`` for one message."""
    payload = msgpack.packb(message_to_dict(message), use_bin_type=True)
    return [TOPIC, payload, sign(secret, TOPIC, payload)]


def decode_frames(frames: list[bytes], secret: bytes, run: str) -> Message:
    """Verify and decode frames received from a peer.

    Raises
    ------
    MessageError
        With ``reason`` one of ``"malformed"`` (frame count, topic, size, msgpack, fields),
        ``"bad_signature"`` (missing or wrong MAC), ``"schema"`` (unknown schema version)
        or ``"wrong_run"`` (a correctly signed message of another run).
    """
    if len(frames) == 2 and frames[0] == TOPIC:
        raise MessageError("bad_signature", "frame has no signature")
    if len(frames) != 3:
        raise MessageError("malformed", f"expected 3 frames [topic, payload, mac], got {len(frames)}")
    topic, payload, mac = (bytes(frame) for frame in frames)
    if topic != TOPIC:
        raise MessageError("malformed", f"unknown topic {topic[:32]!r}")
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise MessageError("malformed", f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    if len(mac) != _MAC_BYTES or not hmac.compare_digest(mac, sign(secret, topic, payload)):
        raise MessageError("bad_signature", "HMAC-SHA256 does not match this run's secret")
    try:
        decoded = msgpack.unpackb(payload, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
        raise MessageError("malformed", f"payload is not valid msgpack: {error}") from error
    message = message_from_dict(decoded)
    if message.run != run:
        raise MessageError("wrong_run", f"message of run {message.run!r} reached a node of run {run!r}")
    if isinstance(message, WeightAnnouncement) and (message.version < 0 or not message.path or not message.node):
        raise MessageError("malformed", f"announcement with version {message.version} and path {message.path!r}")
    if isinstance(message, Goodbye) and not message.node:
        raise MessageError("malformed", "goodbye without a node name")
    return message
