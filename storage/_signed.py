"""Signed JSON records and signed files in the store, read with a bound on their size.

A *signed record* is a small JSON file in the envelope of :func:`~storage._auth.sign_json`.

A *signed file* is how sparkdbn up to 0.2 stored a phase result: a fixed name that callers ask
for, whose MAC must also cover its content.  It is two files::

    <folder>/<stem>.json                 signed pointer {"file", "sha256", "size_bytes"}
    <folder>/<stem>-<sha256><suffix>     the content, named by its digest (a plain .npz stays
                                         readable by numpy)

Such files are still read (runs stored before); they are no longer written, because replacing the
pointer lets a driver that lost its lease replace what a newer one stored.  Phase results are now
named by the signed run record instead (see :mod:`storage._weights`).
"""

from __future__ import annotations

import logging
from typing import Any

from ._auth import sha256_hex, sign_json, verify_json
from ._errors import AuthenticationError, ChecksumError, FileTooLargeError, StoreError, StoreNotFoundError
from ._paths import join
from ._store import Store

__all__ = ["POINTER_MAX_BYTES", "read_signed_file", "read_signed_json", "write_signed_json"]

logger = logging.getLogger(__name__)

#: A pointer is a few hundred bytes; anything much larger is not one.
POINTER_MAX_BYTES = 64 * 1024


def write_signed_json(store: Store, key: bytes, path: str, value: Any, *context: str) -> None:
    """Write ``value`` at ``path`` as a signed record (atomically); ``context`` is bound in the MAC."""
    store.write_bytes(path, sign_json(key, value, *context))


def read_signed_json(store: Store, key: bytes, path: str, *context: str, max_bytes: int) -> Any | None:
    """The value of the signed record at ``path``; None when there is none.

    Raises
    ------
    AuthenticationError
        It does not verify under ``key`` and ``context``, or it is larger than ``max_bytes``.
    """
    try:
        data = store.read_bytes(path, max_bytes=max_bytes)
    except StoreNotFoundError:
        return None
    except FileTooLargeError as error:
        raise AuthenticationError(f"{store.url}/{path} is no signed record of this run: {error}") from error
    return verify_json(key, data, *context, where=f"{store.url}/{path}")


def _pointer(store: Store, key: bytes, folder: str, stem: str, suffix: str, context: tuple[str, ...]) -> dict | None:
    path = join(folder, stem + ".json")
    value = read_signed_json(store, key, path, *context, max_bytes=POINTER_MAX_BYTES)
    if value is None:
        return None
    sha256, size = (value.get("sha256"), value.get("size_bytes")) if isinstance(value, dict) else (None, None)
    if not isinstance(sha256, str) or not isinstance(size, int) or value.get("file") != f"{stem}-{sha256}{suffix}":
        raise StoreError(f"{store.url}/{path}: a signed pointer without a valid file, sha256 and size_bytes: {value!r}")
    return value


def read_signed_file(store: Store, key: bytes, folder: str, stem: str, suffix: str, *context: str) -> bytes | None:
    """The content of the signed file ``<folder>/<stem>``; None when it was never written.

    Raises
    ------
    AuthenticationError
        The pointer does not verify under ``key`` and ``context``.
    ChecksumError
        The content does not match the digest or size the pointer signed (damaged or replaced).
    StoreNotFoundError
        The pointer verifies but the content it names is gone.
    """
    pointer = _pointer(store, key, folder, stem, suffix, context)
    if pointer is None:
        return None
    path = join(folder, pointer["file"])
    try:
        data = store.read_bytes(path, max_bytes=pointer["size_bytes"])
    except FileTooLargeError as error:
        raise ChecksumError(f"{store.url}/{path} is larger than the {pointer['size_bytes']} bytes signed for it") from error
    digest = sha256_hex(data)
    if digest != pointer["sha256"]:
        raise ChecksumError(
            f"{store.url}/{path}: sha256 {digest[:12]}... of {len(data)} bytes does not match the signed "
            f"{pointer['sha256'][:12]}...; the file is damaged or was replaced"
        )
    return data
