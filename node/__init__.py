"""Spark side of sparkdbn: the driver API, the executor node, evaluation/inference, the CLI.

* :class:`Trainer` / :func:`train` -- decentralized training of any model with the trainable
  seam (``rbm.RBM``, ``rbm.DBN``, ``rbm.ConvNet``) on Spark, one node per executor Python worker;
* :func:`evaluate` / :class:`ClassificationReport` -- distributed evaluation;
  :func:`predict_dataframe` -- distributed inference on a DataFrame; :func:`write_predictions` -- to Parquet;
  :class:`DBNClassifier` / :class:`DBNClassificationModel` -- a pyspark.ml Estimator/Model pair;
* :func:`render_report` -- PNG plots of a run from the metrics in the store;
* :func:`open_run` / :func:`load_run_model` -- read a run (record, metrics, results, model) with its key;
* :func:`get_spark_session` -- a local SparkSession with embedded defaults (or spark-submit's);
  :func:`gpu_spark_conf` -- its Spark settings for one node per GPU;
* :func:`stage_dataframe` / :func:`stage_recipe` -- stage a DataFrame or a built-in dataset in the store.
"""

import logging

from ._contract import ContractError
from ._errors import InputDataError, NodeDeviceError, NodeError, StoreAccessError, TrainingError
from .data import RECIPES, stage_dataframe, stage_recipe
from .driver import (SparkConfError, Trainer, TrainingSettings, default_store_url, get_spark_session, gpu_spark_conf,
                     train)
from .modes import MODE_NAMES
from .run import (LeaseHeldError, LeaseLostError, RunKey, RunKeyError, RunView, load_run_model, open_run,
                  resolve_run_key, stored_key_path)
from .serve import (ClassificationReport, DBNClassificationModel, DBNClassifier, evaluate, predict_dataframe,
                    write_predictions)
from .watch import render_report

__all__ = [
    "Trainer",
    "TrainingSettings",
    "MODE_NAMES",
    "train",
    "default_store_url",
    "get_spark_session",
    "gpu_spark_conf",
    "evaluate",
    "ClassificationReport",
    "predict_dataframe",
    "write_predictions",
    "DBNClassifier",
    "DBNClassificationModel",
    "render_report",
    "RunView",
    "open_run",
    "load_run_model",
    "stage_dataframe",
    "stage_recipe",
    "RECIPES",
    "NodeError",
    "InputDataError",
    "StoreAccessError",
    "TrainingError",
    "NodeDeviceError",
    "ContractError",
    "SparkConfError",
    "LeaseHeldError",
    "LeaseLostError",
    "RunKey",
    "RunKeyError",
    "resolve_run_key",
    "stored_key_path",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
