"""The driver: run records, phases, one Spark job per epoch, progress, consolidation, resume.

:class:`Trainer` trains any model with the trainable seam (see :mod:`rbm._model`) on Spark:

1. checks the store is reachable and prepares the data (validated, cached partitions);
2. writes ``runs/<run>/run.json`` (settings, model spec, phases, status);
3. for every phase in order: broadcasts the phase's start parameters, runs the phase's
   epochs as Spark jobs (``mapPartitionsWithIndex`` over the cached partitions with a function
   that closes over plain values), shows a progress bar and one summary line per epoch, then
   consolidates the nodes' newest snapshots into the phase result that seeds the next phase;
4. saves the final model under the run and marks it done.

Fitting again with the same run id resumes: finished phases are loaded from their
consolidated results, finished epochs are skipped, and nodes start from the newest snapshots.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import secrets
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np

from ._data import PreparedData, prepare_training_data
from ._errors import InputDataError, StoreAccessError, TrainingError, short_error
from ._executor import digest, encode_arrays, release_run_task, train_partition_task
from ._progress import advance, progress_bar, report, run_job, summarize_epoch, summary_line

__all__ = ["TrainingSettings", "Trainer", "train", "default_store_url", "open_checked_store"]

logger = logging.getLogger(__name__)

RECORD_VERSION = 1
#: A temporary file in a finished phase's weight folder older than this is a dead writer's.
STALE_TEMPORARY_S = 60.0


def default_store_url() -> str:
    """``file://`` URL of ``./sparkdbn-store`` (the embedded default store)."""
    return "file://" + os.path.abspath("sparkdbn-store")


