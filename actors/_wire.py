"""The wire format: ``[topic, payload, mac]`` frames, msgpack payload, HMAC-SHA256 over a per-run secret.

* ``topic`` is the fixed :data:`TOPIC`; subscribers take every topic so that frames of other
  runs or formats reach :func:`decode_frames` and are *counted* rather than silently filtered.
* ``payload`` is msgpack (never pickle) of :func:`~actors._messages.message_to_dict`.
* ``mac`` is :func:`storage.mac_hex` (HMAC-SHA256, hex) of (purpose, topic, payload) under the
  run's key, compared in constant time; it is checked *before* the payload is parsed, so
  unauthenticated bytes never reach the decoder.

What a hostile sender can cost is bounded: ZeroMQ drops a connection that sends a frame larger
than the transport's limit before reading it; here the payload size, msgpack lengths and nesting
are bounded again, and every field is type- and range-checked.
"""

from __future__ import annotations

import re

import msgpack

import storage

from ._errors import MessageError
from ._messages import Message, WeightAnnouncement, message_from_dict, message_to_dict

__all__ = ["TOPIC", "MAX_PAYLOAD_BYTES", "sign", "encode_message", "decode_frames"]

TOPIC = b"sparkdbn"
#: Announcements are a few hundred bytes; anything much larger is not ours.
MAX_PAYLOAD_BYTES = 64 * 1024
_PURPOSE = "sparkdbn wire v2"
_MAC_BYTES = 64  # hex of HMAC-SHA256
# Messages are flat maps of a dozen short fields; msgpack refuses anything longer or deeper.
_UNPACK_LIMITS = dict(max_str_len=4096, max_bin_len=0, max_array_len=16, max_map_len=32, max_ext_len=0)
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_MAX_NAME_CHARS = 255


def sign(secret: bytes, topic: bytes, payload: bytes) -> bytes:
    """The MAC frame of ``topic + payload`` under ``secret``: 64 ASCII hex digits of HMAC-SHA256."""
    return storage.mac_hex(secret, _PURPOSE, topic, payload).encode("ascii")


def encode_message(message: Message, secret: bytes) -> list[bytes]:
    """The signed frames ``[TOPIC, payload, mac]`` for one message."""
    payload = msgpack.packb(message_to_dict(message), use_bin_type=True)
    return [TOPIC, payload, sign(secret, TOPIC, payload)]


def _is_name(value: str) -> bool:
    """A run, node or phase name that is also a valid store path component."""
    return 0 < len(value) <= _MAX_NAME_CHARS and value not in (".", "..") and not any(c in value for c in "/\\\x00")


def _check_fields(message: Message) -> None:
    if not _is_name(message.node):
        raise MessageError("malformed", f"node name {message.node[:64]!r} is not a valid name")
    if isinstance(message, WeightAnnouncement):
        if message.version < 0 or not _is_name(message.phase):
            raise MessageError("malformed", f"announcement with version {message.version} of phase {message.phase[:64]!r}")
        if not _HEX64.match(message.sha256) or not _HEX64.match(message.mac):
            raise MessageError("malformed", "announcement whose sha256 or mac is not 64 hex digits")


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
    if len(mac) != _MAC_BYTES or not storage.verify_mac(secret, mac.decode("ascii", "replace"), _PURPOSE, topic, payload):
        raise MessageError("bad_signature", "HMAC-SHA256 does not match this run's secret")
    try:
        decoded = msgpack.unpackb(payload, raw=False, strict_map_key=True, **_UNPACK_LIMITS)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
        raise MessageError("malformed", f"payload is not valid msgpack within the limits: {error}") from error
    message = message_from_dict(decoded)
    if message.run != run:
        raise MessageError("wrong_run", f"message of run {message.run[:64]!r} reached a node of run {run!r}")
    _check_fields(message)
    return message
