"""The seam between models and the distributed layer, and model (de)serialization.

Every trainable model (:class:`~rbm.RBM`, :class:`~rbm.DBN`, :class:`~rbm.ConvNet`)
implements :class:`TrainableModel`.  The distributed layer (``actors/``, ``node/``)
only ever talks to a model through it:

* ``to_spec()`` / :func:`model_from_spec` -- hyperparameters as plain JSON, enough to
  build an identical untrained replica in another process;
* ``initialize(n_features, classes)`` -- allocate parameters for an input width
  (or input shape) and the class labels (a count ``k`` for ``0 .. k - 1``, or the
  labels themselves), without training; the classifiers keep them in ``classes_``;
* ``phases()`` -- the ordered training phases, e.g. ``["rbm0", "rbm1", "finetune"]``;
* ``input_bounds()`` -- the range every input value must lie in (``(0, 1)`` for Bernoulli
  visible units), or None: the driver checks the data against it before training;
* ``parameters(phase)`` / ``set_parameters(params)`` -- named host (numpy) copies of
  the weights that are merged between nodes; names are unique across the whole model
  (``"rbm0.W"``, ``"conv1.b"`` ...), ``phase=None`` means all of them;
* ``train_partition(X, y, phase, rng)`` -- one pass over a partition in minibatches,
  ``y`` as class *indices* ``0 .. len(classes_) - 1`` (the driver maps labels to indices),
  returning metrics ``{"samples": int, "seconds": float, "loss": float}`` (``loss`` is
  the reconstruction error for RBM phases, the cross-entropy for supervised ones); an
  empty partition is skipped (``samples == 0``);
* ``set_learning_rate_scale(factor)`` -- multiply the learning rate of every following
  update (not a hyperparameter: not in the spec or the saved file);
* ``set_schedule_epoch(epoch)`` (optional: the trainer calls it where a model has it) -- the
  passes over the whole data the model's schedules (learning-rate decay, momentum switch)
  count as done, for the following updates: the trainer's epoch (times the node's learning-rate
  factor), however many partitions an epoch has (see :class:`ScheduleClock`);
* ``set_schedule_plan(planned_epochs, epoch, share)`` (optional, as ``set_schedule_epoch``) --
  where the following ``train_partition`` call stands in the phase's plan: ``share`` of an epoch,
  starting ``epoch`` epochs into ``planned_epochs`` planned ones, so that a model whose ``fit`` shapes
  its steps by the plan (the DBN's fine-tuning anneal and dropout ramp) takes the same steps on
  the nodes (see :class:`ScheduleClock`);
* ``max_learning_rate_factor()`` (optional) -- the largest factor the model's learning rates
  may take from the trainer's scaling rule, or None for the trainer's own cap; past it the
  trainer gives the nodes smaller minibatches instead (an RBM with persistent chains: 1).
* ``takes_outer_step(phase)`` (optional) -- whether the nodes take the default outer step in ``phase``
  (the rule's, where :class:`node.TrainingSettings` names none), or merge it plainly; without it, every
  phase takes the step (the RBMs' contrastive-divergence phases do not; :func:`takes_outer_step`).
* ``spec_for_batch_size(batch_size)`` (optional) -- the spec of a replica that trains in
  minibatches of ``batch_size`` rows, everything else the same (an RBM, and a DBN's persistent
  layers, keep their persistent chains); without it, the spec with ``batch_size`` replaced
  (:func:`spec_for_batch_size`).
"""

from __future__ import annotations

import importlib
import json
import os
import zipfile
import zlib
from typing import Any, Callable, Mapping, NamedTuple, Protocol, runtime_checkable

import numpy as np

from ._backend import to_device, to_host

__all__ = [
    "TrainableModel",
    "register_model",
    "model_spec",
    "check_trainable",
    "model_from_spec",
    "spec_for_batch_size",
    "takes_outer_step",
    "save_model",
    "save_trained",
    "load_model",
    "SPEC_KEY",
    "copy_parameters",
    "empty_partition_metrics",
    "is_empty",
    "MinibatchHook",
    "ScheduleClock",
    "SchedulePlace",
    "print_iteration",
]

SPEC_KEY = "__spec__"
#: The entries of a model file written from the seam (:func:`save_trained`, a model without ``save``):
#: the input ``initialize`` took (a width, or an image's shape) and the class labels.
INPUT_KEY, CLASSES_KEY = "__input__", "__classes__"

#: The spec entry naming the module that registers the spec's ``kind`` (a model of one's own):
#: :func:`model_from_spec` imports it before the lookup, so a process that has not imported it yet
#: (an executor, a resuming driver) finds the class.  Added by :func:`model_spec`.
MODULE_KEY = "module"

