"""Store-relative paths: '/'-separated, inside the store root, never escaping it."""

from __future__ import annotations

from ._errors import StorePathError

__all__ = ["TMP_PREFIX", "check_name", "join", "normalize", "parent_and_name"]

#: Prefix of temporary files written before the atomic rename; hidden from listings.
TMP_PREFIX = "._tmp-"


def normalize(path: str) -> str:
    """Validate a store-relative path and return it normalized ('' is the store root).

    Raises
    ------
    StorePathError
        For absolute paths, '..' components, backslashes or NUL characters.
    """
    if not isinstance(path, str):
        raise StorePathError(f"store path must be a str, got {type(path).__name__}: {path!r}")
    if path.startswith("/"):
        raise StorePathError(f"absolute path {path!r} refused: store paths are relative to the store root")
    if "\\" in path or "\x00" in path:
        raise StorePathError(f"path {path!r} refused: backslashes and NUL characters are not allowed")
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise StorePathError(f"path {path!r} refused: '..' would escape the store root")
    return "/".join(parts)


def join(*paths: str) -> str:
    """Join store-relative paths and normalize the result."""
    return normalize("/".join(p for p in paths if p))


def parent_and_name(path: str) -> tuple[str, str]:
    """Split a normalized path into (parent, name); the root has no name."""
    parent, _, name = path.rpartition("/")
    return parent, name


def check_name(kind: str, name: str) -> str:
    """Validate one path component used as an identifier (run, phase, node, dataset name)."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name or "\x00" in name:
        raise StorePathError(f"invalid {kind} name {name!r}: must be a non-empty name without '/', '\\', '..'")
    if name.startswith(TMP_PREFIX):
        raise StorePathError(f"invalid {kind} name {name!r}: the prefix {TMP_PREFIX!r} is reserved for temporary files")
    return name
