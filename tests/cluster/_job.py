"""The smoke test's driver: runs inside the virtual cluster's driver host (see test_virtual_cluster.py).

Usage: ``_job.py CONF_JSON STORE_URL PARTITIONS PAYLOAD_BYTES RESULT_JSON``.  Each task (on a
worker host) writes ``PAYLOAD_BYTES`` seeded random bytes to ``part-<index>.bin`` in the store
through the real ``hdfs`` client, reads them back, and reports where it ran; the driver lists
the store too and writes everything to ``RESULT_JSON``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from pyspark.sql import SparkSession

import storage

NAMENODE = ("namenode", 9870)


def payload(index: int, size_bytes: int) -> bytes:
    """The bytes task ``index`` writes (the test recomputes them)."""
    return np.random.default_rng(index).bytes(size_bytes)


def _local_address(peer: tuple[str, int]) -> str:
    """The address this host uses to reach ``peer`` (a UDP connect sends nothing)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(peer)
        return probe.getsockname()[0]


def write_and_read(store_url: str, size_bytes: int):
    def task(index: int, _rows: Iterator[Any]) -> Iterator[dict[str, Any]]:
        store = storage.open_store(store_url)
        data = payload(index, size_bytes)
        store.write_bytes(f"part-{index}.bin", data)
        back = store.read_bytes(f"part-{index}.bin")
        yield {"partition": index, "hostname": socket.gethostname(), "address": _local_address(NAMENODE),
               "spark_local_ip": os.environ.get("SPARK_LOCAL_IP"), "pid": os.getpid(),
               "written_sha256": hashlib.sha256(data).hexdigest(), "read_sha256": hashlib.sha256(back).hexdigest()}

    return task


def main(argv: list[str]) -> int:
    conf_path, store_url, partitions, size_bytes, result_path = argv
    builder = SparkSession.builder.appName("virtual-cluster-smoke")
    for key, value in json.loads(Path(conf_path).read_text()).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    try:
        rdd = spark.sparkContext.parallelize(range(int(partitions)), int(partitions))
        tasks = rdd.mapPartitionsWithIndex(write_and_read(store_url, int(size_bytes))).collect()
        result = {"tasks": tasks, "driver_hostname": socket.gethostname(), "master": spark.sparkContext.master,
                  "listed_by_driver": storage.open_store(store_url).list("")}
    finally:
        spark.stop()
    temporary = Path(result_path + ".tmp")
    temporary.write_text(json.dumps(result, indent=1))
    os.replace(temporary, result_path)
    print(f"wrote {result_path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
