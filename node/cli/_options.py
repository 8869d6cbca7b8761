"""What the ``sparkdbn`` command line reads besides its flags: config files (with a schema), ``--conf``.

* A config file (JSON or YAML) is a mapping of settings (the long flags' names, ``-`` or ``_``),
  plus ``settings:`` (fields of :class:`node.TrainingSettings`) and ``spark_conf:`` (Spark settings).
  One file serves a run's commands: each takes the keys it knows and skips those only other commands
  take (``evaluate`` skips ``train``'s ``epochs``), and ``run_id`` and ``run`` both name the run.  A key
  no command takes is a :class:`UsageError` naming the closest known one, never silently ignored.
* ``--conf key=value`` (repeatable) are Spark settings, as spark-submit takes them.
* :class:`OneLineParser` reports argparse's own mistakes (an unknown flag, a missing value) as
  one line ``sparkdbn <command>: ...`` with exit status 2, like every other mistake.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import logging
import sys
from typing import Any, Iterable, NoReturn, Sequence

from rbm import read_config

from .._errors import error_chain
from ..driver import TrainingSettings

__all__ = ["UsageError", "Interrupted", "Terminated", "is_interrupt", "interrupt_word", "OneLineParser", "load_config",
           "without_overridden_alternatives", "check_keys", "parse_spark_conf", "closest"]

logger = logging.getLogger(__name__)

#: Keys of a config file that are not flags of the command.
CONFIG_SECTIONS = ("settings", "spark_conf")

#: The keys that name the run in a config file: ``train``'s ``run_id``, the other commands' ``run``.
RUN_KEYS = ("run_id", "run")

#: Settings that exclude each other: a flag for one overrides a config file's other (``predict --input`` and a
#: file's ``dataset:``), as a flag overrides the file's own value.
ALTERNATIVES = (("input", "dataset"), ("input", "recipe"))


class UsageError(Exception):
    """A mistake in what the command was asked: reported as one line, exit status 2, before Spark starts."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, with what to do next (``train``: how to resume the run): reported as one line, exit status 130."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill PID``, a scheduler stopping the job), raised in the main thread: handled as Ctrl-C is (the
    run record says "failed", the lease is released), reported as one line, exit status 143."""


def interrupt_word(error: BaseException | None) -> str:
    """How the command was stopped, for its one line: ``terminated (SIGTERM)`` where ``error`` is or was raised
    while handling a :class:`Terminated`, else ``interrupted`` (Ctrl-C).

    Parameters
    ----------
    error : BaseException or None
        The exception; its causes and contexts are looked at too.
    """
    return "terminated (SIGTERM)" if any(isinstance(link, Terminated) for link in error_chain(error)) else "interrupted"


def is_interrupt(error: BaseException | None) -> bool:
    """Whether ``error`` is a Ctrl-C, or was raised while one was handled: py4j raises an error of its own where
    it cannot cancel the call to the JVM that the KeyboardInterrupt interrupted, or logs the error of the call
    PySpark's Ctrl-C handler makes inside it (a "reentrant call" on the connection).

    Parameters
    ----------
    error : BaseException or None
        The exception; its causes and contexts are looked at too.
    """
    return any(isinstance(link, KeyboardInterrupt) or (isinstance(link, RuntimeError)
                                                       and str(link).startswith("reentrant call"))
               for link in error_chain(error))


def closest(name: str, known: Iterable[str]) -> str | None:
    """The known name most like ``name`` (difflib), or None when none is close."""
    found = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return found[0] if found else None


def check_keys(keys: Iterable[str], known: Iterable[str], where: str) -> None:
    """Raise :class:`UsageError` for the first key not in ``known``, naming the closest known key."""
    known = set(known)
    for key in keys:
        if key not in known:
            guess = closest(key, known)
            hint = f"; did you mean {guess!r}?" if guess else f"; known keys: {', '.join(sorted(known))}"
            raise UsageError(f"{where}: unknown key {key!r}{hint}")


def load_config(path: str | None, known: Iterable[str] | None = None, elsewhere: Iterable[str] = (), *,
                say_skipped: bool = False) -> dict[str, Any]:
    """A JSON (``.json``) or YAML (``.yaml``/``.yml``) mapping of settings, ``{}`` without a path.

    ``known`` are the command's setting names (``_`` spelling); with it, every key is checked,
    as are the keys of ``settings:`` (against :class:`node.TrainingSettings`) and the type of
    ``spark_conf:``.  Keys in ``elsewhere`` (other commands' settings) are skipped, not refused, and the run's
    name is the command's own key whichever of :data:`RUN_KEYS` the file uses.

    Parameters
    ----------
    path : str or None
        The file (``--config``); None or empty: no file.
    known : iterable of str, optional
        The command's setting names; None takes every key unchecked.
    elsewhere : iterable of str
        The setting names of the other commands, which the file may hold for them.
    say_skipped : bool
        Warn, naming them, of the keys skipped (a command that makes something: ``train``'s file holding
        ``input:`` may mean ``dataset:``).
    """
    if not path:
        return {}
    try:
        config = read_config(path)
    except (OSError, ValueError) as error:
        reason, lead = str(error), f"cannot parse config {path!r} as "  # the file is named once, first
        reason = f"not valid {reason[len(lead):]}" if reason.startswith(lead) else reason
        raise UsageError(f"--config {path}: {reason}") from error
    if not isinstance(config, dict):
        raise UsageError(f"--config {path}: expected a mapping of settings, got {type(config).__name__}")
    config = {str(key).replace("-", "_"): value for key, value in config.items()}
    if known is not None:
        known = set(known)
        check_keys(config, known | set(elsewhere) | set(CONFIG_SECTIONS) | set(RUN_KEYS), f"--config {path}")
        config = _with_run_key(config, known, path)
        skipped = [key for key in config if key not in known and key not in CONFIG_SECTIONS]
        if skipped and say_skipped:
            logger.warning("--config %s: skipped %s, which other commands take, not this one", path, ", ".join(skipped))
        config = {key: value for key, value in config.items() if key not in skipped}
        settings = config.get("settings")
        if settings is not None:
            if not isinstance(settings, dict):
                raise UsageError(f"--config {path}: 'settings' must be a mapping of training settings")
            fields = {field.name for field in dataclasses.fields(TrainingSettings)}
            check_keys(settings, fields, f"--config {path}: settings")
        spark_conf = config.get("spark_conf")
        if spark_conf is not None and not isinstance(spark_conf, dict):
            raise UsageError(f"--config {path}: 'spark_conf' must be a mapping of Spark settings (key: value)")
    return config


def _with_run_key(config: dict[str, Any], known: set[str], path: str) -> dict[str, Any]:
    """``config`` with the run's name under the command's own key of :data:`RUN_KEYS` (where it takes one)."""
    given = {key: config[key] for key in RUN_KEYS if config.get(key) is not None}
    own = next((key for key in RUN_KEYS if key in known), None)
    if not given or own is None:
        return config
    if len(set(map(str, given.values()))) > 1:
        raise UsageError(f"--config {path}: run_id {given['run_id']!r} and run {given['run']!r} name two runs; "
                         "give one")
    rest = {key: value for key, value in config.items() if key not in RUN_KEYS}
    return {**rest, own: next(iter(given.values()))}


def without_overridden_alternatives(config: dict[str, Any], flags: Iterable[str]) -> dict[str, Any]:
    """``config`` without the settings that a flag for their alternative overrides (:data:`ALTERNATIVES`).

    Parameters
    ----------
    config : dict
        A config file's settings (:func:`load_config`).
    flags : iterable of str
        The settings given as flags.
    """
    flags = set(flags)
    overridden = {other for pair in ALTERNATIVES for flag, other in (pair, pair[::-1]) if flag in flags}
    return {key: value for key, value in config.items() if key not in overridden or key in flags}


def parse_spark_conf(items: Sequence[str] | None) -> dict[str, str]:
    """``["spark.ui.port=4050", ...]`` -> ``{"spark.ui.port": "4050"}``; a malformed item is a UsageError."""
    conf: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf {item!r}: expected key=value, e.g. --conf spark.ui.port=4050")
        conf[key.strip()] = value
    return conf


class OneLineParser(argparse.ArgumentParser):
    """argparse with abbreviations off and its mistakes reported as one line (exit status 2)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False  # `--conf` must never be taken for `--config`, nor `--epoch` for `--epochs`
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            flags = [text for text in message.split(":", 1)[1].split() if text.startswith("--")]
            known = [option for action in self._actions for option in action.option_strings]
            guess = closest(flags[0].split("=")[0], known) if flags else None
            if guess:
                message += f" (did you mean {guess}?)"
        print(f"{self.prog}: {message}", file=sys.stderr)
        raise SystemExit(2)
