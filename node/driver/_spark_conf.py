"""``spark.sparkdbn.*``: every :class:`~node.TrainingSettings` field as a Spark conf key.

``spark-submit --conf spark.sparkdbn.advertise_host=10.0.0.5 --conf spark.sparkdbn.epochs=3 ...``
sets the fields a program (or the CLI) leaves at their defaults: an explicit argument wins over
the conf, the conf over the default.  Keys are the fields' snake_case names; the camelCase
spelling Spark users write (``spark.sparkdbn.advertiseHost``) is accepted too.  Values are text,
converted to the field's type: ``int``/``float``, booleans (``true``/``false``/``1``/``0``/
``yes``/``no``), ``none`` (or an empty value) for optional fields, JSON for maps
(``spark.sparkdbn.epochs={"rbm0": 2, "finetune": 10}``).  A value that does not convert, or an
unknown ``spark.sparkdbn.*`` key, is a :class:`SparkConfError` naming the key.
"""

from __future__ import annotations

import dataclasses
import json
import re
import types
import typing
from typing import Any, Iterable, Mapping

from .._errors import NodeError

__all__ = ["PREFIX", "SparkConfError", "settings_from_spark_conf", "apply_spark_conf", "explicit_fields"]

PREFIX = "spark.sparkdbn."
_TRUE, _FALSE, _NONE = ("true", "1", "yes", "on"), ("false", "0", "no", "off"), ("none", "null", "")
#: Fields that are no text: data, not settings.
_NOT_FROM_CONF = ("validation_data",)


class SparkConfError(NodeError, ValueError):
    """A ``spark.sparkdbn.*`` key that names no setting, or whose value does not convert."""


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def settings_from_spark_conf(conf: Iterable[tuple[str, str]] | Mapping[str, str], settings_type: type) -> dict[str, Any]:
    """The ``spark.sparkdbn.*`` entries of ``conf`` as field values of ``settings_type``.

    Parameters
    ----------
    conf : mapping or iterable of (key, value)
        E.g. ``spark.sparkContext.getConf().getAll()``.
    settings_type : dataclass type
        :class:`~node.TrainingSettings`.

    Raises
    ------
    SparkConfError
        Naming the key: an unknown field, or a value not of the field's type.
    """
    items = conf.items() if isinstance(conf, Mapping) else conf
    fields = {field.name: field for field in dataclasses.fields(settings_type)}
    hints = typing.get_type_hints(settings_type)
    values: dict[str, Any] = {}
    for key, text in items:
        if not key.startswith(PREFIX):
            continue
        name = _snake(key[len(PREFIX):])
        if name not in fields or name in _NOT_FROM_CONF:
            known = ", ".join(sorted(set(fields) - set(_NOT_FROM_CONF)))
            raise SparkConfError(f"Spark conf {key}: no such sparkdbn setting{' from conf' if name in fields else ''} "
                                 f"(settings: {known})")
        if name in values:
            raise SparkConfError(f"Spark conf {key}: {name} is set twice (snake_case and camelCase)")
        try:
            values[name] = _convert(str(text), hints[name])
        except ValueError as error:
            raise SparkConfError(f"Spark conf {key}={text!r}: {error}") from error
    return values


def explicit_fields(settings: Any, overrides: Iterable[str] = ()) -> set[str]:
    """Fields a caller set: those in ``overrides`` and those that differ from the dataclass's defaults."""
    default = type(settings)()
    return set(overrides) | {field.name for field in dataclasses.fields(settings)
                             if field.name not in _NOT_FROM_CONF and getattr(settings, field.name) != getattr(default, field.name)}


def apply_spark_conf(settings: Any, conf: Iterable[tuple[str, str]] | Mapping[str, str], explicit: Iterable[str]) -> Any:
    """``settings`` with the ``spark.sparkdbn.*`` values of every field not in ``explicit``, validated.

    Raises
    ------
    SparkConfError
        A key or value that does not convert, or settings that do not validate (the message
        names the keys that were applied).
    """
    from_conf = {name: value for name, value in settings_from_spark_conf(conf, type(settings)).items()
                 if name not in set(explicit)}
    if not from_conf:
        return settings
    updated = dataclasses.replace(settings, **from_conf)
    try:
        updated.validate()
    except ValueError as error:
        keys = ", ".join(f"{PREFIX}{name}" for name in sorted(from_conf))
        raise SparkConfError(f"training settings from Spark conf ({keys}): {error}") from error
    return updated


def _convert(text: str, hint: Any) -> Any:
    """``text`` as a value of type ``hint`` (``ValueError`` saying what was expected)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    stripped = text.strip()
    if origin in (typing.Union, types.UnionType):
        if type(None) in args and stripped.lower() in _NONE:
            return None
        options = [arg for arg in args if arg is not type(None)]
        # Most specific first: a bool word is no string, a number no map.
        order = {bool: 0, int: 1, float: 2, dict: 3, str: 4}
        options.sort(key=lambda option: order.get(typing.get_origin(option) or option, 5))
        for option in options:
            try:
                return _convert(text, option)
            except ValueError:
                continue
        raise ValueError("expected " + " or ".join(_name(option) for option in options)
                         + (" or none" if type(None) in args else ""))
    if hint is bool:
        if stripped.lower() in _TRUE:
            return True
        if stripped.lower() in _FALSE:
            return False
        raise ValueError("expected a boolean (true/false)")
    if hint is int:
        try:
            return int(stripped)
        except ValueError:
            raise ValueError("expected an integer") from None
    if hint is float:
        try:
            return float(stripped)
        except ValueError:
            raise ValueError("expected a number") from None
    if hint is dict or origin is dict:
        try:
            value = json.loads(stripped)
        except json.JSONDecodeError:
            raise ValueError('expected a JSON object, e.g. {"rbm0": 2}') from None
        if not isinstance(value, dict):
            raise ValueError('expected a JSON object, e.g. {"rbm0": 2}')
        if args and args[1] is int and not all(isinstance(item, int) and not isinstance(item, bool)
                                               for item in value.values()):
            raise ValueError("expected a JSON object of integers")
        return value
    if hint is str or hint is Any:
        return text
    raise ValueError(f"cannot convert to {_name(hint)}")


def _name(hint: Any) -> str:
    origin = typing.get_origin(hint)
    return "a JSON object" if hint is dict or origin is dict else getattr(hint, "__name__", str(hint))
