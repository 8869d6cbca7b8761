"""The run key: one secret per run that outlives a fit and never goes to the store.

Everything a node or the driver acts upon is authenticated under the run key (see
``storage``), so a resumed fit must find the key of the first one, and someone who can read
the store must not find it there.  :func:`resolve_run_key` looks, in this order, for

1. ``key`` or ``key_file`` given by the caller;
2. the environment: ``SPARKDBN_KEY_FILE`` (a file holding the secret), then ``SPARKDBN_KEY``;
3. Spark's own ``spark.authenticate.secret``, when set in the Spark configuration;
4. a key kept on the driver's machine from an earlier fit of the same run and store:
   ``$XDG_CONFIG_HOME/sparkdbn/keys/<run>-<digest>.key`` (``~/.config`` when unset), mode 0600
   in directories of mode 0700 -- generated there on the first fit when ``create`` is true.

Each of these is a *master* secret; the run key is derived from it per run,
``HMAC-SHA256(master, "sparkdbn run key", run)`` (:func:`storage.mac_hex`), so one secret
shared by many runs still gives each run its own key, and a key of one run says nothing of another.
A secret file holds the secret itself (trailing whitespace ignored), at least 16 bytes;
``head -c 32 /dev/urandom | xxd -p -c 64 > key`` makes a good one.

This module does not import pyspark: pass Spark's configuration as a plain mapping,
e.g. ``dict(spark.sparkContext.getConf().getAll())``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import stat
from dataclasses import dataclass, field
from typing import Mapping

import storage

from .._errors import NodeError

__all__ = ["ENV_KEY", "ENV_KEY_FILE", "SPARK_SECRET_CONF", "RunKey", "RunKeyError", "derive_run_key",
           "resolve_run_key", "stored_key_path"]  # fmt: skip

logger = logging.getLogger(__name__)

ENV_KEY_FILE = "SPARKDBN_KEY_FILE"
ENV_KEY = "SPARKDBN_KEY"
SPARK_SECRET_CONF = "spark.authenticate.secret"
_DERIVATION_PURPOSE = "sparkdbn run key"
_MAX_SECRET_FILE_BYTES = 64 * 1024
_RUN_CHARS_IN_FILE_NAME = 100


class RunKeyError(NodeError, ValueError):
    """No usable run key: none found where one may be, or one that is too short or unreadable."""


@dataclass(frozen=True)
class RunKey:
    """The key of one run and where it came from.

    Attributes
    ----------
    key : bytes
        32 bytes; never printed (it is left out of ``repr``), never written to the store.
    source : str
        Where the master secret came from, for messages: ``"key file /path"``,
        ``"environment variable SPARKDBN_KEY"``, ...
    """

    key: bytes = field(repr=False)
    source: str


def derive_run_key(master: bytes, run: str) -> bytes:
    """The 32-byte key of ``run``: ``HMAC-SHA256(master, "sparkdbn run key", run)``.

    Raises
    ------
    RunKeyError
        ``master`` is shorter than :data:`storage.MIN_KEY_BYTES`.
    """
    if len(master) < storage.MIN_KEY_BYTES:
        raise RunKeyError(f"the secret has {len(master)} byte(s); at least {storage.MIN_KEY_BYTES} are needed")
    return bytes.fromhex(storage.mac_hex(master, _DERIVATION_PURPOSE, run))


def _config_home(environ: Mapping[str, str]) -> str:
    configured = environ.get("XDG_CONFIG_HOME", "")
    if os.path.isabs(configured):
        return configured
    home = environ.get("HOME") or os.path.expanduser("~")
    return os.path.join(home, ".config")


def stored_key_path(run: str, store_url: str, environ: Mapping[str, str] | None = None) -> str:
    """Where the driver's machine keeps the secret of ``run`` in the store at ``store_url``.

    ``<config>/sparkdbn/keys/<run>-<digest>.key``; the digest covers the canonical store URL
    and the run, so ``/data/store``, ``file:///data/store`` and a symbolic link to it share a key
    and two stores do not.

    Parameters
    ----------
    run : str
        The run id.
    store_url : str
        The store the run lives in.
    environ : mapping of str to str, optional
        The environment to read ``XDG_CONFIG_HOME`` and ``HOME`` from (default ``os.environ``).
    """
    return _key_paths(run, store_url, os.environ if environ is None else environ)[0]


def _key_paths(run: str, store_url: str, environ: Mapping[str, str]) -> list[str]:
    """Where a key of ``run`` may be kept: filed by the store's real path (symbolic links resolved), then by
    the path as given (how keys were filed before; a local store reached through a link)."""
    parsed = storage.parse_store_url(store_url)
    canonical = [parsed.url]
    if parsed.kind == "local":
        canonical.insert(0, "file://" + os.path.realpath(parsed.root))
    return list(dict.fromkeys(_key_file(run, url, environ) for url in canonical))


def _key_file(run: str, canonical_url: str, environ: Mapping[str, str]) -> str:
    digest = storage.sha256_hex(f"{canonical_url}\n{run}".encode("utf-8"))[:16]
    return os.path.join(_keys_folder(environ), f"{_readable(run)}-{digest}.key")


def _keys_folder(environ: Mapping[str, str]) -> str:
    return os.path.join(_config_home(environ), "sparkdbn", "keys")


def _readable(run: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in run)[:_RUN_CHARS_IN_FILE_NAME]


def _same_run_keys(run: str, environ: Mapping[str, str]) -> list[str]:
    """Key files kept here for a run of this name in some store (its digest names the store, not readably)."""
    folder = _keys_folder(environ)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    prefix = _readable(run) + "-"
    return sorted(os.path.join(folder, name) for name in names
                  if name.startswith(prefix) and name.endswith(".key") and len(name) == len(prefix) + 16 + 4)


def _read_secret(path: str, *, private: bool) -> bytes:
    """The secret in file ``path`` (trailing whitespace removed); ``private``: refuse a file others can read."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            secret = handle.read(_MAX_SECRET_FILE_BYTES + 1)
    except OSError as error:
        raise RunKeyError(f"cannot read the key file {path}: {error.strerror or error}") from error
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        if private:
            raise RunKeyError(f"the key file {path} is accessible to other users (mode {stat.filemode(info.st_mode)}); "
                              f"run: chmod 600 {path}")  # fmt: skip
        logger.warning("the key file %s is readable by other users (mode %s); chmod 600 it", path,
                       stat.filemode(info.st_mode))  # fmt: skip
    if len(secret) > _MAX_SECRET_FILE_BYTES:
        raise RunKeyError(f"the key file {path} is larger than {_MAX_SECRET_FILE_BYTES} bytes: not a key file")
    secret = secret.rstrip(b" \t\r\n")
    if len(secret) < storage.MIN_KEY_BYTES:
        raise RunKeyError(f"the key file {path} holds {len(secret)} byte(s); at least {storage.MIN_KEY_BYTES} are "
                          "needed, e.g. head -c 32 /dev/urandom | xxd -p -c 64 > FILE")  # fmt: skip
    return secret


