"""The fitted Spark ML model: :class:`DBNClassificationModel`, its ``transform`` on the executors, and its
save and load (Spark's JSON param metadata plus ``model.npz``, the model's own file, read with
``allow_pickle=False``: nothing is pickled)."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
from pyspark.ml import Model
from pyspark.ml.linalg import DenseVector
from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReadable, MLReader, MLWritable, MLWriter

import storage

from .._errors import InputDataError
from ._classes import label_indexed_width, model_classes, spread_to_labels
from ._inference import load_model_here, model_payload, predict_dataframe, raw_predictions
from ._ml_params import DBNClassifierParams

__all__ = ["DBNClassificationModel", "MODEL_FILE"]

MODEL_FILE = "model.npz"


class DBNClassificationModel(Model, DBNClassifierParams, MLReadable, MLWritable):
    """A trained DBN (or any sparkdbn classifier) as a Spark ML transformer.

    It serves on each executor where the task computes (its GPU, else the CPU), whatever
    ``device`` the model was fitted with; :meth:`read` loads a GPU-fitted model on a machine
    without a GPU as a CPU model.

    ``transform(df)`` adds pyspark.ml's classifier columns: ``rawPredictionCol`` (a dense Vector,
    ``log`` of the probabilities), ``probabilityCol`` (a dense Vector of class probabilities) --
    each left out when its param is set to ``""`` -- and ``predictionCol`` (a double: the label; a string
    for a model fitted on string labels), computed per partition through Arrow on the executors.  As in
    Spark ML, the vectors are indexed by label value when the labels are non-negative integers: ``numClasses``
    (``max(label) + 1``) entries, probability 0 for a label no class has, so Spark's evaluators read the right
    entry of labels such as ``{30, 70}``.  For other labels (strings, negative or fractional numbers, or
    labels of 10,000 and more that leave gaps) the entries follow the model's ``classes_``.  ``predict``,
    ``predictProbability`` and ``predictRaw`` give the same for one feature Vector.

    Parameters
    ----------
    model : trained rbm.DBN / rbm.ConvNet, optional
        What ``fit`` produced, or a model trained elsewhere (``rbm.load_model(path)``).
    """

    def __init__(self, model: Any = None) -> None:
        super().__init__()
        self._model = model

    @property
    def model(self) -> Any:
        """The trained single-machine model (``predict``, ``score``, ``save`` ...)."""
        if self._model is None:
            raise InputDataError("this DBNClassificationModel holds no trained model; fit a DBNClassifier or load one")
        return self._model

    def setFeaturesCol(self, value: str) -> "DBNClassificationModel":
        """Set ``featuresCol``: the features column read; returns self."""
        return self._set(featuresCol=value)

    def setPredictionCol(self, value: str) -> "DBNClassificationModel":
        """Set ``predictionCol``: the predicted label's column written; returns self."""
        return self._set(predictionCol=value)

    def setProbabilityCol(self, value: str) -> "DBNClassificationModel":
        """Set ``probabilityCol``: the probability vector's column written (empty: left out); returns self."""
        return self._set(probabilityCol=value)

    def setRawPredictionCol(self, value: str) -> "DBNClassificationModel":
        """Set ``rawPredictionCol``: the raw prediction's column written (empty: left out); returns self."""
        return self._set(rawPredictionCol=value)

    @property
    def numClasses(self) -> int:
        """Entries of the probability and raw prediction vectors: ``max(label) + 1`` when the labels are
        non-negative integers (the vectors are indexed by label value, as Spark ML's), else the number of classes."""
        classes = model_classes(self.model)
        return label_indexed_width(classes) or len(classes)

    @property
    def numFeatures(self) -> int:
        """Features the model takes (its ``n_features_in_``; -1 when it does not say, as Spark's models)."""
        return int(getattr(self.model, "n_features_in_", -1))

    def _class_probabilities(self, value: Any) -> np.ndarray:
        """The model's probabilities of one row of features, shape (n_classes,) float64, ``classes_`` order.

        Computed in float32 from the features, as :meth:`transform` computes them on the executors.
        """
        row = np.asarray(value.toArray() if hasattr(value, "toArray") else value, dtype=np.float32)
        if row.ndim != 1:
            raise InputDataError(f"features must be one Vector (1-D), got shape {row.shape}")
        try:
            proba = self.model.predict_proba(row[None, :])
        except ValueError as error:  # the model's own checks: width, NaN
            raise InputDataError(f"features do not fit the model: {error}") from error
        return np.asarray(proba, dtype=np.float64)[0]

    def predictProbability(self, value: Any) -> DenseVector:
        """The probability vector of one row, as ``transform``'s ``probabilityCol`` (indexed by label value
        when the labels are non-negative integers: :attr:`numClasses` entries).

        Parameters
        ----------
        value : pyspark.ml.linalg.Vector or array-like of shape (n_features,)
            The row's features.
        """
        classes = model_classes(self.model)
        proba = self._class_probabilities(value)
        width = label_indexed_width(classes)
        return DenseVector(proba if width is None else spread_to_labels(proba[None, :], classes, width)[0])

    def predictRaw(self, value: Any) -> DenseVector:
        """The raw prediction of one row, as ``transform``'s ``rawPredictionCol``: ``log`` of
        :meth:`predictProbability` (floored at ``log 1e-300``).

        Parameters
        ----------
        value : pyspark.ml.linalg.Vector or array-like of shape (n_features,)
            The row's features.
        """
        return DenseVector(raw_predictions(self.predictProbability(value).toArray()))

    def predict(self, value: Any) -> float | str:
        """The predicted label of one row, as ``transform``'s ``predictionCol``: a float (a string for a model
        fitted on string labels).

        Parameters
        ----------
        value : pyspark.ml.linalg.Vector or array-like of shape (n_features,)
            The row's features.
        """
        classes = model_classes(self.model)
        label = classes[int(np.argmax(self._class_probabilities(value)))]
        return str(label) if classes.dtype.kind in "US" else float(label)

    def _transform(self, dataset: Any) -> Any:
        return predict_dataframe(
            self.model,
            dataset,
            features_col=self.getFeaturesCol(),
            prediction_col=self.getPredictionCol(),
            probability_col=self.getProbabilityCol() or None,
            raw_prediction_col=self.getRawPredictionCol() or None,
            batch_size=max(1024, int(self.getBatchSize())),
            probability_type="vector",
            label_indexed=True,  # as Spark ML's classifiers, for its evaluators
        )

    def write(self) -> MLWriter:
        return _ModelWriter(self)

    @classmethod
    def read(cls) -> MLReader:
        return _ModelReader(cls)


