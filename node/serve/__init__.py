"""Serving a trained model: distributed evaluation and inference, the Spark ML estimator.

* :mod:`._evaluation` -- :func:`evaluate`, a :class:`ClassificationReport` computed with Spark;
* :mod:`._inference` -- :func:`predict_dataframe`, :func:`write_predictions`;
* :mod:`._ml` -- :class:`DBNClassifier`, the Spark ML estimator; :mod:`._ml_model` -- its fitted model and its
  save and load; :mod:`._ml_params` -- the params both share.
"""

from ._evaluation import ClassificationReport, evaluate
from ._inference import predict_dataframe, raise_input_errors_from, write_predictions
from ._ml import DBNClassificationModel, DBNClassifier

__all__ = ["ClassificationReport", "evaluate", "predict_dataframe", "write_predictions", "raise_input_errors_from",
           "DBNClassificationModel", "DBNClassifier"]
