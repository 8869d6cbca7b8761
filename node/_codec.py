"""The msgpack codec of the driver-executor contract (:mod:`node._contract`): typed dataclasses as plain bytes.

A dataclass goes as ``{"contract": version, "type": name, "fields": {...}}``; a field that holds one
of a union of dataclasses carries its type name too.  Decoding rebuilds the dataclass from its type
hints and refuses, with a :class:`ContractError` naming the field, bytes of another version, another
type, unknown or missing fields, or a value of the wrong type: nothing crossing the process boundary
is unpickled.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Mapping, TypeVar

import msgpack

from ._errors import NodeError

__all__ = ["ContractError", "decode", "encode"]

T = TypeVar("T")


class ContractError(NodeError, ValueError):
    """A task or a report that this side of the contract cannot read (version or fields)."""


def encode(value: Any, *, version: int) -> bytes:
    """msgpack bytes of the dataclass ``value``, tagged with its type name and the contract's ``version``."""
    return msgpack.packb({"contract": version, "type": type(value).__name__,
                          "fields": _plain(value)}, use_bin_type=True)


def decode(data: bytes, cls: type[T], *, version: int) -> T:
    """The ``cls`` instance :func:`encode` made under ``version``, or :class:`ContractError` saying what differs.

    Nothing is unpickled: msgpack gives plain data, and each field is checked against ``cls``'s type
    hints (dataclasses, unions of dataclasses, tuples, maps, str, int, float, bytes, bool, None).
    """
    try:
        envelope = msgpack.unpackb(data, raw=False, strict_map_key=True)
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
        raise ContractError(f"not a sparkdbn {cls.__name__}: {error}") from error
    spoken = envelope.get("contract") if isinstance(envelope, dict) else None
    if spoken != version:
        raise ContractError(f"the driver and this executor speak different sparkdbn contracts ({spoken!r} and "
                            f"{version}): install the same sparkdbn version on the driver and every executor")
    if envelope.get("type") != cls.__name__:
        raise ContractError(f"expected a {cls.__name__}, got a {envelope.get('type')!r}")
    return _build(cls, envelope.get("fields"), cls.__name__)


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        hints = typing.get_type_hints(type(value))
        return {f.name: _tagged(getattr(value, f.name), hints[f.name]) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    return value


def _tagged(value: Any, hint: Any) -> Any:
    """``value`` as plain data; one of a union of contract dataclasses goes as ``{"type": name, "fields": ...}``."""
    if _dataclass_union(hint):
        return {"type": type(value).__name__, "fields": _plain(value)}
    return _plain(value)


def _dataclass_union(hint: Any) -> dict[str, type] | None:
    """The members of a union of dataclasses (e.g. :data:`ModeOptions`) by name; else None."""
    if typing.get_origin(hint) not in (typing.Union, types.UnionType):
        return None
    members = typing.get_args(hint)
    if not all(dataclasses.is_dataclass(member) for member in members):
        return None
    return {member.__name__: member for member in members}


def _build(cls: type[T], fields: Any, where: str) -> T:
    if not isinstance(fields, dict):
        raise ContractError(f"{where}: expected a map of fields, got {type(fields).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    unknown, missing = set(fields) - names, required - set(fields)
    if unknown or missing:
        raise ContractError(f"{where}: fields differ from this executor's sparkdbn (unknown {sorted(unknown)}, "
                            f"missing {sorted(missing)}): install the same version on driver and executors")
    return cls(**{name: _convert(value, hints[name], f"{where}.{name}") for name, value in fields.items()})


def _convert(value: Any, hint: Any, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    members = _dataclass_union(hint)
    if members is not None:
        if not isinstance(value, dict) or value.get("type") not in members:
            kind = value.get("type") if isinstance(value, dict) else type(value).__name__
            raise ContractError(f"{where}: expected one of {sorted(members)}, got {kind!r}")
        return _build(members[value["type"]], value.get("fields"), where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [arg for arg in args if arg is not type(None)]
        errors = []
        for option in options:
            try:
                return _convert(value, option, where)
            except ContractError as error:
                errors.append(str(error))
        raise ContractError(errors[0])
    if hint is Any:
        return value
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise ContractError(f"{where}: expected a list, got {type(value).__name__}")
        return tuple(_convert(item, args[0], where) for item in value)
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise ContractError(f"{where}: expected a map, got {type(value).__name__}")
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint in (str, int, float, bytes, bool) and isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
        return value
    raise ContractError(f"{where}: expected {getattr(hint, '__name__', hint)}, got {type(value).__name__}")
