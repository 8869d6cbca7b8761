"""How a model is trained on Spark: :class:`TrainingSettings` (JSON-able, stored in the run record)."""

from __future__ import annotations

import dataclasses
import difflib
import numbers
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from actors import parse_port_range

from ..data import DEFAULT_MAX_CLASSES
from ..executor import check_host_settings
from ..modes import SCALE_RULES, check_mode
from ..watch import DEFAULT_LOG_DIR, EarlyStopping

__all__ = ["TrainingSettings"]


@dataclass
class TrainingSettings:
    """How a model is trained on Spark (JSON-able; stored in the run record).

    Attributes
    ----------
    mode : str
        How nodes combine their progress (docs/training-modes.md): ``"async"`` merges fresh peer
        snapshots per partition; ``"sync"`` averages every node's parameters every
        ``averaging_frequency`` partitions, behind a barrier; ``"sharing"`` exchanges
        threshold-quantized sparse updates and keeps the residual locally.
    averaging_frequency : int
        ``"sync"``: partitions each node trains between two averages.
    averaging_nodes : int, optional
        ``"sync"``: nodes that train and average together (default: a node per task slot, Spark's
        default parallelism capped at the tasks it runs at once).  More than the task slots the
        cluster runs at once is refused before any work: the barrier would wait in vain.
    barrier_timeout_s : float
        ``"sync"``: how long a node waits at a barrier for the others before the task fails.
    sharing_threshold : float
        ``"sharing"``: the starting threshold; entries of the accumulated change at least this
        large are published as ``+-threshold``.
    sharing_sparsity : float
        ``"sharing"``: the fraction of entries the adaptive threshold aims to publish per update.
    straggler_factor : float
        Benchmarks and tests: one node of the run (the first to train) sleeps ``factor - 1``
        times its compute time after each partition; ``1`` (default) slows nobody.  The sleep
        is recorded in each partition's metrics (``slowed_s``).
    epochs : int or dict of str to int
        Passes over the data per phase; a dict gives per-phase counts (missing phases: ``default_epochs``;
        a key that is not a phase of the model is refused when the fit starts).
        Some phase must train at least one epoch, unless ``initialize_only``.
    default_epochs : int
        Epochs of phases a dict ``epochs`` leaves out.
    initialize_only : bool
        Train nothing: store the initialized model under the run (status ``"initialized"``).
    batch_size : int, optional
        Overrides the model's minibatch size on the nodes.
    partitions : int, optional
        RDD partitions per epoch.  Each node merges, trains and publishes once per partition.
        Default: 2 per node (Spark's default parallelism, or ``averaging_nodes``); 8 per node
        where the scaling rule multiplies the learning rates by more than 2 (``"auto"``: more than
        2 nodes, each taking fewer than 100 minibatch steps per epoch) and every merge averages all
        nodes (no smaller ``fanout``; not ``"sharing"``): merging more often keeps more of one
        node's accuracy there (docs/scaling-out.md); never fewer than a minibatch per partition.
        A staged dataset has one partition per shard.
    merge_alpha : float, optional
        Weight of the peers' mean in a merge (default ``m / (m + 1)`` for ``m`` fresh peers).
    fanout : int, optional
        At most this many peers merged per partition (default: all fresh ones).
    scale_rule : {"auto", "linear", "sqrt", "none"}
        How every learning rate follows the number ``n`` of nodes merging (see :mod:`node.modes._scaling`):
        ``"linear"`` multiplies it by ``n`` (SGD, momentum, the RBMs' CD, Adam as measured),
        ``"sqrt"`` by ``sqrt(n)``, ``"auto"`` is linear, but only as far as the nodes take few
        minibatch steps per epoch (fully below ``200 / n`` steps: see
        :mod:`node.modes._scaling`), ``"none"`` keeps the rates as given (scale by hand).
    outer_learning_rate : float, optional
        ``eta`` of the outer step (below), in (0, 2]; with ``outer_momentum``, fixes the step.
    outer_momentum : float, optional
        ``mu`` of the outer step of ``"async"`` and ``"sync"`` (DiLoCo, SlowMo, NoLoCo; docs/scaling-out.md),
        in [0, 1): each node of a fit of several nodes keeps an anchor (its weights after its last outer
        step) and a momentum ``v``; after it merged and trained to ``w`` it steps on ``d = anchor - w``
        (in ``"async"`` a merge moves the anchor with the weights, so ``d`` is the node's own training):
        ``v <- mu v + d``, ``w <- anchor - eta (d + mu v)`` (Nesterov).  Neither given (the default): the
        rule chooses the step, with the gain the scaling rule's learning-rate factor ``f`` leaves to the
        ``n`` nodes, ``g = min(3.5, max(1, n / f))`` (:func:`node.modes.outer_gain`), and ``mu =
        sqrt(1 - 1 / g)``, ``eta = 1 / (1 + mu)`` (:func:`actors.outer_settings_for_gain`; ``g = 1`` is
        plain merging), in the phases the model takes it in (not the RBMs' contrastive divergence:
        ``takes_outer_step`` of the model seam).  Either given: that step in every phase (the other one
        ``1.0`` / ``0.0``; ``1.0`` and ``0.0`` are plain merging).  The step is off on one node and where the
        scaling rule splits the nodes' minibatch.  The momentum is stored beside the node's snapshots, so
        a restarted or new node continues it; each phase starts with none.
    warmup_partitions : int, optional
        At each phase start the factor ramps up from 1 over this many partitions of each node
        (default: a node's first epoch, its share of the partitions).
    keep_versions : int
        Snapshots kept per node and phase in the store.
    run_id : str, optional
        Names the run in the store; reusing an id resumes that run.  Default: time + random.
    store_url : str, optional
        Default store when :class:`~node.Trainer` gets none.
    seed : int
        Seeds the data shuffle and every node's minibatch order.
    shuffle : bool
        Shuffle the rows before splitting them into partitions (seeded by ``seed``): numpy rows, and a
        DataFrame's (each row to a random partition), so that rows sorted or grouped by label do not give each
        node a few classes.  False keeps a DataFrame's partitions where they are as many as asked.  An RDD is
        taken as it is partitioned then (shuffle it first if its partitions are sorted); a staged dataset's
        shards are its partitions (``sparkdbn stage`` shuffles before it shards).
    progress : bool
        Show the progress bar and per-epoch summary lines (stderr).
    max_classes : int
        More distinct labels than this is an :class:`~node.InputDataError` naming the count.
    lease_timeout_s : float
        A run's driver renews its lease every quarter of this; a lease whose renewal the next fit of the
        run has watched stand still for this long, on that fit's own clock (never comparing two hosts'
        clocks), belongs to a driver that is gone, and that fit takes it over (see docs/fenced-writes.md).
    anti_entropy_interval_s : float
        How often a node lists the store for missed versions.
    peer_refresh_interval_s : float
        How often a node re-reads the peers registry for new peers.
    store_retry_timeout_s : float
        How long store operations are retried before the store counts as unreachable (0: tried once).  The
        commands that read a run (``status``, ``evaluate``, ``predict``, ``report``) take it from a config file too.
    flush_timeout_s : float
        How long a node waits for its published weights to be written.
    features_col : str
        DataFrame column of the features.
    label_col : str
        DataFrame column of the labels.
    key_file : str, optional
        A file holding the master secret of the run key (see :func:`node.resolve_run_key`;
        also ``SPARKDBN_KEY_FILE``/``SPARKDBN_KEY``, ``spark.authenticate.secret``, or a key kept
        on this machine from the run's first fit).  The key itself never goes to the store.
    stop_after_phase : str, optional
        End the fit after this phase (status ``"stopped"``); fitting again with the same
        ``run_id`` resumes with the next phase.
    validation_fraction : float, optional
        Hold this share of the training rows (numpy arrays or a DataFrame) out on the driver,
        seeded by ``seed``, and validate on it at the end of every epoch (see
        :mod:`node.watch._validation`).
    validation_data : (X, y) arrays, DataFrame or str, optional
        A separate validation set (instead of ``validation_fraction``): arrays, a DataFrame, or the
        URL of a staged dataset (such as a staged dataset's held-out split ``<url>/test``), read
        whole on the driver.  The run record names a URL, and of the others their type only.
    early_stopping : dict or True, optional
        ``{"metric": "val_loss" | "val_accuracy" | "val_reconstruction_error", "patience": 3,
        "min_delta": 0.0}``: end a phase whose validation metric has not improved for
        ``patience`` epochs and keep its best epoch's weights (needs a validation set).
    log_dir : str, optional
        Live TensorBoard event files go to ``<log_dir>/<run>`` (default ``sparkdbn-logs``;
        None or ``""``: off).  Written with tensorboardX.
    mlflow_tracking_uri : str or True, optional
        Track the fit in MLflow at this URI (a local folder or any tracking URI; True: ``./mlruns``);
        default off.  Needs MLflow (``sparkdbn[mlflow]``).
    bind_host : str, optional
        Where each executor's node listens (default: automatic -- loopback on ``local[N]``, else
        ``SPARK_LOCAL_IP``/``SPARK_LOCAL_HOSTNAME`` where set, else the address of the interface
        that reaches the driver; see :mod:`node.executor._network`).  ``"0.0.0.0"`` listens on every
        interface and needs ``advertise_host``.
    advertise_host : str, optional
        The host name or address peers connect to (default: the bind host).  For NAT, containers,
        or a name in the cluster's DNS.
    port_range : str, optional
        ``"40000-40100"``: the nodes' endpoints bind a free port of this range (for firewalls);
        default: any free port.  A range with no free port fails the node's start naming it.
    gpu_data_budget_bytes : int, optional
        GPU memory a node on a GPU may fill with the partitions it keeps there across epochs
        (:class:`rbm.DeviceDataCache`, least recently used out, evicted before each upload; default:
        the node's share of its GPU's pool -- half the free memory, split evenly among the nodes on
        that GPU).  Each partition's metrics report what it holds.
    data_origin : str, optional
        What the training data is, in words, recorded in the run record (``data.origin``) and shown
        by ``sparkdbn status``.  ``sparkdbn train`` records ``"recipe <name>"`` for a recipe, whose
        held-out split ``sparkdbn evaluate --run`` then evaluates on; default: nothing beyond the
        data's kind and shape (a staged dataset's URL is recorded anyway).
    kill_worker_once_at : str, optional
        Test hook ``"<phase>:<epoch>"``: the first node to reach it trains half a partition
        and kills its Python worker with SIGKILL (once per run).
    """

    mode: str = "async"
    averaging_frequency: int = 1
    averaging_nodes: int | None = None
    barrier_timeout_s: float = 300.0
    sharing_threshold: float = 1e-3
    sharing_sparsity: float = 0.01
    straggler_factor: float = 1.0
    epochs: int | dict[str, int] = 5
    default_epochs: int = 5
    initialize_only: bool = False
    batch_size: int | None = None
    partitions: int | None = None
    merge_alpha: float | None = None
    fanout: int | None = None
    scale_rule: str = "auto"
    outer_learning_rate: float | None = None
    outer_momentum: float | None = None
    warmup_partitions: int | None = None
    keep_versions: int = 3
    run_id: str | None = None
    store_url: str | None = None
    seed: int = 0
    shuffle: bool = True
    progress: bool = True
    max_classes: int = DEFAULT_MAX_CLASSES
    lease_timeout_s: float = 60.0
    anti_entropy_interval_s: float = 2.0
    peer_refresh_interval_s: float = 0.5
    store_retry_timeout_s: float = 30.0
    flush_timeout_s: float = 60.0
    features_col: str = "features"
    label_col: str = "label"
    key_file: str | None = None
    stop_after_phase: str | None = None
    validation_fraction: float | None = None
    validation_data: Any = None
    early_stopping: dict[str, Any] | bool | None = None
    log_dir: str | None = DEFAULT_LOG_DIR
    mlflow_tracking_uri: str | bool | None = None
    bind_host: str | None = None
    advertise_host: str | None = None
    port_range: str | None = None
    gpu_data_budget_bytes: int | None = None
    data_origin: str | None = None
    kill_worker_once_at: str | None = None

    def replaced(self, overrides: Mapping[str, Any]) -> "TrainingSettings":
        """A copy with ``overrides`` set; an unknown name is a ``TypeError`` naming it and the closest field."""
        fields = {field.name for field in dataclasses.fields(self)}
        for name in overrides:
            if name in fields:
                continue
            guess = difflib.get_close_matches(name, sorted(fields), n=1, cutoff=0.6)
            if "node" in name or "worker" in name:
                hint = ("the number of nodes is not a setting: one node trains in each executor Python worker "
                        "running the fit's tasks (local[N] runs N)")
            else:
                hint = f"did you mean {guess[0]!r}?" if guess else "node.TrainingSettings lists the settings"
            raise TypeError(f"unknown training setting {name!r}: {hint}")
        return dataclasses.replace(self, **overrides)

    def epochs_for(self, phase: str) -> int:
        """Epochs of ``phase``."""
        if isinstance(self.epochs, Mapping):
            return int(self.epochs.get(phase, self.default_epochs))
        return int(self.epochs)

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad setting."""
        self._validate_numbers()
        check_mode(self.mode)  # the registry knows the modes
        if self.run_id is not None and not str(self.run_id).strip():  # not a new id made silently
            raise ValueError(f"run_id {self.run_id!r} is empty: give a run id, or leave it out for a new one")
        if self.scale_rule not in SCALE_RULES:
            raise ValueError(f"scale_rule must be one of {', '.join(SCALE_RULES)}, got {self.scale_rule!r}")
        if self.warmup_partitions is not None and self.warmup_partitions < 0:
            raise ValueError(f"warmup_partitions must be >= 0, got {self.warmup_partitions}")
        counts = self.epochs.values() if isinstance(self.epochs, Mapping) else [self.epochs]
        if any(int(count) < 0 for count in counts) or self.default_epochs < 0:
            raise ValueError(f"epochs must be >= 0, got {self.epochs!r}")
        for name in ("partitions", "batch_size", "fanout", "averaging_nodes", "gpu_data_budget_bytes"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.merge_alpha is not None and not 0.0 <= self.merge_alpha <= 1.0:
            raise ValueError(f"merge_alpha must lie in [0, 1], got {self.merge_alpha}")
        if self.outer_learning_rate is not None and not 0.0 < self.outer_learning_rate <= 2.0:  # the stable range
            raise ValueError(f"outer_learning_rate must lie in (0, 2], got {self.outer_learning_rate}")
        if self.outer_momentum is not None and not 0.0 <= self.outer_momentum < 1.0:
            raise ValueError(f"outer_momentum must lie in [0, 1), got {self.outer_momentum}")
        if self.averaging_frequency < 1:
            raise ValueError(f"averaging_frequency must be >= 1, got {self.averaging_frequency}")
        if self.barrier_timeout_s <= 0:
            raise ValueError(f"barrier_timeout_s must be > 0, got {self.barrier_timeout_s}")
        if not self.sharing_threshold > 0:
            raise ValueError(f"sharing_threshold must be > 0, got {self.sharing_threshold}")
        if not 0.0 < self.sharing_sparsity <= 1.0:
            raise ValueError(f"sharing_sparsity must lie in (0, 1], got {self.sharing_sparsity}")
        if not self.straggler_factor >= 1.0:
            raise ValueError(f"straggler_factor must be >= 1, got {self.straggler_factor}")
        if self.keep_versions < 1:
            raise ValueError(f"keep_versions must be >= 1, got {self.keep_versions}")
        if self.max_classes < 2:
            raise ValueError(f"max_classes must be >= 2, got {self.max_classes}")
        if self.lease_timeout_s <= 0:
            raise ValueError(f"lease_timeout_s must be > 0, got {self.lease_timeout_s}")
        if not 0 <= self.seed < 2 ** 63:  # numpy's generators take no negative seed
            raise ValueError(f"seed must be an integer in [0, 2**63), got {self.seed}")
        if self.store_retry_timeout_s < 0:
            raise ValueError(f"store_retry_timeout_s must be >= 0 (0: each store operation is tried once), got "
                             f"{self.store_retry_timeout_s}")
        self._validate_watching()
        self._validate_network()

    def _validate_numbers(self) -> None:
        """A numeric setting that is no number (``epochs: three`` in a config file) is refused naming its field,
        before any arithmetic on it fails without saying which."""
        for field in dataclasses.fields(self):
            kind, value = str(field.type).replace(" | None", ""), getattr(self, field.name)
            if field.name == "epochs":
                counts = value.values() if isinstance(value, Mapping) else [value]
                if not all(_is_number(count, integral=True) for count in counts):
                    raise ValueError(f"epochs must be an integer or a mapping of phase to integer, got {value!r}")
            elif kind in ("int", "float") and value is not None and not _is_number(value, integral=kind == "int"):
                raise ValueError(f"{field.name} must be {'an integer' if kind == 'int' else 'a number'}, got {value!r}")

    def _validate_network(self) -> None:
        check_host_settings(self.bind_host, self.advertise_host)
        parse_port_range(self.port_range)

    def _validate_watching(self) -> None:
        if self.validation_fraction is not None and not 0.0 < self.validation_fraction < 1.0:
            raise ValueError(f"validation_fraction must lie in (0, 1), got {self.validation_fraction}")
        if self.validation_fraction is not None and self.validation_data is not None:
            raise ValueError("give validation_fraction or validation_data, not both")
        if EarlyStopping.from_setting(self.early_stopping) is None:
            return
        if not self.validates():
            raise ValueError("early_stopping monitors a validation metric: give validation_fraction or validation_data")
        check_mode(self.mode, early_stopping=True)  # a mode that ends its jobs between epochs

    def validates(self) -> bool:
        """True when epochs end with a validation (every epoch in ``async``; a phase's last in ``sync``, ``sharing``)."""
        return bool(self.validation_fraction) or self.validation_data is not None

    def check_trains_something(self, phases: Sequence[str]) -> None:
        """Raise ``ValueError`` when no phase would train an epoch (and only initializing was not asked)."""
        if not self.initialize_only and all(self.epochs_for(phase) == 0 for phase in phases):
            raise ValueError(f"every phase ({', '.join(phases)}) would train 0 epochs: nothing would be learned; "
                             "give epochs >= 1, or initialize_only=True to store the untrained model on purpose")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: ``validation_data`` is named by its URL or its type only (the rows are not settings)."""
        data = dataclasses.asdict(dataclasses.replace(self, validation_data=None))
        if isinstance(self.validation_data, str):
            data["validation_data"] = self.validation_data
        elif self.validation_data is not None:
            data["validation_data"] = f"<{type(self.validation_data).__name__}>"
        return data


def _is_number(value: Any, integral: bool) -> bool:
    """Whether ``value`` is an integer (``integral``) or a real number; a boolean is neither."""
    return not isinstance(value, bool) and isinstance(value, numbers.Integral if integral else numbers.Real)