_REGISTRY: dict[str, type] = {}

#: The methods of :class:`TrainableModel` a model must have; the optional ones (docstring above) it may lack.
REQUIRED_METHODS = ("to_spec", "initialize", "phases", "input_bounds", "parameters", "set_parameters",
                    "train_partition", "set_learning_rate_scale", "set_minibatch_hook")


@runtime_checkable
class TrainableModel(Protocol):
    """What the distributed trainer needs from a model."""

    def to_spec(self) -> dict: ...

    def initialize(self, n_features: Any, classes: Any = None) -> "TrainableModel": ...

    def phases(self) -> list[str]: ...

    def input_bounds(self) -> "tuple[float, float] | None": ...

    def parameters(self, phase: str | None = None) -> dict[str, np.ndarray]: ...

    def set_parameters(self, params: Mapping[str, np.ndarray]) -> None: ...

    def train_partition(self, X: np.ndarray, y: np.ndarray | None, phase: str, rng: np.random.Generator) -> dict: ...

    def set_learning_rate_scale(self, factor: float) -> None: ...

    def set_minibatch_hook(self, hook: "Callable[[], None] | None") -> None: ...


class MinibatchHook:
    """``set_minibatch_hook``: a callable ``train_partition`` calls after every minibatch update.

    Not a hyperparameter (not in ``get_params``, the spec or the saved file): the distributed
    trainer uses it to take in a peer's progress as soon as it arrives, in the middle of a
    partition.  The hook may change the model's weights in place (``set_parameters``); the
    optimizer state, the schedule and the minibatch order stay as they are.
    """

    _minibatch_hook: "Callable[[], None] | None" = None

    def set_minibatch_hook(self, hook: "Callable[[], None] | None") -> None:
        """Call ``hook()`` after every minibatch update from now on (None: stop calling it)."""
        if hook is None:
            self.__dict__.pop("_minibatch_hook", None)
        else:
            self._minibatch_hook = hook

    def _after_minibatch(self) -> None:
        hook = self._minibatch_hook
        if hook is not None:
            hook()


class ScheduleClock:
    """``set_schedule_epoch``: what a model's schedules count as passes done.

    A model's schedules (the DBN's fine-tuning decay ``lr / (1 + decay * t)``, the RBM's momentum
    switch, the ConvNet's ``lr_decay``) count the passes over the data it made itself: in ``fit``
    one per epoch.  The distributed trainer calls ``train_partition`` once per *partition*, and a
    node trains only its share of an epoch: counted per call, an epoch of 16 partitions on 2 nodes
    would advance each node's schedules by 8.  So the trainer sets the clock before every partition
    (:func:`node._scaling.schedule_epoch`), and the schedules run on epochs of the whole data, on any
    number of partitions.  Not a hyperparameter: not in the spec or the saved file.

    ``set_schedule_plan`` adds where a partition stands in the phase's *plan*, for what ``fit`` does
    only because it knows how many passes follow (the DBN's fine-tuning anneal and dropout ramp).
    """

    _schedule_epoch: "float | None" = None
    _schedule_plan: "SchedulePlace | None" = None

    def set_schedule_epoch(self, epoch: "float | None") -> None:
        """Count ``epoch`` passes done (>= 0) in the schedules of every following update (None: the model's own)."""
        if epoch is None:
            self.__dict__.pop("_schedule_epoch", None)
            return
        if isinstance(epoch, bool) or not isinstance(epoch, (int, float, np.integer, np.floating)) \
                or not np.isfinite(epoch) or epoch < 0:
            raise ValueError(f"set_schedule_epoch takes a finite number of epochs >= 0 or None, got {epoch!r}")
        self._schedule_epoch = float(epoch)

    def _schedule_passes(self, own: int) -> float:
        """The passes the schedules count: the set epoch, else ``own`` (the model's own count)."""
        return own if self._schedule_epoch is None else self._schedule_epoch

    def set_schedule_plan(self, planned_epochs: "int | None", epoch: float = 0.0, share: float = 1.0) -> None:
        """Place the following ``train_partition`` calls in the phase's plan (None: no plan, as a model without it).

        ``fit`` knows how many passes follow and shapes its steps by it (the DBN lowers its fine-tuning
        rate to zero over the last planned updates and ramps dropout up over the first epochs);
        ``train_partition`` alone does not.  The distributed trainer says, before each partition,
        that it is ``share`` of an epoch (in (0, 1]) starting ``epoch`` epochs (>= 0) into the
        ``planned_epochs`` (>= 1) of the phase: the partition's minibatch at row ``r`` of ``n`` is
        then at ``epoch + share * r / n`` of the plan, where ``fit``'s minibatch of the same place
        would be.  These are epochs of the fit, not the scaled clock of :meth:`set_schedule_epoch`.
        Only the DBN's fine-tuning uses the place so far; the RBM (whose ``fit`` anneals too) and the
        ConvNet keep it and train as without it.  Not a hyperparameter.
        """
        if planned_epochs is None:
            self.__dict__.pop("_schedule_plan", None)
            return
        self._schedule_plan = SchedulePlace.checked(planned_epochs, epoch, share)


