"""Spark fixtures for the node tests: one shared local session, and a real standalone cluster.

The local session is ``local[2,4]``: two worker threads (so two Python workers, two nodes)
and up to four attempts per task, so a crashed Python worker is retried as on a cluster.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from support.one_node import train_on_one_node
from threadpoolctl import threadpool_limits

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

CLUSTER_START_TIMEOUT_S = 120.0

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


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _spark_class() -> str:
    candidate = Path(sys.executable).parent / "spark-class"
    if candidate.exists():
        return str(candidate)
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _wait_for_line(log: Path, needle: str, process: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        if log.exists() and needle in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise RuntimeError(f"{log.name}: the daemon exited with {process.returncode} before saying "
                               f"{needle!r}:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)  # polling a log file with a deadline
    raise TimeoutError(f"{log.name} did not say {needle!r} within {CLUSTER_START_TIMEOUT_S:.0f} s:\n"
                       f"{log.read_text(errors='replace')[-3000:] if log.exists() else '(no log)'}")


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Spark standalone master and two 1-core workers on 127.0.0.1; yields the master URL."""
    folder = tmp_path_factory.mktemp("cluster")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_LOG_DIR=str(folder), SPARK_WORKER_DIR=str(folder / "work"))
    port, web = _free_port(), _free_port()
    master_url = f"spark://127.0.0.1:{port}"
    started: list[subprocess.Popen] = []
    logs: list = []
    deadline = time.monotonic() + CLUSTER_START_TIMEOUT_S

    def launch(name: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        log = folder / f"{name}.log"
        handle = open(log, "wb")
        logs.append(handle)
        process = subprocess.Popen([_spark_class(), *args], stdout=handle, stderr=subprocess.STDOUT, env=env,
                                   stdin=subprocess.DEVNULL)
        started.append(process)
        return process, log

    try:
        master, master_log = launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                               "--port", str(port), "--webui-port", str(web)])
        _wait_for_line(master_log, "I have been elected leader", master, deadline)
        workers = []
        for index in range(2):
            workers.append(launch(f"worker{index}", [
                "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1", "--memory", "1g",
                "--webui-port", str(_free_port()), "--work-dir", str(folder / f"work{index}"), master_url]))
        for process, log in workers:
            _wait_for_line(log, "Successfully registered with master", process, deadline)
        yield master_url
    finally:
        for process in reversed(started):  # only the PIDs this fixture started (spark-class execs java)
            if process.poll() is None:
                process.terminate()
        for process in reversed(started):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for handle in logs:
            handle.close()
