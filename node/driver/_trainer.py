"""The driver API: :class:`Trainer` and :func:`train` (one :class:`~node.driver._fit.Fit` per call of ``fit``).

:class:`Trainer` trains any model with the trainable seam (see :class:`rbm.TrainableModel`) on
Spark with one decentralized node per executor Python worker:

1. checks the store is reachable and the data fits the model, on the driver (numpy arrays) or with
   one Spark job that also stores the partitions for the nodes (widths, NaN/Inf, the visible
   units' input range, the class set);
2. takes the run's lease (one driver per run) and writes the run record, or resumes it;
3. completes every phase in order: its training mode runs the epochs as Spark jobs, then the
   newest snapshots of the nodes of the last epoch are consolidated into the phase result that
   seeds the next phase;
4. saves the final model under the run and marks it done ("done" means the model is there and
   verifies).

Fitting again with the same run id resumes from what is stored, whatever instant the earlier
fit stopped at (see :mod:`node.driver._fit`).
"""

from __future__ import annotations

import gc
import os
from typing import Any, Callable

from pyspark.sql import SparkSession

from ._fit import Fit
from ._session import get_spark_session
from ._settings import TrainingSettings
from ._spark_conf import apply_spark_conf, explicit_fields

__all__ = ["Trainer", "train", "default_store_url"]


def default_store_url() -> str:
    """``file://`` URL of ``./sparkdbn-store`` (the embedded default store)."""
    return "file://" + os.path.abspath("sparkdbn-store")


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
        epoch, samples, loss, wall_s, samples_per_s, merges, staleness_s, nodes, records, and
        ``validation`` -- the epoch's validation figures -- when the settings give a validation set).
    key : bytes, optional
        The master secret of the run key (see :func:`node.resolve_run_key` for where else it is
        looked for); never stored, never logged.
    **overrides
        Fields of :class:`TrainingSettings` (e.g. ``epochs=3``).  Fields neither ``settings`` nor
        ``overrides`` set (left at their defaults) are taken from the session's ``spark.sparkdbn.*``
        conf where it has them (``--conf spark.sparkdbn.advertise_host=10.0.0.5``; see
        :mod:`node.driver._spark_conf`).

    Attributes
    ----------
    run_id_ : str
        The last run's id.
    history_ : list of dict
        One summary per epoch of the last fit.
    timings_ : dict
        Where the last fit's time went: ``{"total_s": ..., "steps": [...]}``, the driver's steps in
        order with their seconds, an epoch's with its nodes' share (see :mod:`node.driver._timings`).
    """

    def __init__(self, spark: SparkSession | None = None, store_url: str | None = None,
                 settings: TrainingSettings | None = None, *, on_epoch: Callable[[dict], None] | None = None,
                 key: bytes | None = None, **overrides: Any) -> None:
        self.settings = (settings or TrainingSettings()).replaced(overrides)
        self.settings.validate()
        self._explicit = explicit_fields(self.settings, overrides)
        self._given_store_url = store_url
        self.store_url = store_url or self.settings.store_url or default_store_url()
        self._spark = spark
        self.on_epoch = on_epoch
        self._key = key
        self.run_id_: str | None = None
        self.history_: list[dict[str, Any]] = []
        self.timings_: dict[str, Any] = {}

    @property
    def spark(self) -> SparkSession:
        if self._spark is None:
            self._spark = get_spark_session()
        return self._spark

    def fit(self, model: Any, data: Any, y: Any = None) -> Any:
        """Train ``model`` on ``data``; returns the same model with the consolidated weights.

        The nodes build ``model``'s replicas where their tasks' GPUs are (``device="gpu"`` or
        ``"auto"``); the driver works on a CPU copy.  A model that cannot hold the weights on the
        driver (``device="gpu"`` where the driver has no GPU) is left as it was, and the fit
        returns that CPU copy (``device="cpu"``) instead, saying so in the log.

        Parameters
        ----------
        model : rbm.RBM, rbm.DBN, rbm.ConvNet or any model with the trainable seam
            A model of one's own: its kind registered with :func:`rbm.register_model` in a module the
            executors can import (docs/how-it-works.md, "Your own model").
        data : ndarray (n, *shape), RDD of (features, label), DataFrame, or staged dataset URL
            Arrays as scikit-learn takes them: a list or a pandas DataFrame too.
        y : ndarray (n,), optional
            Labels for array ``data``: numbers or strings, as scikit-learn takes them (a column
            ``(n, 1)`` too, with scikit-learn's ``DataConversionWarning``).

        Raises
        ------
        TypeError
            The model lacks a required method of the seam, its kind is not registered, or its class is
            defined in ``__main__`` (no executor can import it) -- before any Spark job.
        InputDataError
            The data does not fit the model (width, NaN, input range, labels) -- before any training.
        StoreAccessError
            The store is unreachable: at the start, or for longer than ``store_retry_timeout_s`` while
            the fit runs (then the fit ends once, no task retried; fitting the run id again resumes).
        TrainingError
            A Spark job failed, another driver holds the run, the run id names a run of a
            different model, or the run's key does not verify its record.
        NodeDeviceError
            ``device="gpu"`` where Spark hands tasks no GPU (before any job), or a node whose
            task has no usable GPU (from a probe job, before any training): a TrainingError.
        RunKeyError
            A resumed run whose key is nowhere to be found.
        SparkConfError
            A ``spark.sparkdbn.*`` key of the session names no setting or has a bad value.
        """
        if isinstance(model, type):
            raise TypeError(f"fit takes a model, and {model.__name__} is its class: give {model.__name__}(...)")
        # The session's conf, read once per fit (each read is a py4j call per entry: 30-40 ms)
        spark_conf = dict(self.spark.sparkContext.getConf().getAll())
        settings = apply_spark_conf(self.settings, spark_conf, self._explicit)
        self.store_url = self._given_store_url or settings.store_url or default_store_url()
        fit = Fit(settings, self.spark, store_url=self.store_url, model=model, data=data, y=y, on_epoch=self.on_epoch,
                  key=self._key, spark_conf=spark_conf)
        self.run_id_ = fit.run_id
        self.history_ = fit.history
        try:
            return fit.run()
        finally:
            self.timings_ = fit.timings.to_dict()
            # py4j ties every Java object to the methods called on it in a reference cycle, so the
            # fit's RDDs -- its training data among them -- stayed in the driver's JVM until Python's
            # cyclic collector ran, which a numpy-heavy driver puts off: each fit of digits28 left
            # about 110 MB there, and the eighth fit in one session ran out of a 1 GB driver heap.
            del fit
            gc.collect()


def train(model: Any, data: Any, y: Any = None, *, spark: SparkSession | None = None, store_url: str | None = None,
          **settings: Any) -> Any:
    """One-call form of ``Trainer(spark, store_url, **settings).fit(model, data, y)``."""
    return Trainer(spark=spark, store_url=store_url, **settings).fit(model, data, y)
