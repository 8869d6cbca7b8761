"""Optional MLflow tracking (``pip install sparkdbn[mlflow]``): params, per-epoch metrics, the model.

One MLflow run per fit, in the experiment ``sparkdbn``, named and tagged with the sparkdbn
run id (a resumed run adds a new MLflow run with the same tag).  The driver logs through an
:class:`mlflow.MlflowClient` of its own (no process-wide active run).  Metrics are
``<phase>.<name>`` with the epoch (from 1) as the step; the final ``model.npz`` is the artifact
``model/model.npz``.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any, Mapping

__all__ = ["MlflowLog", "DEFAULT_TRACKING_URI", "EXPERIMENT"]

logger = logging.getLogger(__name__)

#: Where runs go when MLflow is asked for without a tracking URI.
DEFAULT_TRACKING_URI = "./mlruns"
EXPERIMENT = "sparkdbn"
MAX_PARAM_CHARS = 500


def _tracking_uri(uri: str) -> str:
    """A bare local path as a ``file:`` URI (MLflow's file store)."""
    uri = uri if "://" in uri or uri.startswith("file:") else "file://" + os.path.abspath(uri)
    if uri.startswith("file:"):
        # MLflow 3 refuses its file store unless this is set; a local folder is what was asked
        # for (mlflow-skinny has no database backend).  A value the user set is kept.
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return uri


class MlflowLog:
    """One fit's MLflow run.

    Raises
    ------
    ImportError
        MLflow is not installed.
    """

    def __init__(self, tracking_uri: str, run: str, params: Mapping[str, Any]) -> None:
        from mlflow import MlflowClient
        from mlflow.entities import Param

        self.tracking_uri = _tracking_uri(tracking_uri)
        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        self.run_id = self.client.create_run(_experiment_id(self.client), run_name=run,
                                             tags={"sparkdbn.run": run}).info.run_id
        flat = [Param(key, _param_text(value)) for key, value in sorted(params.items())]
        for start in range(0, len(flat), 100):  # MLflow takes at most 100 params per batch
            self.client.log_batch(self.run_id, params=flat[start:start + 100])

    def epoch(self, phase: str, epoch: int, figures: Mapping[str, float]) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(f"{phase}.{name}", float(value), now, int(epoch) + 1) for name, value in figures.items()
                   if value is not None]
        self.client.log_batch(self.run_id, metrics=metrics)

    def model(self, path: str) -> None:
        self.client.log_artifact(self.run_id, path, artifact_path="model")

    def finish(self, status: str) -> None:
        finished = status in ("done", "stopped", "initialized")
        self.client.set_terminated(self.run_id, "FINISHED" if finished else "FAILED")


def _experiment_id(client: Any) -> str:
    """The id of the experiment :data:`EXPERIMENT`, created when there is none.

    Fits started together (two threads, two notebooks on one tracking store) may both find none:
    the one whose create comes second is refused, and takes the experiment the other created.
    """
    from mlflow.exceptions import MlflowException

    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is not None:
        return experiment.experiment_id
    try:
        return client.create_experiment(EXPERIMENT)
    except MlflowException:
        experiment = client.get_experiment_by_name(EXPERIMENT)
        if experiment is None:  # refused for another reason than another fit creating it first
            raise
        return experiment.experiment_id


def _param_text(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text[:MAX_PARAM_CHARS]
