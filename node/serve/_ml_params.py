"""The params of :class:`DBNClassifier` and :class:`DBNClassificationModel` (the model keeps the estimator's
values), each with its getter, as pyspark.ml's shared params are."""

from __future__ import annotations

from typing import Any

from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import (
    HasFeaturesCol,
    HasLabelCol,
    HasPredictionCol,
    HasProbabilityCol,
    HasRawPredictionCol,
    HasSeed,
)

import rbm

from ..modes import MODE_NAMES
from ..watch import DEFAULT_LOG_DIR

__all__ = ["DEVICES", "DBNClassifierParams"]

#: Where the nodes may compute (rbm's ``device``).
DEVICES = ("cpu", "gpu", "auto")


class DBNClassifierParams(HasFeaturesCol, HasLabelCol, HasPredictionCol, HasProbabilityCol, HasRawPredictionCol,
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
    validationFraction: Param[float] = Param(
        Params._dummy(), "validationFraction", "share of the rows held out to validate every epoch, in [0, 1); 0: "
        "none (or the rows validationIndicatorCol marks)", typeConverter=TypeConverters.toFloat)
    validationIndicatorCol: Param[str] = Param(
        Params._dummy(), "validationIndicatorCol", "boolean column whose true rows validate every epoch instead of "
        "training, as GBTClassifier's; empty: none", typeConverter=TypeConverters.toString)
    earlyStoppingPatience: Param[int] = Param(
        Params._dummy(), "earlyStoppingPatience", "stop a phase when the validation loss has not improved for this "
        "many epochs, keeping its best epoch's weights (needs a validation set); 0: never",
        typeConverter=TypeConverters.toInt)
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
            validationFraction=0.0, validationIndicatorCol="", earlyStoppingPatience=0, logDir=DEFAULT_LOG_DIR)

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

    def getValidationFraction(self) -> float:
        return self.getOrDefault(self.validationFraction)

    def getValidationIndicatorCol(self) -> str:
        return self.getOrDefault(self.validationIndicatorCol)

    def getEarlyStoppingPatience(self) -> int:
        return self.getOrDefault(self.earlyStoppingPatience)
