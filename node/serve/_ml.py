"""A Spark ML Estimator/Model pair for DBN classifiers: ``DBNClassifier`` -> ``DBNClassificationModel``.

``DBNClassifier.fit(df)`` trains an :class:`rbm.DBN` with the decentralized trainer
(:class:`node.Trainer`: one node per executor Python worker, weights through the store) and
returns a :class:`DBNClassificationModel`, whose ``transform`` adds pyspark.ml's classifier columns
(``rawPrediction``, ``probability``, ``prediction``) on the executors (:func:`node.predict_dataframe`).
Without a ``storeUrl`` a fit's run lives in a temporary store removed when the fit ends (tuning
with ``CrossValidator`` leaves nothing behind); with one, every fit's run is kept there.  Both work inside a
``pyspark.ml.Pipeline`` and save/load like any Spark ML stage:

* the estimator's params are Spark's usual JSON metadata (``<path>/metadata``);
* the model adds ``<path>/model.npz``, the file ``model.save`` writes (named arrays plus the JSON
  spec, read back with ``allow_pickle=False``) -- nothing is pickled.

The model file is written and read through :func:`storage.open_store`, so ``<path>`` may be a
local path, ``file://`` or ``hdfs://`` (WebHDFS) URL; Spark writes the metadata through Hadoop,
so for HDFS use a URL both understand (or save locally and stage the directory).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any

import numpy as np
from pyspark import keyword_only
from pyspark.ml import Estimator, Model
from pyspark.ml.linalg import DenseVector
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import (
    HasFeaturesCol,
    HasLabelCol,
    HasPredictionCol,
    HasProbabilityCol,
    HasRawPredictionCol,
    HasSeed,
)
from pyspark.ml.util import (
    DefaultParamsReadable,
    DefaultParamsReader,
    DefaultParamsWritable,
    DefaultParamsWriter,
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)

import rbm
import storage

from .._errors import InputDataError
from ..driver import Trainer
from ..modes import MODE_NAMES
from ..watch import DEFAULT_LOG_DIR
from ._classes import label_indexed_width, model_classes, spread_to_labels
from ._inference import load_model_here, model_payload, predict_dataframe, raw_predictions

__all__ = ["DBNClassifier", "DBNClassificationModel"]

log = logging.getLogger(__name__)

MODEL_FILE = "model.npz"

#: Where the nodes may compute (rbm's ``device``).
DEVICES = ("cpu", "gpu", "auto")


class _DBNClassifierParams(HasFeaturesCol, HasLabelCol, HasPredictionCol, HasProbabilityCol, HasRawPredictionCol,
                           HasSeed):
    """Params shared by the estimator and the model (the model keeps the estimator's values)."""

    hiddenLayerSizes: Param[list[int]] = Param(
        Params._dummy(), "hiddenLayerSizes", "units of each hidden RBM layer, bottom first",
        typeConverter=TypeConverters.toListInt)
    pretrainEpochs: Param[int] = Param(
        Params._dummy(), "pretrainEpochs", "epochs of contrastive-divergence pre-training per RBM layer (>= 0)",
        typeConverter=TypeConverters.toInt)
    finetuneEpochs: Param[int] = Param(
        Params._dummy(), "finetuneEpochs", "epochs of supervised fine-tuning (>= 0)", typeConverter=TypeConverters.toInt)
    batchSize: Param[int] = Param(Params._dummy(), "batchSize", "minibatch size (>= 1)", typeConverter=TypeConverters.toInt)
    learningRate: Param[float] = Param(
        Params._dummy(), "learningRate", "learning rate of RBM pre-training", typeConverter=TypeConverters.toFloat)
    finetuneLearningRate: Param[float] = Param(
        Params._dummy(), "finetuneLearningRate", "learning rate of fine-tuning", typeConverter=TypeConverters.toFloat)
    storeUrl: Param[str] = Param(
        Params._dummy(), "storeUrl", "store that keeps each fit's run: weights, metrics and the model (path, "
        "file:// or hdfs:// URL); empty (default): a temporary store removed when the fit ends, so tuning "
        "(CrossValidator, TrainValidationSplit) leaves nothing behind", typeConverter=TypeConverters.toString)
    numPartitions: Param[int] = Param(
        Params._dummy(), "numPartitions", "RDD partitions per epoch; 0: twice Spark's default parallelism",
        typeConverter=TypeConverters.toInt)
    fanout: Param[int] = Param(
        Params._dummy(), "fanout", "peers merged at most per partition; 0: every fresh peer",
        typeConverter=TypeConverters.toInt)
    runId: Param[str] = Param(
        Params._dummy(), "runId", "run id in the store (reusing one resumes it); empty: a new id",
        typeConverter=TypeConverters.toString)
    progress: Param[bool] = Param(
        Params._dummy(), "progress", "show the driver's progress bar and per-epoch summaries",
        typeConverter=TypeConverters.toBoolean)
    trainingMode: Param[str] = Param(
        Params._dummy(), "trainingMode", f"how nodes combine their progress: {', '.join(MODE_NAMES)}",
        typeConverter=TypeConverters.toString)
    device: Param[str] = Param(
        Params._dummy(), "device", "where the nodes compute: cpu, gpu (the GPU Spark assigns each task; refused "
        "where it assigns none) or auto (that GPU where usable, else the CPU)", typeConverter=TypeConverters.toString)
    precision: Param[str] = Param(
        Params._dummy(), "precision", f"GEMM precision on GPUs: {', '.join(rbm.PRECISIONS)} (float32 on CPUs)",
        typeConverter=TypeConverters.toString)
    logDir: Param[str] = Param(
        Params._dummy(), "logDir", f"folder of the live TensorBoard event files, one folder per run "
        f"(<logDir>/<run>; default {DEFAULT_LOG_DIR}, for a fit with a storeUrl); empty: none.  Without a "
        "storeUrl a fit writes them only where logDir is set", typeConverter=TypeConverters.toString)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._setDefault(
            featuresCol="features", labelCol="label", predictionCol="prediction", probabilityCol="probability",
            rawPredictionCol="rawPrediction", hiddenLayerSizes=[256, 256], pretrainEpochs=5, finetuneEpochs=10,
            batchSize=10, learningRate=0.1, finetuneLearningRate=0.1, storeUrl="", numPartitions=0, fanout=0,
            runId="", progress=True, seed=0, trainingMode="async", device="cpu", precision="float32",
            logDir=DEFAULT_LOG_DIR)

    def getHiddenLayerSizes(self) -> list[int]:
        return self.getOrDefault(self.hiddenLayerSizes)

    def getPretrainEpochs(self) -> int:
        return self.getOrDefault(self.pretrainEpochs)

    def getFinetuneEpochs(self) -> int:
        return self.getOrDefault(self.finetuneEpochs)

    def getBatchSize(self) -> int:
        return self.getOrDefault(self.batchSize)

    def getLearningRate(self) -> float:
        return self.getOrDefault(self.learningRate)

    def getFinetuneLearningRate(self) -> float:
        return self.getOrDefault(self.finetuneLearningRate)

    def getStoreUrl(self) -> str:
        return self.getOrDefault(self.storeUrl)

    def getNumPartitions(self) -> int:
        return self.getOrDefault(self.numPartitions)

    def getFanout(self) -> int:
        return self.getOrDefault(self.fanout)

    def getRunId(self) -> str:
        return self.getOrDefault(self.runId)

    def getProgress(self) -> bool:
        return self.getOrDefault(self.progress)

    def getDevice(self) -> str:
        return self.getOrDefault(self.device)

    def getPrecision(self) -> str:
        return self.getOrDefault(self.precision)

    def getTrainingMode(self) -> str:
        return self.getOrDefault(self.trainingMode)

    def getLogDir(self) -> str:
        return self.getOrDefault(self.logDir)


class DBNClassifier(Estimator, _DBNClassifierParams, DefaultParamsReadable, DefaultParamsWritable):
    """Spark ML estimator: a deep belief net classifier trained by decentralized nodes on Spark.

    Features are ``array<float|double>`` or ``pyspark.ml.linalg`` Vectors in [0, 1] (Bernoulli
    visible units); labels are classes as scikit-learn takes them: numbers (integers or whole doubles,
    such as the ``0 .. k-1`` Spark ML's indexers produce, or any others: ``{30, 70}`` is two classes) or
    strings, which the model then predicts.  Leave ``runId`` unset inside a tuner (``CrossValidator``,
    ``TrainValidationSplit``): a run is one model on one dataset, and a second fold's fit of it is refused.

    Examples
    --------
    >>> classifier = DBNClassifier(hiddenLayerSizes=[128, 64], pretrainEpochs=3, finetuneEpochs=5)
    >>> model = Pipeline(stages=[assembler, classifier]).fit(train_df)   # doctest: +SKIP
    >>> model.transform(test_df).select("prediction", "probability")     # doctest: +SKIP
    """

    @keyword_only
    def __init__(self, *, featuresCol: str = "features", labelCol: str = "label", predictionCol: str = "prediction",
                 probabilityCol: str = "probability", rawPredictionCol: str = "rawPrediction",
                 hiddenLayerSizes: list[int] | None = None,
                 pretrainEpochs: int = 5, finetuneEpochs: int = 10, batchSize: int = 10, learningRate: float = 0.1,
                 finetuneLearningRate: float = 0.1, storeUrl: str = "", numPartitions: int = 0, fanout: int = 0,
                 runId: str = "", progress: bool = True, seed: int = 0, trainingMode: str = "async",
                 device: str = "cpu", precision: str = "float32", logDir: str = DEFAULT_LOG_DIR) -> None:
        super().__init__()
        kwargs = {key: value for key, value in self._input_kwargs.items() if value is not None}
        self._set(**kwargs)

    @keyword_only
    def setParams(self, *, featuresCol: str = "features", labelCol: str = "label", predictionCol: str = "prediction",
                  probabilityCol: str = "probability", rawPredictionCol: str = "rawPrediction",
                  hiddenLayerSizes: list[int] | None = None,
                  pretrainEpochs: int = 5, finetuneEpochs: int = 10, batchSize: int = 10, learningRate: float = 0.1,
                  finetuneLearningRate: float = 0.1, storeUrl: str = "", numPartitions: int = 0, fanout: int = 0,
                  runId: str = "", progress: bool = True, seed: int = 0,
                  trainingMode: str = "async", device: str = "cpu", precision: str = "float32",
                  logDir: str = DEFAULT_LOG_DIR) -> "DBNClassifier":
        """Set any of the constructor's params; returns self."""
        kwargs = {key: value for key, value in self._input_kwargs.items() if value is not None}
        return self._set(**kwargs)

    def setFeaturesCol(self, value: str) -> "DBNClassifier":
        """Set ``featuresCol``: the features column read; returns self."""
        return self._set(featuresCol=value)

    def setLabelCol(self, value: str) -> "DBNClassifier":
        """Set ``labelCol``: the label column read; returns self."""
        return self._set(labelCol=value)

    def setPredictionCol(self, value: str) -> "DBNClassifier":
        """Set ``predictionCol``: the predicted label's column written; returns self."""
        return self._set(predictionCol=value)

    def setProbabilityCol(self, value: str) -> "DBNClassifier":
        """Set ``probabilityCol``: the probability vector's column written (empty: left out); returns self."""
        return self._set(probabilityCol=value)

    def setRawPredictionCol(self, value: str) -> "DBNClassifier":
        """Set ``rawPredictionCol``: the raw prediction's column written (empty: left out); returns self."""
        return self._set(rawPredictionCol=value)

    def setHiddenLayerSizes(self, value: list[int]) -> "DBNClassifier":
        """Set ``hiddenLayerSizes``: the units of each hidden RBM layer, bottom first; returns self."""
        return self._set(hiddenLayerSizes=value)

    def setPretrainEpochs(self, value: int) -> "DBNClassifier":
        """Set ``pretrainEpochs``: the epochs of contrastive-divergence pre-training per RBM layer; returns self."""
        return self._set(pretrainEpochs=value)

    def setFinetuneEpochs(self, value: int) -> "DBNClassifier":
        """Set ``finetuneEpochs``: the epochs of supervised fine-tuning; returns self."""
        return self._set(finetuneEpochs=value)

    def setBatchSize(self, value: int) -> "DBNClassifier":
        """Set ``batchSize``: the minibatch size; returns self."""
        return self._set(batchSize=value)

    def setLearningRate(self, value: float) -> "DBNClassifier":
        """Set ``learningRate``: the learning rate of RBM pre-training; returns self."""
        return self._set(learningRate=value)

    def setFinetuneLearningRate(self, value: float) -> "DBNClassifier":
        """Set ``finetuneLearningRate``: the learning rate of fine-tuning; returns self."""
        return self._set(finetuneLearningRate=value)

    def setStoreUrl(self, value: str) -> "DBNClassifier":
        """Set ``storeUrl``: the store that keeps each fit's run (empty: a temporary store per fit); returns self."""
        return self._set(storeUrl=value)

    def setNumPartitions(self, value: int) -> "DBNClassifier":
        """Set ``numPartitions``: the RDD partitions per epoch (0: twice Spark's default parallelism); returns self."""
        return self._set(numPartitions=value)

    def setFanout(self, value: int) -> "DBNClassifier":
        """Set ``fanout``: the peers merged at most per partition (0: every fresh peer); returns self."""
        return self._set(fanout=value)

    def setRunId(self, value: str) -> "DBNClassifier":
        """Set ``runId``: the run id in the store (empty: a new id per fit); returns self."""
        return self._set(runId=value)

    def setProgress(self, value: bool) -> "DBNClassifier":
        """Set ``progress``: whether the driver shows its progress bar and per-epoch summaries; returns self."""
        return self._set(progress=value)

    def setSeed(self, value: int) -> "DBNClassifier":
        """Set ``seed``: the random seed; returns self."""
        return self._set(seed=value)

    def setTrainingMode(self, value: str) -> "DBNClassifier":
        """Set ``trainingMode``: how nodes combine their progress; returns self."""
        return self._set(trainingMode=value)

    def setDevice(self, value: str) -> "DBNClassifier":
        """Set ``device``: where the nodes compute: cpu, gpu or auto; returns self."""
        return self._set(device=value)

    def setPrecision(self, value: str) -> "DBNClassifier":
        """Set ``precision``: the GEMM precision on GPUs; returns self."""
        return self._set(precision=value)

    def setLogDir(self, value: str) -> "DBNClassifier":
        """Set ``logDir``: the folder of the live TensorBoard event files (empty: none); returns self."""
        return self._set(logDir=value)

    def build_model(self) -> Any:
        """The untrained :class:`rbm.DBN` these params describe."""
        sizes = self.getHiddenLayerSizes()
        if not sizes or min(sizes) < 1:
            raise InputDataError(f"hiddenLayerSizes must be a non-empty list of positive ints, got {sizes}")
        if self.getDevice() not in DEVICES:
            raise InputDataError(f"device must be one of {', '.join(DEVICES)}, got {self.getDevice()!r}")
        if self.getPrecision() not in rbm.PRECISIONS:
            raise InputDataError(f"precision must be one of {', '.join(rbm.PRECISIONS)}, got {self.getPrecision()!r}")
        return rbm.DBN(
            hidden_layer_sizes=list(sizes),
            pretrain_epochs=self.getPretrainEpochs(),  # the fit's epochs, as the fitted model's params say
            finetune_epochs=self.getFinetuneEpochs(),
            pretrain_learning_rate=self.getLearningRate(),
            finetune_learning_rate=self.getFinetuneLearningRate(),
            batch_size=self.getBatchSize(),
            random_state=self.getOrDefault(self.seed),
            device=self.getDevice(),
            precision=self.getPrecision(),
        )

    def _fit(self, dataset: Any) -> "DBNClassificationModel":
        if self.getStoreUrl():
            return self._fit_in(dataset, self.getStoreUrl(), key=None, log_dir=self.getLogDir() or None)
        # No store asked for: the run lives in a temporary folder for the fit only, with a key that is
        # never kept (nothing under ~/.config either) and no TensorBoard files unless logDir names a folder;
        # the model stays in memory and is written where the user saves it.
        log_dir = (self.getLogDir() or None) if self.isSet(self.logDir) else None
        folder = tempfile.mkdtemp(prefix="sparkdbn-fit-")
        try:
            fitted = self._fit_in(dataset, "file://" + folder, key=os.urandom(32), log_dir=log_dir)
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # only the folder this fit made
        fitted._set(runId="", storeUrl="")
        return fitted

    def _fit_in(self, dataset: Any, store_url: str, key: bytes | None, log_dir: str | None) -> "DBNClassificationModel":
        model = self.build_model()
        epochs = {phase: (self.getFinetuneEpochs() if phase == "finetune" else self.getPretrainEpochs())
                  for phase in model.phases()}
        trainer = Trainer(
            spark=dataset.sparkSession,
            store_url=store_url,
            key=key,
            log_dir=log_dir,
            epochs=epochs,
            partitions=self.getNumPartitions() or None,
            fanout=self.getFanout() or None,
            run_id=self.getRunId() or None,
            seed=int(self.getOrDefault(self.seed)) % (2**31),
            progress=self.getProgress(),
            mode=self.getTrainingMode(),
            features_col=self.getFeaturesCol(),
            label_col=self.getLabelCol(),
        )
        trained = trainer.fit(model, dataset)
        log.info("DBNClassifier trained run %s in %s", trainer.run_id_, trainer.store_url)
        result = DBNClassificationModel(trained)
        # The model carries the estimator's params (columns, settings) and the run it came from.
        result = self._copyValues(result)
        result._set(runId=trainer.run_id_ or "", storeUrl=trainer.store_url)
        return result


class DBNClassificationModel(Model, _DBNClassifierParams, MLReadable, MLWritable):
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
# names node.serve._ml, which loads while this module is here.)
DBNClassifier.__module__ = DBNClassificationModel.__module__ = "node"


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
