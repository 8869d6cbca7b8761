"""Digests and keyed MACs: the one place sparkdbn computes sha256 and HMAC-SHA256.

* :func:`sha256_hex` is integrity: it tells damage from intact bytes, but anyone can compute it.
* :func:`mac_hex` is authenticity: HMAC-SHA256 under the run's key, which never sits in the store.
  Its parts are length-prefixed (so ``("ab", "c")`` and ``("a", "bc")`` differ) and the first
  part names the purpose, so a MAC made for one kind of thing never verifies as another.
* :func:`sign_json` / :func:`verify_json`: small JSON files (run record, peer entries, metrics,
  pointers) in an envelope ``{"hmac_sha256": ..., "signed": value}``.  The MAC covers the
  canonical JSON of ``value`` and a *context* (run, node, ...) that the reader derives from where
  it found the file, so a signed file moved elsewhere does not verify either.
* :class:`Refusals` counts what a reader skipped, per kind, and logs once per source.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import threading
from collections import Counter
from typing import Any

from ._errors import AuthenticationError
from ._say_once import SayOnce

__all__ = ["MIN_KEY_BYTES", "Refusals", "check_key", "mac_hex", "sha256_hex", "sign_json", "verify_json", "verify_mac"]

#: Shorter keys are refused: HMAC is only as strong as its key.
MIN_KEY_BYTES = 16

_JSON_ENVELOPE_PURPOSE = "sparkdbn signed json v1"
_MAC_FIELD, _VALUE_FIELD = "hmac_sha256", "signed"

def check_key(key: bytes, what: str = "key") -> bytes:
    """Return ``key`` as bytes, or raise when it is not bytes of at least :data:`MIN_KEY_BYTES`.

    Raises
    ------
    TypeError
        ``key`` is not bytes (a str passphrase must be derived first, see ``node.resolve_run_key``).
    ValueError
        ``key`` is shorter than :data:`MIN_KEY_BYTES`.
    """
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"{what} must be bytes (the run's secret key), got {type(key).__name__}")
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"{what} has {len(key)} byte(s); at least {MIN_KEY_BYTES} random bytes are needed")
    return bytes(key)


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data`` as 64 lowercase hex digits."""
    return hashlib.sha256(data).hexdigest()


def _encode_part(part: "str | bytes | int") -> bytes:
    if isinstance(part, bool):
        raise TypeError("MAC parts are str, bytes or int, not bool")
    if isinstance(part, str):
        data = part.encode("utf-8")
    elif isinstance(part, int):
        data = str(part).encode("ascii")
    elif isinstance(part, (bytes, bytearray, memoryview)):
        data = bytes(part)
    else:
        raise TypeError(f"MAC parts are str, bytes or int, got {type(part).__name__}")
    return len(data).to_bytes(8, "big") + data


def mac_hex(key: bytes, *parts: "str | bytes | int") -> str:
    """HMAC-SHA256 under ``key`` of the length-prefixed ``parts`` (the first names the purpose), as hex."""
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for part in parts:
        mac.update(_encode_part(part))
    return mac.hexdigest()


def verify_mac(key: bytes, mac: str, *parts: "str | bytes | int") -> bool:
    """Whether ``mac`` is :func:`mac_hex` of ``parts`` under ``key`` (compared in constant time)."""
    if not isinstance(mac, str):
        return False
    return hmac.compare_digest(mac.encode("ascii", "replace"), mac_hex(key, *parts).encode("ascii"))


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False, ensure_ascii=True)


def sign_json(key: bytes, value: Any, *context: "str | bytes | int") -> bytes:
    """``value`` as a signed JSON envelope (UTF-8 bytes); ``context`` is bound in the MAC, not stored.

    Raises
    ------
    ValueError
        ``value`` is not JSON-serializable without NaN/Inf.
    """
    canonical = _canonical_json(value)
    mac = mac_hex(key, _JSON_ENVELOPE_PURPOSE, *context, canonical)
    return json.dumps({_MAC_FIELD: mac, _VALUE_FIELD: value}, sort_keys=True, allow_nan=False).encode("utf-8")


def verify_json(key: bytes, data: bytes, *context: "str | bytes | int", where: str) -> Any:
    """The value of a :func:`sign_json` envelope, after checking its MAC under ``key`` and ``context``.

    Raises
    ------
    AuthenticationError
        ``data`` is not a signed envelope, or its MAC does not verify (another key, another
        context, or changed by someone without the key).  The message names ``where``.
    """
    try:
        envelope = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise AuthenticationError(f"{where} is not a signed record: not valid JSON ({error})") from error
    if not isinstance(envelope, dict) or set(envelope) != {_MAC_FIELD, _VALUE_FIELD}:
        raise AuthenticationError(f"{where} is not signed (no {_MAC_FIELD!r} envelope)")
    value = envelope[_VALUE_FIELD]
    try:
        canonical = _canonical_json(value)
    except ValueError as error:  # NaN/Inf parsed from the file: never produced by sign_json
        raise AuthenticationError(f"{where} is not a signed record: {error}") from error
    if not verify_mac(key, envelope[_MAC_FIELD], _JSON_ENVELOPE_PURPOSE, *context, canonical):
        raise AuthenticationError(f"{where}: the signature does not verify under the key given")
    return value


class Refusals:
    """Counts of skipped (refused) items per kind; a warning the first time a source is refused.

    An *item* is what is refused (a file path), a *source* is where it came from (a node's
    folder); a store writer planting thousands of files in one folder costs one log line.
    Each item is counted once; memory is bounded by ``max_remembered`` items and sources (the
    least recently seen are forgotten, after which an item would be counted again).

    Parameters
    ----------
    logger : logging.Logger
        Where the first refusal of each source is logged (warning; later ones at debug level).
    max_remembered : int
        How many items (and, separately, sources) are remembered.
    """

    def __init__(self, logger: logging.Logger, max_remembered: int = 4096) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._items = SayOnce(logger, repeats_at=None, max_remembered=max_remembered)  # the items counted
        self._sources = SayOnce(logger, max_remembered=max_remembered)  # the sources said

    def known(self, kind: str, item: str) -> bool:
        """Whether ``item`` was already refused as ``kind`` (and is still remembered)."""
        return self._items.seen((kind, item))

    def refuse(self, kind: str, item: str, source: str, message: str) -> None:
        """Count ``item`` under ``kind`` (once) and log ``message`` the first time ``source`` is refused."""
        if not self._items.first((kind, item)):
            return
        with self._lock:
            self._counts[kind] += 1
        self._sources.say((kind, source), "refused (%s): %s; further refusals from %s are counted, not logged",
                          kind, message, source)

    def counts(self) -> dict[str, int]:
        """Refusals so far, by kind."""
        with self._lock:
            return dict(self._counts)