# Saved metadata names the class by its module (DefaultParamsWriter: ``instance.__module__``) and loading imports
# it: the public one, so that a saved PipelineModel outlives a move of this private module. (One saved before
# names node.serve._ml, which still has it.)
DBNClassificationModel.__module__ = "node"


class _ModelWriter(MLWriter):
    """Spark's JSON param metadata plus ``model.npz`` (the model's own file format)."""

    def __init__(self, instance: DBNClassificationModel) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        payload = model_payload(self.instance.model)
        DefaultParamsWriter.saveMetadata(self.instance, path, self.sparkSession,
                                         extraMetadata={"modelFile": MODEL_FILE, "modelBytes": len(payload)})
        storage.open_store(path).write_bytes(MODEL_FILE, payload)


def _model_file_bound(metadata: dict) -> dict:
    """``read_bytes`` keywords bounding the saved model file: by the size its metadata records, else (saved before
    it recorded one, or edited) by the store's cap, checked by the file's size before it is read."""
    size = metadata.get("modelBytes")
    if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
        return {"max_bytes": size}
    return {"max_bytes": storage.UNRECORDED_FILE_MAX_BYTES, "stat_first": True}


class _ModelReader(MLReader):
    def __init__(self, cls: type) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> DBNClassificationModel:
        metadata = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        store = storage.open_store(path)
        name = metadata.get("modelFile", MODEL_FILE)
        if not store.exists(name):
            raise InputDataError(f"{path!r} holds no {name}: it was not saved by DBNClassificationModel.save")
        with tempfile.TemporaryDirectory(prefix="sparkdbn-load-") as directory:
            local = os.path.join(directory, MODEL_FILE)
            with open(local, "wb") as handle:
                handle.write(store.read_bytes(name, **_model_file_bound(metadata)))
            model = load_model_here(local)  # allow_pickle=False inside
        instance = self.cls(model)
        instance._resetUid(metadata["uid"])
        DefaultParamsReader.getAndSetParams(instance, metadata)
        return instance