def _private_directory(path: str) -> None:
    """Create ``path`` (and ``sparkdbn/`` above it) with mode 0700, and make sure they have it."""
    parent = os.path.dirname(path)
    for folder in (parent, path):
        os.makedirs(folder, mode=0o700, exist_ok=True)
        os.chmod(folder, 0o700)


def _create_secret(path: str) -> bytes:
    """Generate a secret into ``path`` (mode 0600) unless another fit just did; returns the one stored."""
    _private_directory(os.path.dirname(path))
    secret = secrets.token_hex(32).encode("ascii")
    temporary = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(secret + b"\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)  # publishes the complete file, never over an existing one
        except FileExistsError:
            logger.info("another fit stored the key of this run first: %s", path)
            return _read_secret(path, private=True)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
    return secret


def resolve_run_key(
    run: str,
    store_url: str,
    *,
    key: bytes | str | None = None,
    key_file: str | None = None,
    spark_conf: Mapping[str, str] | None = None,
    create: bool = True,
    environ: Mapping[str, str] | None = None,
) -> RunKey:
    """Find (or, on a first fit, make) the key of ``run`` in the store at ``store_url``.

    Parameters
    ----------
    run : str
        The run id: the key is derived per run.
    store_url : str
        The store the run lives in (only names the stored key; the store is not touched).
    key : bytes or str, optional
        A secret given directly (a str is taken as UTF-8); at least 16 bytes.
    key_file : str, optional
        A file holding the secret.  Give ``key`` or ``key_file``, not both.
    spark_conf : mapping of str to str, optional
        Spark's configuration; its ``spark.authenticate.secret`` is used when set.
    create : bool
        Generate and keep a secret on this machine when none is found (a first fit).  With
        False (a resume), finding none is an error.
    environ : mapping of str to str, optional
        The environment to read (default ``os.environ``).

    Returns
    -------
    RunKey
        The run's 32-byte key and the source of its secret (see the module notes for the order).

    Raises
    ------
    RunKeyError
        A secret that is too short or unreadable, or none at all when ``create`` is false; the
        message says where it looked and how to provide one.
    """
    environ = os.environ if environ is None else environ
    if key is not None and key_file is not None:
        raise RunKeyError("give the run key as key or as key_file, not both")
    if key is not None:
        master = key.encode("utf-8") if isinstance(key, str) else bytes(key)
        return RunKey(derive_run_key(master, run), "the key given")
    if key_file is not None:
        return RunKey(derive_run_key(_read_secret(key_file, private=False), run), f"key file {key_file}")
    if environ.get(ENV_KEY_FILE):
        path = environ[ENV_KEY_FILE]
        return RunKey(derive_run_key(_read_secret(path, private=False), run), f"key file {path} ({ENV_KEY_FILE})")
    if environ.get(ENV_KEY):
        try:
            return RunKey(derive_run_key(environ[ENV_KEY].encode("utf-8"), run), f"environment variable {ENV_KEY}")
        except RunKeyError as error:
            raise RunKeyError(f"{ENV_KEY}: {error}") from error
    if spark_conf is not None and spark_conf.get(SPARK_SECRET_CONF):
        try:
            return RunKey(derive_run_key(spark_conf[SPARK_SECRET_CONF].encode("utf-8"), run), SPARK_SECRET_CONF)
        except RunKeyError as error:
            raise RunKeyError(f"{SPARK_SECRET_CONF}: {error}") from error
    paths = _key_paths(run, store_url, environ)
    path = paths[0]
    for kept in paths:
        if os.path.exists(kept):
            return RunKey(derive_run_key(_read_secret(kept, private=True), run),
                          f"key file {kept} (kept from the first fit)")
    if not create:
        others = _same_run_keys(run, environ)
        elsewhere = (f" Kept here for a run named {run!r} of another store URL (a store moved keeps its key under "
                     f"its old URL): {', '.join(others[:5])}; point {ENV_KEY_FILE} at the one of this "
                     "store") if others else ""
        raise RunKeyError(
            f"no key for run {run!r} of the store {store_url}: none was given (in Python: key=, key_file=), neither "
            f"{ENV_KEY_FILE} nor {ENV_KEY} is set, {SPARK_SECRET_CONF} is not set, and there is no {path} "
            f"(it is written on the machine where the run was first trained).  Provide the run's secret: "
            f"copy that file here, or point {ENV_KEY_FILE} at a copy of it (docs/store.md, Run keys).{elsewhere}"
        )
    try:
        secret = _create_secret(path)
    except OSError as error:
        raise RunKeyError(f"cannot keep a new key for run {run!r} at {path}: {error}; set {ENV_KEY_FILE} to a "
                          "private file holding a secret instead") from error  # fmt: skip
    logger.info("run %s: its key's secret is kept at %s (back it up to resume elsewhere)", run, path)
    return RunKey(derive_run_key(secret, run), f"key file {path} (generated)")
