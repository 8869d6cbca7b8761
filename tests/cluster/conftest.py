"""Fixtures of the virtual-cluster tests: one Spark+HDFS cluster for the session, small ones per test.

Every test here needs root and iproute2 (network namespaces); without them they all skip with
the one reason :func:`support.virtual_cluster.cluster_unavailable_reason` gives.  CI runs as
root, so there they run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from support.virtual_cluster import VirtualCluster, cluster_unavailable_reason


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Where no virtual cluster can be built, skip every test that needs one (a marker: one line in -ra)."""
    needing = [item for item in items if "cluster_support" in getattr(item, "fixturenames", ())]
    reason = cluster_unavailable_reason() if needing else None
    for item in needing if reason else []:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def cluster_support() -> None:
    """Marks a test as needing a virtual cluster (root, iproute2): see pytest_collection_modifyitems."""


@pytest.fixture(scope="session")
def spark_cluster(cluster_support: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VirtualCluster]:
    """Hosts driver, master, namenode, datanode, worker1, worker2, with Spark and the store running."""
    with VirtualCluster(workers=2, work_dir=tmp_path_factory.mktemp("spark-cluster")) as cluster:
        yield cluster


@pytest.fixture
def store_cluster(cluster_support: None, tmp_path: Path) -> Iterator[VirtualCluster]:
    """A quick cluster without Spark: hosts driver, namenode, datanode and a spare host ``peer``."""
    with VirtualCluster(workers=0, extra_hosts=["peer"], work_dir=tmp_path / "cluster") as cluster:
        yield cluster
