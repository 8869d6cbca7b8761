"""Spark side of sparkdbn: the driver API, the executor node, evaluation/inference, the CLI.

* :class:`Trainer` / :func:`train` -- decentralized training of any model with the trainable
  seam (``rbm.RBM``, ``rbm.DBN``, ``rbm.ConvNet``) on Spark, one node per executor Python worker;
* :func:`evaluate` / :class:`ClassificationReport` -- distributed evaluation;
  :func:`predict_dataframe` -- distributed inference on a DataFrame;
  :class:`DBNClassifier` / :class:`DBNClassificationModel` -- a pyspark.ml Estimator/Model pair;
* :func:`render_report` -- PNG plots of a run from the metrics in the store;
* :func:`open_run` / :func:`load_run_model` -- read a run (record, metrics, results, model) with its key;
* :func:`get_spark_session` -- a local SparkSession with embedded defaults (or spark-submit's);
* :func:`stage_dataframe` / :func:`stage_recipe` -- stage a DataFrame or a built-in dataset in the store.
"""

import logging

from ._contract import ContractError
from .driver._trainer import Trainer, default_store_url, train
from .run._keys import RunKey, RunKeyError, resolve_run_key, stored_key_path
from .run._lease import LeaseHeldError, LeaseLostError
from ._errors import InputDataError, NodeError, StoreAccessError, TrainingError
from .serve._evaluation import ClassificationReport, evaluate
from .serve._inference import predict_dataframe
from .serve._ml import DBNClassificationModel, DBNClassifier
from .modes._registry import MODE_NAMES
from .watch._report import render_report
from .run._run_access import RunView, load_run_model, open_run
from .driver._session import get_spark_session
from .driver._settings import TrainingSettings
from .driver._spark_conf import SparkConfError
from .data._staging import RECIPES, stage_dataframe, stage_recipe

__all__ = [
    "Trainer",
    "TrainingSettings",
    "MODE_NAMES",
    "train",
    "default_store_url",
    "get_spark_session",
    "evaluate",
    "ClassificationReport",
    "predict_dataframe",
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