class SchedulePlace(NamedTuple):
    """Where a partition stands in a phase's plan (:meth:`ScheduleClock.set_schedule_plan`)."""

    planned_epochs: int
    epoch: float  # epochs of the plan done when the partition starts
    share: float  # of an epoch, the partition's

    @classmethod
    def checked(cls, planned_epochs: Any, epoch: Any, share: Any) -> "SchedulePlace":
        def number(value: Any) -> bool:
            return not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating)) \
                and bool(np.isfinite(value))

        if not (number(planned_epochs) and float(planned_epochs).is_integer() and planned_epochs >= 1
                and number(epoch) and epoch >= 0 and number(share) and 0 < share <= 1):
            raise ValueError("set_schedule_plan takes planned_epochs >= 1 (an integer), epoch >= 0 and a share of "
                             f"an epoch in (0, 1], got {planned_epochs!r}, {epoch!r}, {share!r}")
        return cls(int(planned_epochs), float(epoch), float(share))

    def progress(self, within_partition: float) -> tuple[float, int]:
        """``(epochs done, planned)`` at ``within_partition`` (in [0, 1)) of the partition: what
        :func:`rbm._updaters.anneal_factor` takes as ``(done, total)`` with ``within_pass`` 0."""
        return self.epoch + self.share * within_partition, self.planned_epochs


def print_iteration(name: str, iteration: int, metrics: str, seconds: float) -> None:
    """Print a model's ``verbose`` progress line to stdout, as scikit-learn's estimators do.

    ``[name] Iteration 3, pseudo-likelihood = -25.39, time = 0.14s``: ``BernoulliRBM``'s line,
    which scripts and scikit-learn's own tests parse.  Only ``fit``-style loops of a model with
    ``verbose`` set call this (never ``train_partition`` on an executor); the library's own
    messages go through :mod:`logging`.  Flushed, so that a pipe shows each line as it comes.
    """
    print(f"[{name}] Iteration {iteration}, {metrics}, time = {seconds:.2f}s", flush=True)


def is_empty(X: Any) -> bool:
    """True for input without rows (an empty partition, which ``train_partition`` skips)."""
    shape = getattr(X, "shape", None)
    return (shape[0] if shape is not None and len(shape) else len(X)) == 0


def empty_partition_metrics() -> dict:
    """The metrics of a skipped, empty partition."""
    return {"samples": 0, "seconds": 0.0, "loss": 0.0}


def copy_parameters(assignments: list[tuple[str, Any, Any]], xp: Any) -> None:
    """Copy host arrays into a model's device arrays, all or nothing.

    Every ``(name, value, target)`` is checked first (same shape, finite values), so a bad
    entry leaves the model untouched; then each ``value`` is copied into ``target`` in place.
    """
    checked = []
    for name, value, target in assignments:
        value = np.asarray(to_host(value))
        if value.shape != target.shape:
            raise ValueError(f"parameter {name!r} has shape {value.shape}, the model expects {target.shape}")
        if not np.all(np.isfinite(value)):
            raise ValueError(f"parameter {name!r} holds NaN or Inf")
        checked.append((value, target))
    for value, target in checked:
        target[...] = to_device(value, xp, target.dtype)


def register_model(kind: str) -> Callable[[type], type]:
    """Class decorator: make ``model_from_spec({"kind": kind, ...})`` build this class.

    The class must provide ``from_spec(spec) -> model`` (a classmethod) and its ``to_spec()`` must
    say ``"kind": kind``.  Define it in a module the executors can import (not ``__main__``): ship it
    with ``spark.submit.pyFiles`` / ``SparkContext.addPyFile`` or install it; the spec the trainer
    sends names that module (:func:`model_spec`), and every process imports it before the lookup.

    Raises
    ------
    ValueError
        ``kind`` is not a non-empty string, or another class holds it already (``rbm``'s own
        kinds included); registering the same class again -- its module re-imported -- is fine.
    TypeError
        The class has no ``from_spec``.
    """
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"register_model takes a non-empty string kind, got {kind!r}")

    def decorate(cls: type) -> type:
        if not callable(getattr(cls, "from_spec", None)):
            raise TypeError(f"register_model({kind!r}): {cls.__qualname__} has no from_spec(spec) classmethod")
        holder = _REGISTRY.get(kind)
        if holder is not None and _class_name(holder) != _class_name(cls):
            raise ValueError(f"register_model({kind!r}): the kind belongs to {_class_name(holder)} already; "
                             f"give {_class_name(cls)} a kind of its own")
        _REGISTRY[kind] = cls
        return cls

    return decorate


