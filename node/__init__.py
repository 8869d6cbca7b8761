"""Spark side of sparkdbn: the driver API, the executor node, evaluation/inference, the CLI.

* :class:`Trainer` / :func:`train` -- decentralized training of any model with the trainable
  seam (``rbm.RBM``, ``rbm.DBN``, ``rbm.ConvNet``) on Spark, one node per executor Python worker;
* :func:`evaluate` / :class:`ClassificationReport` -- distributed evaluation;
  :func:`predict_dataframe` -- distributed inference on a DataFrame;
  :class:`DBNClassifier` / :class:`DBNClassificationModel` -- a pyspark.ml Estimator/Model pair;
* :func:`render_report` -- PNG plots of a run from the metrics in the store;
* :func:`get_spark_session` -- a local SparkSession with embedded defaults (or spark-submit's).
"""

import logging

from ._driver import Trainer, TrainingSettings, default_store_url, train
from ._errors import InputDataError, NodeError, StoreAccessError, TrainingError
from ._evaluation import ClassificationReport, evaluate
from ._inference import predict_dataframe
from ._ml import DBNClassificationModel, DBNClassifier
from ._report import render_report
from ._session import get_spark_session

__all__ = [
    "Trainer",
    "TrainingSettings",
    "train",
    "default_store_url",
    "get_spark_session",
    "evaluate",
    "ClassificationReport",
    "predict_dataframe",
    "DBNClassifier",
    "DBNClassificationModel",
    "render_report",
    "NodeError",
    "InputDataError",
    "StoreAccessError",
    "TrainingError",
]

logging.getLogger(__name__).addHandler(logging.NullHandler())
