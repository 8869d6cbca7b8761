"""Spark fixtures for the node tests: one shared local session, and a real standalone cluster.

The local session is ``local[2,4]``: two worker threads (so two Python workers, two nodes)
and up to four attempts per task, so a crashed Python worker is retried as on a cluster.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest
from support.one_node import train_on_one_node
from support.standalone import StandaloneCluster
from threadpoolctl import threadpool_limits

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

# The DBN the training and fault tests share: 64-100-100 on load_digits01().  Two nodes that
# average their progress move about half as far per epoch as one node, so the epochs are enough
# for both to reach the plateau (~0.97 on the held-out split); with fewer (5, 5, 20) the pair
# trailed the single node by about a point in an in-process simulation of the merges.
PARTITIONS = 4
DBN_EPOCHS = {"rbm0": 8, "rbm1": 8, "finetune": 30}
DBN_SETTINGS = dict(hidden_layer_sizes=(100, 100), batch_size=10, pretrain_learning_rate=0.2,
                    finetune_learning_rate=0.2, finetune_dropout=0.0, random_state=0)


class DBNRecipe:
    """The shared small DBN: ``make()`` builds one, ``reference_accuracy(split)`` trains it on one node
    (once per split: the result is kept for the session's later tests)."""

    partitions = PARTITIONS
    epochs = DBN_EPOCHS
    settings = DBN_SETTINGS

    def __init__(self) -> None:
        self._accuracy: dict[int, tuple[object, float]] = {}  # id(split) -> (split, accuracy)

    @staticmethod
    def make():
        import rbm

        return rbm.DBN(**DBN_SETTINGS)

    def reference_accuracy(self, split) -> float:
        if id(split) not in self._accuracy:
            model = train_on_one_node(self.make(), split.X_train, split.y_train, self.epochs, self.partitions)
            self._accuracy[id(split)] = (split, model.score(split.X_test, split.y_test))
        return self._accuracy[id(split)][1]


@pytest.fixture(scope="session")
def executor_blas_threads(spark) -> int:
    """The BLAS thread count of the shared session's Python workers (Spark starts them with
    ``OMP_NUM_THREADS`` = ``spark.task.cpus`` unless the environment says otherwise)."""

    def threads(_partition):
        from threadpoolctl import threadpool_info

        yield max((pool["num_threads"] for pool in threadpool_info() if pool.get("user_api") == "blas"), default=1)

    return max(spark.sparkContext.parallelize([0, 1], 2).mapPartitions(threads).collect())


@pytest.fixture(scope="session")
def one_node_reference(executor_blas_threads):
    """:func:`train_on_one_node` on the executors' BLAS thread count: a node's GEMMs split as they do
    there, so one node and this reference run the same floating-point operations (on OpenBLAS's
    Haswell kernels one thread and two round differently)."""

    def train(*args, **kwargs):
        with threadpool_limits(limits=executor_blas_threads, user_api="blas"):
            return train_on_one_node(*args, **kwargs)

    return train


@pytest.fixture(scope="session")
def dbn_recipe() -> DBNRecipe:
    return DBNRecipe()


@pytest.fixture(scope="session")
def digits():
    from rbm.datasets import load_digits01

    return load_digits01()


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    return "file://" + str(tmp_path / "store")


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone master and two 1-core workers on 127.0.0.1; yields the master URL."""
    cluster = StandaloneCluster(tmp_path_factory.mktemp("cluster"))
    try:
        cluster.add_worker()
        cluster.add_worker()
        yield cluster.url
    finally:
        cluster.stop()
