"""One fit: the run, its store, record, lease, prepared data (:mod:`node.driver._fit_data`), key and Spark handles.

:class:`Fit` is what :meth:`node.Trainer.fit` does, as an object: constructing it starts
nothing; :meth:`Fit.run` starts Spark's Python workers, takes the run's lease, checks the data on
the driver, writes or resumes the run record, stores the training partitions, completes every
phase in order (its training mode runs the epochs), saves the model and marks the run done -- and
in ``finally`` cancels its Spark jobs, stops its nodes and drops its broadcasts, the data it held
and the partitions it stored.  Each step is timed (:mod:`node.driver._timings`).

Fencing (see :mod:`node.run._lease`): every store write of the driver is tied to its lease
generation or named by its content -- records are new files of the generation, the model lives
in the generation's own folder, phase results and early-stopping bests are files named by their
sha256 -- and only the record says which are current.  A driver that lost the run (paused,
cut off) and writes on can therefore only add files that no reader of the newer record looks at;
it stops at its next renewal or record write, cancelling its Spark jobs, and says who took over.

Once the lease is held and the data checked, the fit's facts are fixed as plain values
(:class:`~node.driver._fit_state.FitState`) and handed on -- to its jobs, its watch, its nodes'
config -- and :class:`~node.driver._fit_phases.LeasedFit` completes the phases.

Crash consistency (see :mod:`node.run._record`): a phase is completed from what is stored, in one
idempotent step.  A phase whose result is stored and verifies is loaded; one whose epochs all
ran is consolidated from the newest snapshots of the nodes that trained its last epoch; one in
the middle continues from that consolidation; only when nothing usable is left does it train
again from its start, and the log and the record say so.  The phase result is the one
consolidation rule of :meth:`storage.WeightStore.consolidate`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

from pyspark.sql import SparkSession

import rbm
import storage

from .._errors import STORE_FAILURES, StoreAccessError, TrainingError, error_chain, short_error
from ..data import PreparedData, feature_names
from ..executor import block_sink, check_ports_for_nodes
from ..modes import max_learning_rate_factor, mode_named
from ..run import (DriverLease, RunRecord, open_checked_store, remove_work_folders, resolve_run_key,
                   sweep_temporaries)
from ..watch import ReachabilityWatch, RunWatch, ValidationSet
from ._devices import check_gpu_conf, driver_model, driver_spec, hand_back, task_gpus
from ._fit_data import model_input, prepare_fit_data, with_feature_names
from ._fit_jobs import FitJobs
from ._fit_phases import LeasedFit, fail
from ._fit_state import FitState
from ._node_config import node_config
from ._own_fit import warn_own_fit_settings
from ._progress import SparkJob
from ._session import dynamic_allocation, start_python_workers, task_slots
from ._settings import TrainingSettings
from ._slots import wait_for_task_slots
from ._timings import FitTimings

__all__ = ["Fit"]

logger = logging.getLogger(__name__)


class Fit:
    """Everything one ``Trainer.fit`` call works with (see the module docstring).

    Constructing it starts nothing; everything it holds is known then.  What :meth:`run` opens (the
    store, the lease, the record, the prepared data, the jobs, the watch) lives in ``run`` and the
    :class:`~node.driver._fit_phases.LeasedFit` it makes, not here.

    Parameters
    ----------
    settings : TrainingSettings
    spark : SparkSession
    store_url : str
    model : rbm.RBM, rbm.DBN, rbm.ConvNet or any model with the trainable seam
    data, y
        As :meth:`node.Trainer.fit` takes them.
    on_epoch : callable, optional
        Called with each epoch's summary.
    key : bytes, optional
        The run key, where the caller gives one (else the settings' key file, the Spark conf, or a new one).
    spark_conf : mapping, optional
        The session's Spark conf, where the caller has read it (else read here, once).
    """

    def __init__(self, settings: TrainingSettings, spark: SparkSession, *, store_url: str, model: Any, data: Any,
                 y: Any = None, on_epoch: Callable[[dict], None] | None = None, key: bytes | None = None,
                 spark_conf: Mapping[str, str] | None = None) -> None:
        self.settings = settings
        self.spark = spark
        self.sc = spark.sparkContext
        self.spark_conf = dict(self.sc.getConf().getAll()) if spark_conf is None else dict(spark_conf)
        self.store_url = store_url
        self.given_model = model  # the caller's: it gets the result where it can hold it (node.driver._devices)
        self.data, self.y = data, y
        self.on_epoch = on_epoch
        self.run_id = settings.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.fit_id = uuid.uuid4().hex
        self.group = f"sparkdbn-{self.run_id}-{self.fit_id[:6]}"
        self.history: list[dict[str, Any]] = []
        # What the nodes build, on their tasks' GPUs if it asks for one: final before anything is built from it.
        # rbm.model_spec refuses a model without the seam, or whose class no executor can import, here.
        self.spec: dict = final_spec(rbm.model_spec(model), settings.batch_size)
        self.phases: list[str] = list(model.phases())
        self.model = driver_model(model, self.spec)  # the driver's copy, on its CPU: checks, phases, validation
        self._given_key = key
        self.reachability = ReachabilityWatch()
        self.timings = FitTimings()  # where the fit's time goes (node.driver._timings)
        self._workers: SparkJob | None = None  # the job that starts Spark's Python workers, once run() started it

    # ------------------------------------------------------------------ the whole fit
    def run(self) -> Any:
        """Train (or resume) the run; returns the model with the consolidated weights."""
        settings = self.settings
        self.started = time.time()  # the run record's "created" or "resumed": when the fit began, as `status` says
        self._check_settings()
        names = feature_names(self.data)  # a pandas frame's columns, kept as the model's own fit keeps them
        check_gpu_conf(self.sc.master, self.spark_conf, self.spec)  # before any work
        self._start_workers()
        began = self.timings.now_s()
        store = open_checked_store(self.store_url, settings.store_retry_timeout_s)
        key = self._resolve_key(store)
        runs = storage.RunStore(store, self.run_id, key)
        weights = storage.WeightStore(store, self.run_id, key)
        lease = DriverLease(store, self.run_id, key, settings.lease_timeout_s, fit_id=self.fit_id,
                            on_lost=self._lease_lost)
        held = _Held()
        try:
            # A second driver of the run is refused here, before any work.
            with lease, _ending_fast(store, lease):
                previous = self._earlier_record(runs)
                # Earlier fits' claims and stored partitions (node.run._work_folders), before this fit stores its own.
                remove_work_folders(store, self.run_id)
                self.timings.add("store and lease", began, self.timings.now_s() - began)
                held.store = store  # this fit may store training partitions from now on (removed when it ends)
                held.prepared, validation = prepare_fit_data(
                    self.spark, settings, self.model, self.driver_spec, self.data, self.y, nodes=self.nodes,
                    require_labels=any(not phase.startswith("rbm") for phase in self.phases), timings=self.timings,
                    sink=block_sink(self.store_url, settings.store_retry_timeout_s, key, self.run_id, self.fit_id))
                state = FitState(run_id=self.run_id, fit_id=self.fit_id, group=self.group, store_url=self.store_url,
                                 key=key, spec=self.spec, driver_spec=self.driver_spec, phases=tuple(self.phases),
                                 nodes=self.nodes, task_gpus=task_gpus(self.spark_conf),
                                 feature_shape=tuple(int(d) for d in held.prepared.feature_shape))
                trained = self._run_leased(held, state, store=store, runs=runs, weights=weights, lease=lease,
                                           previous=previous, validation=validation)
                return with_feature_names(hand_back(self.given_model, trained), names)
        except STORE_FAILURES as error:  # a driver's own store call
            raise StoreAccessError(str(error)) from error
        finally:
            with self.timings.step("cleanup"):
                self._close(held, store_failed=lease.store_failed)
            logger.info("run %s: the fit took %s", self.run_id, self.timings.summary())

    def _check_settings(self) -> None:
        """The settings against the model, before any work: what they name must be the model's."""
        settings = self.settings
        try:
            settings.check_trains_something(self.phases)
        except ValueError as error:
            raise TrainingError(str(error)) from error
        named = list(settings.epochs) if isinstance(settings.epochs, Mapping) else []
        unknown = [phase for phase in named if phase not in self.phases]
        if unknown:  # a misspelled phase would silently train default_epochs instead
            raise TrainingError(f"epochs names {', '.join(map(repr, unknown))}, not a phase of this model "
                                f"({', '.join(self.phases)})")
        if settings.stop_after_phase is not None and settings.stop_after_phase not in self.phases:
            raise TrainingError(f"stop_after_phase {settings.stop_after_phase!r} is not a phase of this model "
                                f"({self.phases})")
        # Tasks per job: a node each, or fewer where fewer partitions are dealt (node.driver._fit_jobs).
        tasks = min(self.nodes, int(settings.partitions or self.nodes))
        mode_named(settings.mode).check_nodes(tasks, None if dynamic_allocation(self.spark_conf)
                                              else task_slots(self.sc), master=self.sc.master)
        if settings.batch_size is not None and "batch_size" not in self.spec:
            raise TrainingError(f"batch_size was set, but a {self.spec.get('kind')!r} model has no batch_size setting")
        try:  # a node without a port of its own would fail its tasks with a stack trace
            check_ports_for_nodes(settings.port_range, self.nodes, self.sc.master)
        except ValueError as error:
            raise TrainingError(str(error)) from error
        warn_own_fit_settings(self.model, self.spec.get("kind"), settings, self.phases, stacklevel=5)

    def _start_workers(self) -> None:
        """Start Spark's Python workers while the driver checks the data: a job of one short task per node.

        The first job of a session starts them (an interpreter and sparkdbn's imports in each, seconds
        each); the fit's first job that needs them would wait for that otherwise.  A job of the fit's
        group (cancelled when the fit ends); nobody waits for it: the fit's next job queues behind it.
        """
        self._workers = start_python_workers(self.sc, self.nodes, self.group, f"{self.run_id} start the Python workers")

    def _lease_lost(self) -> None:
        """Another driver took the run over (called from the lease's thread): stop this fit's Spark jobs now."""
        self.sc.cancelJobGroup(self.group)

    def _resolve_key(self, store: storage.Store) -> bytes:
        """The run key: a resumed run must find the first fit's key, a new run may make one."""
        resuming = storage.has_run_record(store, self.run_id)
        return resolve_run_key(self.run_id, self.store_url, key=self._given_key, key_file=self.settings.key_file,
                               spark_conf=self.spark_conf, create=not resuming).key

    def _earlier_record(self, runs: storage.RunStore) -> dict | None:
        """This run's record from an earlier fit; a wrong key stops the fit here, before any work."""
        try:
            return runs.read_record()
        except storage.AuthenticationError as error:
            raise TrainingError(f"run {self.run_id!r} cannot be resumed with this key: {error}") from error

    def _run_leased(self, held: _Held, state: FitState, *, store: storage.Store, runs: storage.RunStore,
                    weights: storage.WeightStore, lease: DriverLease, previous: dict | None,
                    validation: ValidationSet | None) -> Any:
        """Write or resume the run record, make the nodes' config, the fit's jobs and its watch, and train."""
        settings, prepared, record = self.settings, held.prepared, None
        try:
            with self.timings.step("run record"):
                record, resumed = RunRecord.start(
                    runs, lease, previous, spec=state.spec, phases=self.phases,
                    epochs={phase: settings.epochs_for(phase) for phase in self.phases}, settings=settings.to_dict(),
                    store_url=self.store_url, data_facts=_data_facts(prepared, settings.data_origin),
                    classes=prepared.classes, started=self.started)
                if resumed:
                    logger.info("resuming run %s (%s)", self.run_id, _progress_text(record, state.phases))
                sweep_temporaries(store, self.run_id)
                config = node_config(settings, prepared, state.spec, run=self.run_id, fit_id=self.fit_id,
                                     store_url=self.store_url, key=state.key, nodes=state.nodes, master=self.sc.master,
                                     driver_host=self.spark_conf.get("spark.driver.host"),
                                     max_rate_factor=max_learning_rate_factor(self.model))
                held.jobs = FitJobs(self.sc, state=state, settings=settings, prepared=prepared, node_config=config,
                                    record=record, store=store, timings=self.timings)
                held.watch, record_facts = RunWatch.start(
                    settings=settings, run=self.run_id, spec=state.spec, driver_spec=state.driver_spec,
                    phases=state.phases, feature_shape=state.feature_shape, classes=prepared.classes,
                    spark=self.spark, record=record, weights=weights, validation=validation,
                    model_input=model_input(prepared.feature_shape))
                record.data.update(record_facts)  # written with the record's next write, as the epochs' figures
            return LeasedFit(state=state, settings=settings, model=self.model, sc=self.sc, store=store, runs=runs,
                             weights=weights, lease=lease, record=record, prepared=prepared, node_config=config,
                             jobs=held.jobs, watch=held.watch, timings=self.timings, reachability=self.reachability,
                             history=self.history, on_epoch=self.on_epoch).run()
        except BaseException as error:
            # Marking the run failed: one attempt, not another retry timeout.
            _end_fast(store, lease, error)
            fail(error, record=record, lease=lease, run_id=self.run_id)
            raise

    @property
    def driver_spec(self) -> dict:
        """The spec of the driver's CPU copy of the model (the checks, the validation tasks)."""
        return driver_spec(self.spec)

    @functools.cached_property
    def nodes(self) -> int:
        """Nodes training at once: ``averaging_nodes``, else a node per task slot (Spark's default parallelism,
        at most the tasks Spark runs at once: ``spark.default.parallelism`` may name more).  Counted once per fit,
        after the executors the session asked for registered (:mod:`node.driver._slots`)."""
        if self.settings.averaging_nodes:
            return int(self.settings.averaging_nodes)
        slots = wait_for_task_slots(self.sc, self.spark_conf)
        return min(self.sc.defaultParallelism, slots) if slots else int(self.sc.defaultParallelism)

    # ------------------------------------------------------------------ the end
    def _close(self, held: _Held, *, store_failed: bool = False) -> None:
        """Cancel this fit's Spark jobs, stop its nodes, drop its broadcasts, held data and stored partitions
        (``store_failed``: the fit ends because its store failed, and said so; a removal that fails is logged at
        debug level)."""
        workers = self._workers
        if workers is not None and workers.seconds is not None:
            self.timings.add("start the Python workers", workers.started - self.timings.origin, workers.seconds,
                             background=True)
        self.sc.cancelJobGroup(self.group)
        if held.watch is not None:
            held.watch.close()
        if held.jobs is not None:
            held.jobs.close()
        if held.store is not None:  # this fit's claims and partitions, when it got as far as writing any
            self._remove_work_folders(held.store, logging.DEBUG if store_failed else logging.WARNING)
        if held.prepared is not None:
            held.prepared.unpersist()

    def _remove_work_folders(self, store: storage.Store, failure_level: int) -> None:
        try:
            remove_work_folders(store, self.run_id, self.fit_id)
        except storage.StoreError as error:  # cleanup must not hide the real outcome; the next fit removes them
            logger.log(failure_level, "could not remove the work folders of run %s: %s", self.run_id,
                       short_error(error))


@dataclass
class _Held:
    """What a running fit holds that its end releases (:meth:`Fit._close`), each part once it is made.

    ``store`` is set once the fit may have stored training partitions (its work folders go when it ends).
    """

    store: storage.Store | None = None
    prepared: PreparedData | None = None
    jobs: FitJobs | None = None
    watch: RunWatch | None = None


def _end_fast(store: storage.Store, lease: DriverLease, error: BaseException) -> None:
    """After ``error`` caused by the store staying down past its retry timeout (or a node's task reporting a
    store failure), or by Ctrl-C (a ``KeyboardInterrupt``), give each of the fit's last store calls (marking the
    run failed, releasing the lease, removing its work folders) one attempt that waits a few seconds for an answer
    (:meth:`storage.Store.end_fast`): each would wait out the outage again otherwise (30 s of retries each by
    default, and 60 s for an answer on a cut link), and none is needed to resume the run.

    After a store failure, said in one warning, with what the calls that fail leave; each that fails is logged
    at debug level only (``lease.store_failed``): its line repeated the store's error, which the fit's error says.
    """
    chain = error_chain(error)
    if any(isinstance(link, KeyboardInterrupt) for link in chain):
        store.end_fast()
    failed = any(isinstance(link, (storage.StoreUnavailableError, StoreAccessError)) for link in chain)
    if failed and not lease.store_failed:
        logger.warning("the fit of run %s ends after a store failure, trying each of its last writes to the store "
                       "%s once (marking the run failed, releasing its lease, removing its work folders); what they "
                       "leave the next fit of the run takes over: it resumes once the store is back (taking the "
                       "lease over at once where this process has ended, else after lease_timeout_s, %.0f s)",
                       lease.run, store.url, lease.timeout_s)
        lease.store_failed = True
        store.end_fast()


@contextlib.contextmanager
def _ending_fast(store: storage.Store, lease: DriverLease) -> Iterator[None]:
    """:func:`_end_fast` for an error raised inside (before the lease, entered first, is released)."""
    try:
        yield
    except BaseException as error:
        _end_fast(store, lease, error)
        raise


def final_spec(spec: dict, batch_size: int | None) -> dict:
    """A copy of the model's ``spec`` with the settings' ``batch_size`` where the settings name one and the spec
    has the setting (a model without one is refused by :meth:`Fit.run`, before any work)."""
    spec = dict(spec)
    if batch_size is not None and "batch_size" in spec:
        spec["batch_size"] = int(batch_size)
    return spec


def _data_facts(prepared: PreparedData, origin: str | None) -> dict[str, Any]:
    return {"source": prepared.source, "origin": origin, "n_samples": prepared.n_samples,
            "feature_shape": list(prepared.feature_shape), "partitions": prepared.partitions,
            "n_classes": None if prepared.classes is None else len(prepared.classes),
            "content_sums": prepared.content_sums, **(prepared.staged or {})}


def _progress_text(record: RunRecord, phases: tuple[str, ...]) -> str:
    return ", ".join(f"{phase} {'done' if record.phase_done(phase) else record.epochs_done(phase)}"
                     for phase in phases)
