"""The driver side: the Trainer, one fit of a run, its Spark jobs, its settings and its session.

* :mod:`._trainer` -- :class:`Trainer` and :func:`train`, the driver API;
* :mod:`._fit` -- :class:`Fit`, one ``Trainer.fit``: lease, data, record, what it holds released;
* :mod:`._fit_state`, :mod:`._fit_phases` -- its values once the lease is held, and its phases
  completed with them, the model saved;
* :mod:`._fit_data`, :mod:`._node_config` -- what a fit trains on and tells its nodes;
* :mod:`._devices` -- where its nodes compute: the driver's CPU copy, Spark's GPU settings, the probe;
* :mod:`._fit_jobs`, :mod:`._training_job`, :mod:`._progress` -- its Spark jobs (what a training
  mode's driver half gets: :class:`FitJobs`), one started job, the progress bar;
* :mod:`._settings`, :mod:`._spark_conf`, :mod:`._session` -- settings, ``spark.sparkdbn.*``, the session.
"""

from ._devices import driver_spec, gpu_spark_conf
from ._fit import Fit
from ._fit_jobs import FitJobs
from ._session import DEFAULT_MASTER, get_spark_session, running_under_spark_submit
from ._settings import TrainingSettings
from ._spark_conf import SparkConfError
from ._trainer import Trainer, default_store_url, train
from ._training_job import TrainingJob

__all__ = ["driver_spec", "gpu_spark_conf", "Fit", "FitJobs", "get_spark_session", "TrainingSettings", "SparkConfError",
           "Trainer", "default_store_url", "train", "TrainingJob", "DEFAULT_MASTER", "running_under_spark_submit"]
