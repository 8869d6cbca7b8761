"""Hyperparameter checks and JSON specs shared by :class:`~rbm.RBM` and :class:`~rbm.DBN`.

Checks run at fit/initialize time (``__init__`` only stores, as scikit-learn requires)
and raise a ``ValueError`` that names the hyperparameter and the accepted range.
"""

from __future__ import annotations

import json
import math
import os
from numbers import Integral, Real
from typing import Any, Mapping

import numpy as np
import yaml

from ._model import read_model_file

__all__ = [
    "check_integer",
    "check_number",
    "check_learning_rate_scale",
    "spec_from_params",
    "params_from_spec",
    "read_config",
    "SpecConstructors",
]


def check_integer(name: str, value: Any, low: int) -> None:
    """``value`` must be an integer (not a bool) >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def check_number(name: str, value: Any, low: float, high: float = math.inf, *,
                 low_open: bool = False, high_open: bool = True) -> None:
    """``value`` must be a finite real number in the interval from ``low`` to ``high``."""
    ok = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be a number in {interval}, got {value!r}")


def check_learning_rate_scale(factor: Any) -> float:
    """The factor of ``set_learning_rate_scale``: a finite number > 0, as a float."""
    check_number("learning rate scale", factor, 0.0, low_open=True)
    return float(factor)


def spec_from_params(kind: str, params: Mapping[str, Any]) -> dict:
    """A JSON-able spec: ``{"kind": kind, **params}`` with dtype as its name and
    ``random_state`` as an int or None (a Generator has no JSON form; replicas draw fresh seeds)."""
    spec = {"kind": kind, **params}
    spec["dtype"] = np.dtype(spec["dtype"]).name
    state = spec.get("random_state")
    spec["random_state"] = int(state) if isinstance(state, (int, np.integer)) and not isinstance(state, bool) else None
    return spec


def params_from_spec(kind: str, spec: Mapping[str, Any], known: list[str], *, model: str) -> dict:
    """Constructor arguments of class ``model`` from a spec; ``"kind"`` is optional but must match."""
    if spec.get("kind", kind) != kind:
        raise ValueError(f"spec kind is {spec['kind']!r}, expected {kind!r}")
    params = {key: value for key, value in spec.items() if key != "kind"}
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"unknown {model} hyperparameters in spec: {unknown}; known: {sorted(known)}")
    return params


def read_config(path: str | os.PathLike) -> dict:
    """A mapping of hyperparameters from a JSON (``.json``) or YAML (``.yaml``/``.yml``) file."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    if path.endswith((".yaml", ".yml")):
        try:
            spec = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ValueError(f"cannot parse config {path!r} as YAML: {_yaml_problem(error)}") from error
    else:
        try:
            spec = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(f"cannot parse config {path!r} as JSON: line {error.lineno}, column {error.colno}: "
                             f"{error.msg}") from error
    if not isinstance(spec, dict):
        raise ValueError(f"config {path!r} must hold a mapping of hyperparameters, got {type(spec).__name__}")
    return spec


def _yaml_problem(error: yaml.YAMLError) -> str:
    """``"line 3, column 9: mapping values are not allowed here"``: PyYAML's error in one line, without its excerpt."""
    mark = getattr(error, "problem_mark", None)
    if mark is None:
        return str(error).splitlines()[0]
    where = f"line {mark.line + 1}, column {mark.column + 1}: {getattr(error, 'problem', None) or 'not valid YAML'}"
    context, begun = getattr(error, "context", None), getattr(error, "context_mark", None)
    return f"{where} ({context} at line {begun.line + 1})" if context and begun is not None else where


class SpecConstructors:
    """Mixin: ``from_spec``, ``from_config`` and ``load`` for an estimator whose spec kind is ``_KIND``.

    Lists in a spec become tuples for the hyperparameters named in ``_TUPLE_PARAMS``
    (JSON has no tuples), so a model rebuilt from its spec has the same ``get_params``.
    """

    _KIND: str = ""
    _TUPLE_PARAMS: tuple[str, ...] = ()

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> Any:
        """An untrained model from a spec dict (as written by ``to_spec``; ``"kind"`` optional)."""
        params = params_from_spec(cls._KIND, spec, cls._get_param_names(), model=cls.__name__)  # type: ignore[attr-defined]
        for name in cls._TUPLE_PARAMS:
            if isinstance(params.get(name), list):
                params[name] = tuple(params[name])
        return cls(**params)

    @classmethod
    def from_config(cls, path: str | os.PathLike) -> Any:
        """An untrained model from a JSON (``.json``) or YAML (``.yaml``/``.yml``) spec file."""
        return cls.from_spec(read_config(path))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Any:
        """A model of this class saved with ``save(path)``: exact weights, same spec (``rbm.load_model``
        reads a model file of any kind; this one refuses another kind's, naming it)."""
        spec, arrays = read_model_file(path)
        if spec.get("kind") != cls._KIND:
            raise ValueError(f"{os.fspath(path)!r} holds a {spec.get('kind')!r} model; {cls.__name__}.load reads "
                             f"{cls._KIND!r} models only (rbm.load_model reads any kind)")
        model = cls.from_spec(spec)
        model._restore(spec, arrays)
        return model
