"""Reading a run after (or while) it trains: its record, metrics, phase results and final model.

Everything in a run's folder is authenticated under the run key, so reading a run needs it too:
:func:`open_run` finds the key where the fit kept it (see :func:`node.resolve_run_key`; never
creating one) and :func:`load_run_model` returns the model of the newest record that says
"done", when the stored file has the sha256 that record names.

A finished run stays available whatever later fits of it do: a refit or resume that is running,
failed, or was interrupted (Ctrl-C, a full disk) writes records of a newer generation, but the
finished fit's record and model stay until a newer fit is done, and readers serve them, saying
that a newer fit is running or failed (:func:`newer_fit_note`).
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

import rbm
import storage

from .._errors import InputDataError, StoreAccessError, TrainingError
from ._keys import resolve_run_key

__all__ = ["RunView", "newer_fit_note", "open_run", "load_run_model", "run_model_arrays", "skipped_records_note"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunView:
    """One run's store handles, its newest record and its newest "done" record, and its lease folder.

    ``record`` is None for a run without one yet; ``done_record`` is None for a run never finished,
    and is ``record`` itself when the newest record says done.  ``skipped_records`` names the entries
    newer than ``record`` that could not be read or are damaged (``"<url>: why"``): while there are
    any, ``record`` may not be where the run stands (:func:`skipped_records_note`).
    """

    run: str
    store_url: str
    store: storage.Store
    runs: storage.RunStore
    weights: storage.WeightStore
    record: dict | None
    done_record: dict | None = None
    lease: storage.LeaseFolder | None = None
    skipped_records: tuple[str, ...] = ()


def open_run(store_url: str, run: str, *, key: bytes | None = None, key_file: str | None = None,
             spark_conf: Mapping[str, str] | None = None, retry_timeout_s: float = 30.0) -> RunView:
    """Open ``run`` in the store at ``store_url`` for reading.

    Raises
    ------
    StoreAccessError
        The store cannot be read.
    RunKeyError
        No key for the run was found (it says where it looked).
    TrainingError
        The run's record does not verify under the key found (a wrong key, or a forged record).
    """
    try:
        store = storage.open_store(store_url, retry_timeout_s=retry_timeout_s)
        exists = store.exists(f"runs/{run}")
    except storage.StoreError as error:
        raise StoreAccessError(f"cannot read run {run!r} from the store {store_url!r}: {error}") from error
    if not exists:
        raise InputDataError(f"there is no run {run!r} in the store {store_url!r}: check the run id and the store URL")
    run_key = resolve_run_key(run, store_url, key=key, key_file=key_file, spark_conf=spark_conf, create=False).key
    runs, weights = storage.RunStore(store, run, run_key), storage.WeightStore(store, run, run_key)
    try:
        record, skipped = runs.read_record_and_skipped()
        done = record if (record or {}).get("status") == "done" else (runs.read_done_record() if record else None)
    except storage.AuthenticationError as error:
        raise TrainingError(f"run {run!r} cannot be read with this key: {error}") from error
    except storage.StoreError as error:
        raise StoreAccessError(f"cannot read run {run!r} from the store {store_url!r}: {error}") from error
    return RunView(run, store_url, store, runs, weights, record, done, storage.LeaseFolder(store, run, run_key),
                   skipped)


def skipped_records_note(view: RunView) -> str | None:
    """When a newer record entry than the one read could not be read: what is wrong and where; else None.

    Parameters
    ----------
    view : RunView
        The run as :func:`open_run` read it.
    """
    if not view.skipped_records:
        return None
    status = (view.record or {}).get("status", "no record")
    more = f" (and {len(view.skipped_records) - 1} more)" if len(view.skipped_records) > 1 else ""
    return (f"run {view.run!r}: its newest record entry cannot be read, so where the run stands is unknown (it may "
            f"have finished): {view.skipped_records[0]}{more}; the newest readable record says {status!r}. Restore "
            "that file from a backup, or fit again with the same run id to go on from the newest readable record")


def newer_fit_note(view: RunView) -> str | None:
    """When the served (newest done) model is not the newest record's: what the newer fit is doing; else None."""
    record, done = view.record or {}, view.done_record
    if done is None or record is done or record.get("status") == "done":
        return None
    status = record.get("status", "unknown")
    error = f": {str(record['error'])[:300]}" if record.get("error") else ""
    what = {"running": "is running (or was interrupted)", "failed": f"failed{error}"}.get(
        str(status), f"stopped with status {status!r}")
    return (f"run {view.run!r}: a newer fit of this run {what}; the model of the last finished fit (finished "
            f"{_when(done.get('finished'))}) is served")