@dataclass
class TrainingSettings:
    """How a model is trained on Spark (JSON-able; stored in the run record).

    Attributes
    ----------
    epochs : int or dict of str to int
        Passes over the data per phase; a dict gives per-phase counts (missing phases: ``default_epochs``).
    default_epochs : int
        Epochs of phases a dict ``epochs`` leaves out.
    batch_size : int, optional
        Overrides the model's minibatch size on the nodes.
    partitions : int, optional
        RDD partitions per epoch (default: twice Spark's default parallelism).  Each node
        merges, trains and publishes once per partition.
    merge_alpha : float, optional
        Weight of the peers' mean in a merge (default ``m / (m + 1)`` for ``m`` fresh peers).
    fanout : int, optional
        At most this many peers merged per partition (default: all fresh ones).
    keep_versions : int
        Snapshots kept per node and phase in the store.
    run_id : str, optional
        Names the run in the store; reusing an id resumes that run.  Default: time + random.
    store_url : str, optional
        Default store when :class:`Trainer` gets none.
    seed : int
        Seeds the data shuffle and every node's minibatch order.
    shuffle : bool
        Shuffle numpy rows before splitting them into partitions.
    progress : bool
        Show the progress bar and per-epoch summary lines (stderr).
    anti_entropy_interval_s, peer_refresh_interval_s : float
        How often a node lists the store for missed versions and for new peers.
    store_retry_timeout_s : float
        How long store operations are retried before the store counts as unreachable.
    flush_timeout_s : float
        How long a node waits for its published weights to be written.
    features_col, label_col : str
        DataFrame column names.
    stop_after_phase : str, optional
        End the fit after this phase (status ``"stopped"``); fitting again with the same
        ``run_id`` resumes with the next phase.
    kill_worker_once_at : str, optional
        Test hook ``"<phase>:<epoch>"``: the first node to reach it trains half a partition
        and kills its Python worker with SIGKILL (once per run).
    """

    epochs: int | dict[str, int] = 5
    default_epochs: int = 5
    batch_size: int | None = None
    partitions: int | None = None
    merge_alpha: float | None = None
    fanout: int | None = None
    keep_versions: int = 3
    run_id: str | None = None
    store_url: str | None = None
    seed: int = 0
    shuffle: bool = True
    progress: bool = True
    anti_entropy_interval_s: float = 2.0
    peer_refresh_interval_s: float = 0.5
    store_retry_timeout_s: float = 30.0
    flush_timeout_s: float = 60.0
    features_col: str = "features"
    label_col: str = "label"
    stop_after_phase: str | None = None
    kill_worker_once_at: str | None = None

    def epochs_for(self, phase: str) -> int:
        """Epochs of ``phase``."""
        if isinstance(self.epochs, Mapping):
            return int(self.epochs.get(phase, self.default_epochs))
        return int(self.epochs)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad setting."""
        counts = self.epochs.values() if isinstance(self.epochs, Mapping) else [self.epochs]
        if any(int(count) < 0 for count in counts) or self.default_epochs < 0:
            raise ValueError(f"epochs must be >= 0, got {self.epochs!r}")
        if self.partitions is not None and self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")
        if self.batch_size is not None and self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.merge_alpha is not None and not 0.0 <= self.merge_alpha <= 1.0:
            raise ValueError(f"merge_alpha must lie in [0, 1], got {self.merge_alpha}")
        if self.fanout is not None and self.fanout < 1:
            raise ValueError(f"fanout must be >= 1, got {self.fanout}")
        if self.keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {self.keep_versions}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def open_checked_store(url: str, retry_timeout_s: float = 30.0) -> Any:
    """Open the store at ``url`` and prove it answers, or raise :class:`~node.StoreAccessError`."""
    import storage

    try:
        store = storage.open_store(url, retry_timeout_s=retry_timeout_s)
        store.makedirs("runs")
        store.exists("runs")
    except storage.StoreError as error:
        raise StoreAccessError(f"the store {url!r} is unreachable or not writable ({type(error).__name__}: {error}); "
                               "check the URL, that the service is up and the permissions") from error
    except OSError as error:
        raise StoreAccessError(f"the store {url!r} cannot be used: {error}") from error
    return store


def _model_input(shape: tuple[int, ...]) -> int | tuple[int, ...]:
    return int(shape[0]) if len(shape) == 1 else tuple(int(d) for d in shape)


class Trainer:
    """Train a model on Spark with one decentralized node per executor Python worker.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession, optional
        Default: the active session, or a local one (:func:`node.get_spark_session`).
    store_url : str, optional
        Where weights, metrics and the model go (``file:///...``, a path, ``hdfs://...``).
        Default: ``settings.store_url`` or ``./sparkdbn-store``.
    settings : TrainingSettings, optional
    on_epoch : callable, optional
        Called on the driver after every epoch with that epoch's summary (a dict: run, phase,
        epoch, samples, loss, wall_s, samples_per_s, merges, staleness_s, nodes, records).
    **overrides
        Fields of :class:`TrainingSettings` (e.g. ``epochs=3``).

    Attributes
    ----------
    run_id_ : str
        The last run's id.
    history_ : list of dict
        One summary per epoch of the last fit.
    """

    def __init__(self, spark: Any = None, store_url: str | None = None, settings: TrainingSettings | None = None,
                 on_epoch: Callable[[dict], None] | None = None, **overrides: Any) -> None:
        self.settings = dataclasses.replace(settings or TrainingSettings(), **overrides)
        self.settings.validate()
        self.store_url = store_url or self.settings.store_url or default_store_url()
        self._spark = spark
        self.on_epoch = on_epoch
        self.run_id_: str | None = None
        self.history_: list[dict[str, Any]] = []

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from ._session import get_spark_session

            self._spark = get_spark_session()
        return self._spark

    # ------------------------------------------------------------------ fit
    def fit(self, model: Any, data: Any, y: Any = None) -> Any:
        """Train ``model`` on ``data``; returns the same model with the consolidated weights.

        Parameters
        ----------
        model : rbm.RBM, rbm.DBN, rbm.ConvNet or any model with the trainable seam
        data : ndarray (n, *shape), RDD of (features, label), DataFrame, or staged dataset URL
        y : ndarray (n,), optional
            Labels for array ``data``.

        Raises
        ------
        InputDataError
            The data does not fit the model (width, NaN, labels) -- before any training.
        StoreAccessError
            The store is unreachable.
        TrainingError
            A Spark job failed, or the run id names a run of a different model.
        """
        import storage

        settings = self.settings
        store = open_checked_store(self.store_url, settings.store_retry_timeout_s)
        run = settings.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.run_id_ = run
        self.history_ = []
        runs = storage.RunStore(store, run)
        weights = storage.WeightStore(store, run)

        spec = dict(model.to_spec())
        if settings.batch_size is not None:
            if "batch_size" not in spec:
                raise TrainingError(f"batch_size was set, but a {spec.get('kind')!r} model has no batch_size setting")
            spec["batch_size"] = int(settings.batch_size)
        phases = list(model.phases())
        # The class count the model already fixes (its spec, or an output layer it already has).
        n_classes = spec.get("n_classes")
        if not n_classes and getattr(model, "classes_", None) is not None:
            n_classes = len(model.classes_)
        prepared = prepare_training_data(
            self.spark, data, y, partitions=settings.partitions, features_col=settings.features_col,
            label_col=settings.label_col, n_classes=int(n_classes) if n_classes else None,
            require_labels=any(not phase.startswith("rbm") for phase in phases),
            shuffle_seed=settings.seed if settings.shuffle else None)
        group = f"sparkdbn-{run}-{uuid.uuid4().hex[:6]}"
        broadcasts: list[Any] = []
        record: dict[str, Any] = {}
        try:
            model_input = _model_input(prepared.feature_shape)
            classes = int(n_classes) if n_classes else prepared.n_classes
            self._check_model_accepts(model, spec, model_input, classes, prepared)
            model.initialize(model_input, classes)
            record = self._start_record(runs, weights, run, spec, phases, prepared, model)
            secret = secrets.token_bytes(32)  # signs this fit's traffic; travels in the task closure only
            node_key = uuid.uuid4().hex
            if settings.stop_after_phase is not None and settings.stop_after_phase not in phases:
                raise TrainingError(f"stop_after_phase {settings.stop_after_phase!r} is not a phase of this model "
                                    f"({phases})")
            for phase_index, phase in enumerate(phases):
                if phase not in record["phases_done"]:
                    self._train_phase(model, spec, phase, phase_index, prepared, store, runs, weights, record, run,
                                      secret, node_key, model_input, classes, group, broadcasts)
                if phase == settings.stop_after_phase and phase != phases[-1]:
                    record.update(status="stopped", stopped=time.time())
                    runs.write_record(record)
                    logger.info("run %s stopped after phase %s as asked; fit again to resume", run, phase)
                    return model
            self._save_model(model, store, runs)
            record.update(status="done", finished=time.time(), model=runs.model_path())
            runs.write_record(record)
            logger.info("run %s done; model at %s/%s", run, self.store_url, runs.model_path())
            return model
        except BaseException as error:
            if record:
                record.update(status="failed", error=f"{type(error).__name__}: {error}"[:2000], finished=time.time())
                try:
                    runs.write_record(record)
                except storage.StoreError as store_error:
                    logger.error("could not mark run %s failed in the store: %s", run, store_error)
            raise
        finally:
            self.spark.sparkContext.cancelJobGroup(group)
            self._release_nodes(run)
            for broadcast in broadcasts:
                broadcast.destroy()
            prepared.unpersist()

    # ------------------------------------------------------------------ steps
    def _check_model_accepts(self, model: Any, spec: dict, model_input: Any, classes: int | None,
                             prepared: PreparedData) -> None:
        """Size a replica from the spec for the data: a mismatch fails here, not on the executors.

        A model that is already initialized keeps its input width (re-sizing it would silently
        drop its weights), so the data must match it.
        """
        import rbm

        width = int(np.prod(prepared.feature_shape))
        fixed = getattr(model, "n_features_in_", None)
        if fixed is not None and int(fixed) != width:
            raise InputDataError(f"the training data ({prepared.source}) has {width} features per sample, the model "
                                 f"was initialized for {int(fixed)}")
        try:
            rbm.model_from_spec(spec).initialize(model_input, classes)
        except ValueError as error:
            raise InputDataError(f"the model does not accept the training data ({prepared.source}, per-sample shape "
                                 f"{prepared.feature_shape}): {error}") from error

    def _start_record(self, runs: Any, weights: Any, run: str, spec: dict, phases: list[str], prepared: PreparedData,
                      model: Any) -> dict[str, Any]:
        """Write run.json, or pick up an earlier run with this id (resume)."""
        previous = runs.read_record()
        now = time.time()
        if previous:
            if previous.get("spec", {}).get("kind") != spec.get("kind") or previous.get("phases") != phases:
                raise TrainingError(f"run {run!r} in {self.store_url} trained a different model "
                                    f"({previous.get('spec', {}).get('kind')}, phases {previous.get('phases')}); "
                                    "pick another run id")
            record = dict(previous)
            for phase in record.get("phases_done", []):
                params = weights.get_phase_result(phase)
                if params is None:
                    raise TrainingError(f"run {run!r} says phase {phase!r} finished but its result is missing "
                                        "from the store")
                model.set_parameters(params)
            record.update(status="running", resumed=now, attempts=int(record.get("attempts", 1)) + 1,
                          settings=self.settings.to_dict())
            logger.info("resuming run %s: phases done %s, epochs done %s", run, record.get("phases_done"),
                        record.get("epochs_done"))
        else:
            record = {
                "version": RECORD_VERSION, "run": run, "status": "running", "created": now, "attempts": 1,
                "spec": spec, "phases": phases, "phases_done": [], "epochs_done": {},
                "settings": self.settings.to_dict(), "store_url": self.store_url,
                "data": {"source": prepared.source, "n_samples": prepared.n_samples,
                         "feature_shape": list(prepared.feature_shape), "n_classes": prepared.n_classes,
                         "partitions": prepared.partitions},
                "epochs": {phase: self.settings.epochs_for(phase) for phase in phases},
            }
        record.setdefault("phases_done", [])
        record.setdefault("epochs_done", {})
        record["epochs"] = {phase: self.settings.epochs_for(phase) for phase in phases}
        runs.write_record(record)
        return record

    def _train_phase(self, model: Any, spec: dict, phase: str, phase_index: int, prepared: PreparedData, store: Any,
                     runs: Any, weights: Any, record: dict, run: str, secret: bytes, node_key: str, model_input: Any,
                     classes: int | None, group: str, broadcasts: list) -> None:
        settings = self.settings
        sc = self.spark.sparkContext
        epochs = settings.epochs_for(phase)
        done = int(record["epochs_done"].get(phase, 0))
        start = model.parameters()
        if done:
            try:  # a resumed phase continues from the nodes' newest snapshots
                start.update(weights.consolidate(phase))
            except Exception as error:  # noqa: BLE001 - any store trouble just means "start over"
                logger.warning("resume: no usable snapshots of phase %s (%s); the phase starts over", phase, error)
        payload = encode_arrays(start)
        broadcast = sc.broadcast(payload)
        broadcasts.append(broadcast)
        config = {
            "run": run, "node_key": node_key, "store_url": self.store_url, "secret": secret, "spec": spec,
            "feature_shape": list(prepared.feature_shape), "classes": classes, "phase": phase,
            "phase_index": phase_index, "start_digest": digest(payload), "seed": settings.seed,
            "merge_alpha": settings.merge_alpha, "fanout": settings.fanout, "keep_versions": settings.keep_versions,
            "anti_entropy_interval_s": settings.anti_entropy_interval_s,
            "peer_refresh_interval_s": settings.peer_refresh_interval_s,
            "store_retry_timeout_s": settings.store_retry_timeout_s, "flush_timeout_s": settings.flush_timeout_s,
            "kill_worker_once_at": settings.kill_worker_once_at,
        }
        last_nodes: set[str] = set()
        bar = progress_bar(settings.progress, total=prepared.partitions * max(0, epochs - done),
                            description=f"{run} {phase}")
        try:
            for epoch in range(done, epochs):
                bar.set_description(f"{run} {phase} epoch {epoch + 1}/{epochs}")
                task = functools.partial(train_partition_task, dict(config, epoch=epoch), broadcast)
                rdd = prepared.blocks.mapPartitionsWithIndex(task)
                started = time.perf_counter()
                base = bar.n
                records = run_job(sc, rdd, group, f"{run} {phase} epoch {epoch + 1}/{epochs}",
                                   functools.partial(advance, bar, base))
                advance(bar, base, prepared.partitions)
                summary = summarize_epoch(run, phase, epoch, records, time.perf_counter() - started)
                self.history_.append(summary)
                report(settings.progress, bar, summary_line(summary, epochs))
                last_nodes = set(summary["nodes"])
                record["epochs_done"][phase] = epoch + 1
                runs.write_record(record)
                if self.on_epoch is not None:
                    self.on_epoch(summary)
        finally:
            bar.close()
        result = _consolidate(weights, phase, last_nodes, model.parameters(phase))
        weights.put_phase_result(phase, result)
        _sweep_temporaries(weights.store, run, phase)
        model.set_parameters(result)
        record["phases_done"].append(phase)
        runs.write_record(record)

    def _save_model(self, model: Any, store: Any, runs: Any) -> None:
        with tempfile.TemporaryDirectory(prefix="sparkdbn-model-") as folder:
            path = os.path.join(folder, "model.npz")
            model.save(path)
            with open(path, "rb") as handle:
                store.write_bytes(runs.model_path(), handle.read())

    def _release_nodes(self, run: str) -> None:
        """Best effort: ask the Python workers to stop this run's nodes (a later run stops them anyway)."""
        sc = self.spark.sparkContext
        slots = max(2, 2 * sc.defaultParallelism)
        try:
            released = sc.parallelize(range(slots), slots).mapPartitionsWithIndex(
                functools.partial(release_run_task, run)).collect()
            logger.info("released nodes %s of run %s", sorted(set(released)), run)
        except Exception as error:  # noqa: BLE001 - cleanup must not hide the real outcome
            logger.warning("could not release the nodes of run %s: %s", run, short_error(error))