def _class_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def check_trainable(model: Any) -> None:
    """Refuse a model without every required method of the seam (:data:`REQUIRED_METHODS`).

    Raises
    ------
    TypeError
        Naming the missing methods.
    """
    missing = [name for name in REQUIRED_METHODS if not callable(getattr(model, name, None))]
    if missing:
        raise TypeError(f"{type(model).__qualname__} cannot be trained by the distributed trainer: it lacks "
                        f"{', '.join(missing)} (see rbm.TrainableModel)")


def model_spec(model: Any) -> dict:
    """``model.to_spec()`` as every other process can build it: with the module that registers its kind
    (:data:`MODULE_KEY`) where that is not one of ``rbm``'s own.

    Raises
    ------
    TypeError
        The model lacks a required method of the seam, its kind is not registered, or its class is
        defined in ``__main__`` (which no executor can import).
    """
    check_trainable(model)
    spec = dict(model.to_spec())
    kind = spec.get("kind")
    cls = _REGISTRY.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise TypeError(f"{type(model).__qualname__}.to_spec() says kind {kind!r}, which no class registers: "
                        f"decorate the class with @rbm.register_model({kind!r}) (known kinds: {sorted(_REGISTRY)})")
    module = cls.__module__
    if module == "__main__":
        raise TypeError(f"model kind {kind!r} ({cls.__qualname__}) is defined in __main__, which the executors "
                        "cannot import: define it in a module of its own and ship that module with "
                        "spark.submit.pyFiles / SparkContext.addPyFile, or install it on every machine")
    if module.partition(".")[0] != __name__.partition(".")[0]:
        spec[MODULE_KEY] = module
    return spec


def model_from_spec(spec: Mapping[str, Any]) -> Any:
    """Build an untrained model from a JSON-able spec (``spec["kind"]`` picks the class).

    A spec naming its module (:data:`MODULE_KEY`, :func:`model_spec`) has it imported first; the
    class's ``from_spec`` gets the spec without that entry.
    """
    spec = dict(spec)
    module = spec.pop(MODULE_KEY, None)
    if module is not None:
        try:
            importlib.import_module(str(module))
        except ImportError as error:
            raise ValueError(f"model kind {spec.get('kind')!r} is defined in module {module!r}, which this "
                             f"process cannot import ({error}): ship it with spark.submit.pyFiles / "
                             "SparkContext.addPyFile, or install it") from error
    kind = spec.get("kind")
    if kind not in _REGISTRY:
        raise ValueError(f"unknown model kind {kind!r} in spec; known kinds: {sorted(_REGISTRY)}")
    return _REGISTRY[kind].from_spec(spec)  # type: ignore[attr-defined]


def spec_for_batch_size(spec: Mapping[str, Any], batch_size: int) -> dict:
    """The spec of a replica of ``spec``'s model that trains in minibatches of ``batch_size`` rows.

    The model's own ``spec_for_batch_size`` where it has one (an RBM keeps its persistent
    chains), else ``spec`` with ``batch_size`` replaced.
    """
    method = getattr(model_from_spec(spec), "spec_for_batch_size", None)
    if method is None:
        return {**spec, "batch_size": int(batch_size)}
    module = {MODULE_KEY: spec[MODULE_KEY]} if MODULE_KEY in spec else {}
    return {**method(batch_size), **module}


def takes_outer_step(model: Any, phase: str) -> bool:
    """Whether the nodes take the outer step in ``model``'s ``phase``: the model's own
    ``takes_outer_step`` where it has one, else True (every phase)."""
    method = getattr(model, "takes_outer_step", None)
    return True if method is None else bool(method(phase))


