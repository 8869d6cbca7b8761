"""What one fit is, as plain values: :class:`FitState`, made once its lease is held and its data checked.

The fit hands these values on -- to its Spark jobs (:class:`~node.driver.FitJobs`, and through them to
the training modes), its watch (:class:`~node.watch.RunWatch`) and its nodes' config -- instead of
itself: nobody downstream reads or writes the fit's own attributes, and nothing here changes for
the rest of the fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["FitState"]


@dataclass(frozen=True)
class FitState:
    """One fit's fixed facts once its lease is held (see the module docstring).

    Attributes
    ----------
    run_id : str
        The run.
    fit_id : str
        This fit of it.
    group : str
        The Spark job group of every job of the fit (cancelled when the fit ends).
    store_url : str
    key : bytes
        The run key (never shown: ``repr`` leaves it out).
    spec : dict
        The model's final spec (the settings' ``batch_size`` applied): what the nodes build.
    driver_spec : dict
        The spec of the driver's CPU copy (:func:`node.driver.driver_spec`): the checks, the validation tasks.
    phases : tuple of str
    nodes : int
        Nodes training at once: tasks per training job.
    feature_shape : tuple of int
        Per-sample shape of the training data, e.g. ``(64,)`` or ``(1, 28, 28)``.
    task_gpus : float
        GPUs Spark gives each task (``spark.task.resource.gpu.amount``; 0: none).
    """

    run_id: str
    fit_id: str
    group: str
    store_url: str
    key: bytes = field(repr=False)
    spec: dict
    driver_spec: dict
    phases: tuple[str, ...]
    nodes: int
    feature_shape: tuple[int, ...]
    task_gpus: float = 0.0
