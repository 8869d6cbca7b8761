"""Serving a trained model: distributed evaluation and inference, the Spark ML estimator.

* :mod:`._evaluation` -- :func:`evaluate`, a :class:`ClassificationReport` computed with Spark;
* :mod:`._inference` -- :func:`predict_dataframe`, :func:`write_predictions`; :mod:`._ml` -- :class:`DBNClassifier` and its model.
"""

from ._evaluation import ClassificationReport, evaluate
from ._inference import predict_dataframe, raise_input_errors_from, write_predictions
from ._ml import DBNClassificationModel, DBNClassifier

__all__ = ["ClassificationReport", "evaluate", "predict_dataframe", "write_predictions", "raise_input_errors_from",
           "DBNClassificationModel", "DBNClassifier"]
