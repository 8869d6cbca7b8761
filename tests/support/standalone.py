"""A real Spark standalone cluster on 127.0.0.1 from the pip-installed pyspark: a master, and workers
started (and added while a job runs) one at a time.

Every daemon is a child process this helper started; :meth:`StandaloneCluster.stop` ends those PIDs
and no other.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

START_TIMEOUT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spark_class() -> str:
    candidate = Path(sys.executable).parent / "spark-class"
    if candidate.exists():
        return str(candidate)
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def wait_for_line(log: Path, needle: str, process: subprocess.Popen, deadline: float) -> None:
    """Wait until ``log`` says ``needle``; raise if ``process`` exits first or ``deadline`` passes."""
    while time.monotonic() < deadline:
        if log.exists() and needle in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise RuntimeError(f"{log.name}: the daemon exited with {process.returncode} before saying "
                               f"{needle!r}:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(0.2)  # polling a log file with a deadline
    raise TimeoutError(f"{log.name} did not say {needle!r} within {START_TIMEOUT_S:.0f} s:\n"
                       f"{log.read_text(errors='replace')[-3000:] if log.exists() else '(no log)'}")


class StandaloneCluster:
    """A master on 127.0.0.1 and the workers :meth:`add_worker` starts (each ``cores`` cores, 1 GiB).

    Worker ``k`` works in ``folder / f"work{k}"``: the executors it launches, and the code shipped
    to them, live there.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
                        SPARK_LOG_DIR=str(folder), SPARK_WORKER_DIR=str(folder / "work"))
        self.started: list[subprocess.Popen] = []
        self.logs: list[IO[bytes]] = []
        self.workers = 0
        # Ports chosen by the daemons as they bind (0), read back from the log: a port found free and
        # bound seconds later may be taken in between by any other process, and Spark then moves on.
        master, log = self._launch("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                              "--port", "0", "--webui-port", "0"])
        try:
            wait_for_line(log, "I have been elected leader", master, time.monotonic() + START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        self.url = re.search(r"Starting Spark master at (spark://\S+)", log.read_text(errors="replace")).group(1)

    def work_dir(self, index: int) -> Path:
        return self.folder / f"work{index}"

    def add_worker(self, cores: int = 1) -> int:
        """Start a worker and wait until the master registered it; returns its index."""
        index = self.workers
        self.workers += 1
        process, log = self._launch(f"worker{index}", [
            "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", str(cores), "--memory", "1g",
            "--webui-port", "0", "--work-dir", str(self.work_dir(index)), self.url])
        wait_for_line(log, "Successfully registered with master", process, time.monotonic() + START_TIMEOUT_S)
        return index

    def stop(self) -> None:
        for process in reversed(self.started):  # only the PIDs started here (spark-class execs java)
            if process.poll() is None:
                process.terminate()
        for process in reversed(self.started):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        for handle in self.logs:
            handle.close()

    def _launch(self, name: str, args: list[str]) -> tuple[subprocess.Popen, Path]:
        log = self.folder / f"{name}.log"
        handle = open(log, "wb")
        self.logs.append(handle)
        process = subprocess.Popen([spark_class(), *args], stdout=handle, stderr=subprocess.STDOUT, env=self.env,
                                   stdin=subprocess.DEVNULL)
        self.started.append(process)
        return process, log
