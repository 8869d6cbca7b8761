"""A fit's training partitions in the store: one ``.block`` file each, under a name signed with the run key.

::

    runs/<run>/blocks/<fit>/<partition:05d>-<sha256>-<mac>.block     the partition's X and y as .npy

The MAC covers (run, fit, partition, sha256) under the run key: a node never trains on data that
no holder of the key wrote, and the content is read with ``allow_pickle=False``
(:mod:`node.executor._resident` reads them).  A :class:`BlockSink` says where one fit's partitions
go; it is written to by whoever holds the checked rows -- the driver for numpy arrays, the Spark
job that checks them for everything else (:mod:`node.data._prepare`).
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np

import storage

__all__ = ["BLOCK_NAMES", "BlockSink", "decode_block", "encode_block", "store_block"]

#: The names of a fit's stored partitions (the MAC's purpose and the suffix).
BLOCK_NAMES = storage.SignedNames("sparkdbn training block v1", ".block", seq_digits=5)


def encode_block(X: np.ndarray, y: np.ndarray | None) -> bytes:
    """``X`` (rows, *shape) and optional ``y`` (rows,) as bytes: a flag, then ``.npy`` records."""
    buffer = io.BytesIO()
    buffer.write(b"\x01" if y is not None else b"\x00")
    np.save(buffer, np.ascontiguousarray(X), allow_pickle=False)
    if y is not None:
        np.save(buffer, np.ascontiguousarray(y), allow_pickle=False)
    return buffer.getvalue()


def decode_block(payload: bytes) -> tuple[np.ndarray, np.ndarray | None]:
    """Inverse of :func:`encode_block` (never unpickles)."""
    buffer = io.BytesIO(payload)
    has_labels = buffer.read(1) == b"\x01"
    X = np.load(buffer, allow_pickle=False)
    y = np.load(buffer, allow_pickle=False) if has_labels else None
    return X, y


def store_block(store: storage.Store, folder: str, key: bytes, context: tuple[str, str], index: int, X: np.ndarray,
                y: np.ndarray | None) -> int:
    """Store partition ``index`` in ``folder`` under its name signed with ``key`` for ``context`` (run, fit);
    the bytes written."""
    data = encode_block(X, y)
    name = BLOCK_NAMES.signed(key, context, index, storage.sha256_hex(data))
    store.write_bytes(f"{folder}/{name}", data)
    return len(data)


@dataclass(frozen=True)
class BlockSink:
    """Where one fit's checked partitions go: plain values, so a Spark task can carry it.

    Attributes
    ----------
    store_url : str
    retry_timeout_s : float
        How long the store is retried when it is unavailable.
    folder : str
        The fit's blocks folder (:func:`node.run.blocks_folder`).
    key : bytes
        The run key the names are signed with (it travels in the fit's tasks, as their config does).
    run : str
        The run every name is signed for.
    fit_id : str
        The fit every name is signed for.
    """

    store_url: str
    retry_timeout_s: float
    folder: str
    key: bytes = field(repr=False)
    run: str
    fit_id: str

    @property
    def context(self) -> tuple[str, str]:
        """What the names' MAC covers besides the partition and its digest: (run, fit)."""
        return self.run, self.fit_id

    def open_store(self) -> storage.Store:
        return storage.open_store(self.store_url, retry_timeout_s=self.retry_timeout_s)

    def write(self, store: storage.Store, index: int, X: np.ndarray, y: np.ndarray | None) -> int:
        """Store partition ``index`` under its signed name; the bytes written."""
        return store_block(store, self.folder, self.key, self.context, index, X, y)