def load_run_model(view: RunView) -> Any:
    """The run's final model, once the record says done and the file has the sha256 it names.

    Raises
    ------
    TrainingError
        The run is not done, or its model file is missing or not the one the record names.
    """
    with tempfile.TemporaryDirectory(prefix="sparkdbn-model-") as folder:
        path = os.path.join(folder, "model.npz")
        with open(path, "wb") as handle:
            handle.write(_verified_model_bytes(view))
        return _with_staged_class_names(rbm.load_model(path), view.done_record or {})


def _with_staged_class_names(model: Any, record: Mapping[str, Any]) -> Any:
    """A model of a run that trained on staged class names before they reached the model: it learned their
    indices ``0 .. k-1`` (the record's ``classes``); it is given the names the dataset's meta says they stand
    for, as a run trained now has them.  Any other model as it is."""
    source, recorded = str((record.get("data") or {}).get("source") or ""), record.get("classes")
    classes = getattr(model, "classes_", None)
    if not source.startswith("dataset ") or classes is None or recorded != list(range(len(classes))):
        return model
    try:
        named = storage.open_dataset(source[len("dataset "):]).classes
    except storage.StoreError:  # the dataset is gone: nothing says what the indices stand for
        return model
    if named is not None and len(named) == len(classes) and np.array_equal(classes, np.arange(len(classes))):
        model.classes_ = named
    return model


def run_model_arrays(view: RunView) -> dict[str, np.ndarray]:
    """The named arrays of the run's verified final model file, without building the model."""
    with np.load(io.BytesIO(_verified_model_bytes(view)), allow_pickle=False) as data:
        return {name: data[name] for name in data.files if not name.startswith("__")}


def _verified_model_bytes(view: RunView) -> bytes:
    record = view.done_record or {}
    model = record.get("model") if isinstance(record.get("model"), dict) else None
    if record.get("status") != "done" or model is None:
        status = (view.record or {}).get("status", "unknown")
        unreadable = skipped_records_note(view)
        if unreadable is not None:  # the newest record may say done: neither "still training" nor "failed" is known
            raise TrainingError(f"{unreadable} (no finished model among the readable records)")
        if view.record is None or status == "running":  # a fit is training it, or its driver stopped without a word
            where = f"status {status!r}" if view.record else "no record yet"
            raise TrainingError(f"run {view.run!r} has no finished model in {view.store_url} yet: it is still "
                                f"training ({where}; `sparkdbn status --run {view.run}` says where it stands), or "
                                "its driver stopped before it finished -- then fit again with the same run id to "
                                "finish it")
        raise TrainingError(f"run {view.run!r} has no finished model in {view.store_url} (status {status!r}); finish "
                            "it by fitting again with the same run id")
    for note in (newer_fit_note(view), skipped_records_note(view)):
        if note is not None:
            logger.warning("%s", note)
    try:
        payload = view.store.read_bytes(model["path"], max_bytes=_model_size_bound(model), stat_first=True)
    except storage.FileTooLargeError as error:
        raise TrainingError(f"run {view.run!r}: the model file is not the one its record names: {error}") from error
    except storage.StoreError as error:
        newer = _newer_done(view, model["path"]) if isinstance(error, storage.StoreNotFoundError) else None
        if newer is not None:
            logger.info("run %s: a newer fit finished while its model was read, and removed %s; serving the newer "
                        "fit's model", view.run, model["path"])
            return _verified_model_bytes(newer)
        raise TrainingError(f"run {view.run!r}: its model {model['path']} cannot be read: {error}") from error
    if storage.sha256_hex(payload) != model["sha256"]:
        raise TrainingError(f"run {view.run!r}: the model file {model['path']} is not the one its record names "
                            "(sha256 differs): it was changed after the run finished")
    return payload


def _model_size_bound(model: Mapping[str, Any]) -> int:
    """The most bytes the record's model may take: the size it records, else (a record written before records kept
    it) the store's cap for files whose size nothing recorded."""
    size = model.get("size_bytes")
    if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
        return size
    return storage.UNRECORDED_FILE_MAX_BYTES


def _newer_done(view: RunView, path: str) -> RunView | None:
    """``view`` read again when a fit finished since and named another model than ``path``; else None.

    A fit that finishes removes the models of earlier generations (their records no longer name them),
    so a reader that read the run before it finished may find the model it was told of gone.
    """
    try:
        done = view.runs.read_done_record()
    except storage.StoreError:
        return None
    model = (done or {}).get("model")
    if not isinstance(model, dict) or model.get("path") == path:
        return None
    return dataclasses.replace(view, record=done, done_record=done)


def _when(timestamp: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(timestamp)))
    except (TypeError, ValueError):
        return "at an unknown time"