# ---------------------------------------------------------------------- helpers
def _consolidate(weights: Any, phase: str, nodes: set[str], fallback: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Mean of the newest verified snapshot of every node that trained in the phase's last epoch.

    Nodes that died earlier (a killed worker) left older snapshots; leaving them out keeps the
    phase result as fresh as the survivors.  Without a usable snapshot: ``WeightStore.consolidate``.
    """
    found = [weights.newest_verified(phase, node) for node in sorted(nodes)]
    params = [entry[1] for entry in found if entry is not None]
    if not params:
        if not nodes:
            return fallback  # zero epochs: nothing trained, nothing to average
        return weights.consolidate(phase)
    logger.info("phase %s consolidated from %d node(s)", phase, len(params))
    return {name: np.mean([p[name].astype(np.float64) for p in params], axis=0).astype(params[0][name].dtype)
            for name in params[0]}


def _sweep_temporaries(store: Any, run: str, phase: str) -> int:
    """Remove temporaries that writers killed mid-write left in a finished phase's weight folders.

    Every node has flushed its writes before its task returned, so at the phase's end a
    temporary older than ``STALE_TEMPORARY_S`` can only belong to a dead writer.
    """
    folder = f"runs/{run}/weights/{phase}"
    removed = sum(store.remove_stale_temporaries(f"{folder}/{node}", older_than_s=STALE_TEMPORARY_S)
                  for node in store.list(folder))
    if removed:
        logger.info("phase %s: removed %d temporary file(s) left by killed writers", phase, removed)
    return removed


def train(model: Any, data: Any, y: Any = None, *, spark: Any = None, store_url: str | None = None,
          **settings: Any) -> Any:
    """One-call form of ``Trainer(spark, store_url, **settings).fit(model, data, y)``."""
    return Trainer(spark=spark, store_url=store_url, **settings).fit(model, data, y)
