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

from pyspark import keyword_only
from pyspark.ml import Estimator
from pyspark.ml.util import DefaultParamsReadable, DefaultParamsWritable

import rbm

from .._errors import InputDataError
from ..driver import Trainer
from ..modes import check_mode
from ..watch import DEFAULT_LOG_DIR
from ._ml_model import DBNClassificationModel
from ._ml_params import DEVICES, DBNClassifierParams

__all__ = ["DBNClassifier", "DBNClassificationModel"]

log = logging.getLogger(__name__)


class DBNClassifier(Estimator, DBNClassifierParams, DefaultParamsReadable, DefaultParamsWritable):
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
                 device: str = "cpu", precision: str = "float32", validationFraction: float = 0.0,
                 validationIndicatorCol: str = "", earlyStoppingPatience: int = 0,
                 logDir: str = DEFAULT_LOG_DIR) -> None:
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
                  validationFraction: float = 0.0, validationIndicatorCol: str = "", earlyStoppingPatience: int = 0,
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

    def setValidationFraction(self, value: float) -> "DBNClassifier":
        """Set ``validationFraction``: the share of the rows held out to validate every epoch (0: none); returns
        self."""
        return self._set(validationFraction=value)

    def setValidationIndicatorCol(self, value: str) -> "DBNClassifier":
        """Set ``validationIndicatorCol``: the boolean column of the rows that validate (empty: none); returns self."""
        return self._set(validationIndicatorCol=value)

    def setEarlyStoppingPatience(self, value: int) -> "DBNClassifier":
        """Set ``earlyStoppingPatience``: the epochs without a better validation loss a phase stops after (0:
        never); returns self."""
        return self._set(earlyStoppingPatience=value)

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
        patience = self.getEarlyStoppingPatience()
        self._check_early_stopping(patience)
        model = self.build_model()
        dataset, validation = self._validation_split(dataset)
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
            validation_fraction=self.getValidationFraction() or None,
            validation_data=validation,
            early_stopping={"metric": "val_loss", "patience": patience} if patience else None,
        )
        trained = trainer.fit(model, dataset)
        log.info("DBNClassifier trained run %s in %s", trainer.run_id_, trainer.store_url)
        result = DBNClassificationModel(trained)
        # The model carries the estimator's params (columns, settings) and the run it came from.
        result = self._copyValues(result)
        result._set(runId=trainer.run_id_ or "", storeUrl=trainer.store_url)
        return result

    def _check_early_stopping(self, patience: int) -> None:
        """Refuse a ``trainingMode`` or early stopping the fit cannot train, in the Params' own names."""
        check_mode(self.getTrainingMode(), early_stopping=patience > 0, param="trainingMode",
                   early_param="earlyStoppingPatience")
        if patience > 0 and not (self.getValidationFraction() or self.getValidationIndicatorCol()):
            raise ValueError("earlyStoppingPatience watches the validation loss: set validationFraction or "
                             "validationIndicatorCol")

    def _validation_split(self, dataset: Any) -> tuple[Any, Any]:
        """``(training rows, validation rows or None)``: the rows ``validationIndicatorCol`` marks validate."""
        column = self.getValidationIndicatorCol()
        if not column:
            return dataset, None
        if self.getValidationFraction():
            raise InputDataError("give validationFraction or validationIndicatorCol, not both")
        if column not in dataset.columns:
            raise InputDataError(f"validationIndicatorCol {column!r} is not a column of the DataFrame "
                                 f"({', '.join(dataset.columns)})")
        kind = dataset.schema[column].dataType.simpleString()
        if kind != "boolean":
            raise InputDataError(f"validationIndicatorCol {column!r} must be boolean (true: a validation row), "
                                 f"it is {kind}")
        from pyspark.sql import functions as F

        marked = F.coalesce(F.col(column), F.lit(False))  # a null marks no validation row
        return dataset.filter(~marked), dataset.filter(marked)


# Saved metadata names the class by its module (DefaultParamsWriter: ``instance.__module__``) and loading imports
# it: the public one, so that a saved Pipeline outlives a move of this private module.
DBNClassifier.__module__ = "node"
