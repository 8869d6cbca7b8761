"""Watching a run: validation, early stopping, live logs, MLflow, reachability, reports and status.

* :mod:`._watch` -- :class:`RunWatch`, what the driver feeds at each epoch's and phase's end;
* :mod:`._validation`, :mod:`._early_stopping` -- held-out figures and when a phase stops;
* :mod:`._live`, :mod:`._mlflow_log`, :mod:`._reachability` -- TensorBoard, MLflow, the nodes' reach;
* :mod:`._report`, :mod:`._status` -- a run's plots and where it stands, read back from the store.
"""

from ._early_stopping import EarlyStopping
from ._reachability import ReachabilityWatch, merges_by_node, merges_text
from ._report import check_report_folder, render_report
from ._status import run_status
from ._validation import ValidationSet, hold_out_validation, is_supervised
from ._watch import DEFAULT_LOG_DIR, RunWatch

__all__ = ["EarlyStopping", "ReachabilityWatch", "merges_by_node", "merges_text", "check_report_folder",
           "render_report", "run_status", "ValidationSet", "hold_out_validation", "is_supervised", "DEFAULT_LOG_DIR",
           "RunWatch"]