def save_model(path: str | os.PathLike, spec: Mapping[str, Any], params: Mapping[str, np.ndarray]) -> None:
    """Write one ``.npz``: every named array plus the JSON spec (as bytes) under ``__spec__``.

    Written to a temporary name and renamed, so a crash never leaves half a model behind.
    """
    path = os.fspath(path)
    arrays = {name: np.asarray(value) for name, value in params.items()}
    if SPEC_KEY in arrays:
        raise ValueError(f"parameter name {SPEC_KEY!r} is reserved")
    held = next((name for name, array in arrays.items() if array.dtype == object), None)
    if held is not None:  # np.savez would pickle it, and load_model never unpickles
        raise ValueError(f"cannot save {held!r}: it holds Python objects, which a model file keeps only as a pickle; "
                         "give plain numbers or strings")
    arrays[SPEC_KEY] = np.frombuffer(json.dumps(spec, sort_keys=True).encode(), dtype=np.uint8)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as handle:
        np.savez(handle, **arrays)
    os.replace(tmp, path)


#: The first bytes of a zip archive, as ``np.savez`` writes: anything else is no model file (``np.load``
#: would take it for a pickle and say so).
_ZIP_MAGIC = b"PK\x03\x04"


def read_model_file(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    """The spec and named arrays of a file written by :func:`save_model` (never unpickles).

    Raises
    ------
    ValueError
        Naming the file: it cannot be read, or it is not such a file (not an ``.npz`` archive, no
        spec, a spec that is not a JSON object).
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            archive = handle.read(4) == _ZIP_MAGIC
        if archive:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as error:  # missing, cut short, damaged
        raise ValueError(f"cannot read model file {path!r}: {type(error).__name__}: {error}") from error
    if not archive:
        raise ValueError(f"{path!r} is not a sparkdbn model file (not an .npz archive)")
    if SPEC_KEY not in arrays:
        raise ValueError(f"{path!r} is not a sparkdbn model file (no {SPEC_KEY} entry)")
    try:
        spec = json.loads(arrays.pop(SPEC_KEY).tobytes().decode())
    except ValueError as error:  # not UTF-8, not JSON
        raise ValueError(f"{path!r} is not a sparkdbn model file (its {SPEC_KEY} entry is not JSON: "
                         f"{error})") from error
    if not isinstance(spec, dict):
        raise ValueError(f"{path!r} is not a sparkdbn model file (its {SPEC_KEY} entry is not a JSON object)")
    return spec, arrays


def save_trained(model: Any, path: str | os.PathLike) -> None:
    """Write ``model``'s file, which :func:`load_model` reads back in any process: ``model.save(path)`` for a
    kind of ``rbm``'s own, the seam's file for a model of one's own (whether or not it has a ``save``).

    The seam's file is :func:`save_model`'s with :func:`model_spec` (naming the model's module),
    ``parameters()``, and the input and classes ``initialize`` took, read from the model's
    ``input_shape_`` or ``n_features_in_`` and ``classes_`` (which such a model must keep).
    """
    spec = model_spec(model)
    if MODULE_KEY not in spec:
        model.save(path)
        return
    shape = getattr(model, "input_shape_", None) or getattr(model, "n_features_in_", None)
    if shape is None:
        raise ValueError(f"{type(model).__qualname__} has no save() and no n_features_in_ (or input_shape_): "
                         "initialize it (train it) first, and keep the input it took there")
    classes = getattr(model, "classes_", None)
    arrays = {**model.parameters(None), INPUT_KEY: np.atleast_1d(np.asarray(shape, dtype=np.int64))}
    if classes is not None:
        arrays[CLASSES_KEY] = np.asarray(classes)
    save_model(path, spec, arrays)


def load_model(path: str | os.PathLike) -> Any:
    """Rebuild a model saved with ``model.save(path)`` or :func:`save_trained`: exact weights, same spec.

    Raises
    ------
    ValueError
        Naming the file: it is no model file (:func:`read_model_file`), or it lacks an array its
        model needs -- a file cut short never loads with freshly initialized weights in the gap.
    """
    spec, arrays = read_model_file(path)
    model = model_from_spec(spec)
    names = set(arrays) - {INPUT_KEY, CLASSES_KEY}
    try:
        if INPUT_KEY in arrays:  # the seam's file: initialize, then the parameters
            arrays = dict(arrays)
            shape = tuple(int(d) for d in arrays.pop(INPUT_KEY))
            classes = arrays.pop(CLASSES_KEY, None)
            model.initialize(shape[0] if len(shape) == 1 else shape, classes)
            model.set_parameters(arrays)
        else:
            model._restore(spec, arrays)  # each model knows how to size itself from its arrays
    except KeyError as error:
        raise ValueError(f"model file {os.fspath(path)!r} lacks the array {error.args[0]!r}") from error
    missing = sorted(set(model.parameters(None)) - names)
    if missing:
        raise ValueError(f"model file {os.fspath(path)!r} lacks the arrays {missing} of its {spec.get('kind')!r} model")
    return model
