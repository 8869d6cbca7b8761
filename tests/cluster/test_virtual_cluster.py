"""The virtual cluster tool: hosts in network namespaces, Spark and HDFS roles across them, faults."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from support.virtual_cluster import VirtualCluster, VirtualClusterError
from support.virtual_cluster_state import state_lock

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
JOB_TIMEOUT_S = 300
PAYLOAD_BYTES = 1 << 20
PARTITIONS = 4


def _names_with_prefix(prefix: str) -> list[str]:
    """Everything named with ``prefix`` the machine still has: namespaces, interfaces (in the machine's
    own namespace and in the cluster's namespaces, the only others its interfaces can be in), hosts files.
    Never enters another namespace: another test's cluster may be killing what runs in its own."""
    def words(*command: str, check: bool = True) -> list[str]:
        return subprocess.run(command, capture_output=True, text=True, check=check).stdout.split()

    hosts_files = os.listdir("/etc/netns") if os.path.isdir("/etc/netns") else []
    namespaces = [name for name in words("ip", "netns", "list") if prefix in name]
    found = namespaces + words("ip", "-o", "link")
    for namespace in namespaces:  # (one removed since it was listed has no interfaces left)
        found += words("ip", "-n", namespace, "-o", "link", check=False)
    return [name for name in found + hosts_files if prefix in name]


def _running(pid: int | str) -> bool:
    """Whether process ``pid`` exists and is not a zombie (an orphan waits for init to reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_until(condition, timeout_s: float = 30.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout_s:.0f} s")
        time.sleep(0.1)  # polling with a deadline


def test_a_spark_job_on_two_worker_hosts_writes_and_reads_hdfs_files_through_the_namenode_and_datanode_hosts(
        spark_cluster: VirtualCluster, tmp_path: Path):
    cluster = spark_cluster
    conf_path, result_path = tmp_path / "conf.json", tmp_path / "result.json"
    conf_path.write_text(json.dumps(cluster.spark_conf()))
    namenode_before, datanode_before = cluster.interface_bytes("namenode"), cluster.interface_bytes("datanode")

    driver = cluster.popen("driver", [sys.executable, HERE / "_job.py", conf_path, cluster.store_url("/smoke"),
                                      str(PARTITIONS), str(PAYLOAD_BYTES), result_path],
                           log=tmp_path / "driver.log", role="smoke-driver")
    assert driver.wait(timeout=JOB_TIMEOUT_S) == 0, (tmp_path / "driver.log").read_text()[-5000:]
    result = json.loads(result_path.read_text())

    assert result["driver_hostname"] == "driver"
    assert result["master"] == cluster.master_url
    tasks = result["tasks"]
    assert sorted(task["partition"] for task in tasks) == list(range(PARTITIONS))
    assert {task["hostname"] for task in tasks} == {"worker1", "worker2"}
    for task in tasks:  # each task really ran in the namespace of the host it names
        assert task["address"] == task["spark_local_ip"] == cluster.address(task["hostname"])
        expected = hashlib.sha256(np.random.default_rng(task["partition"]).bytes(PAYLOAD_BYTES)).hexdigest()
        assert task["written_sha256"] == task["read_sha256"] == expected
        on_disk = (cluster.store_root / "smoke" / f"part-{task['partition']}.bin").read_bytes()
        assert hashlib.sha256(on_disk).hexdigest() == expected
    assert result["listed_by_driver"] == [f"part-{index}.bin" for index in range(PARTITIONS)]

    # The data went to and from the datanode host; the namenode host only saw metadata.
    namenode_traffic = cluster.interface_bytes("namenode") - namenode_before
    datanode_traffic = cluster.interface_bytes("datanode") - datanode_before
    total = PARTITIONS * PAYLOAD_BYTES
    assert datanode_traffic.rx_bytes >= total and datanode_traffic.tx_bytes >= total
    assert namenode_traffic.rx_bytes + namenode_traffic.tx_bytes < total / 10


DIRECT_MASTER_DRIVER = """
import json, os, socket, sys
os.environ.pop("SPARK_LOCAL_IP", None)  # nothing said of this host's address: sparkdbn finds the one to the master
import node
master, conf, result = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
spark = node.get_spark_session(master, conf=conf, start_workers=False)
try:
    hosts = spark.sparkContext.parallelize(range(4), 4).map(lambda _: socket.gethostname()).collect()
    found = {"driver_host": spark.conf.get("spark.driver.host"), "hosts": sorted(set(hosts))}
finally:
    spark.stop()
with open(result, "w") as out:
    json.dump(found, out)
"""


def test_a_driver_given_a_standalone_master_directly_binds_the_address_its_executors_reach(
        spark_cluster: VirtualCluster, tmp_path: Path):
    # `sparkdbn evaluate --master spark://...` (no spark-submit) gave its driver 127.0.0.1: the executors, on
    # other hosts, could not reach it, were launched again and again, and the command waited, saying nothing.
    cluster = spark_cluster
    unsaid = ("spark.master", "spark.driver.host", "spark.driver.bindAddress")
    conf = {key: value for key, value in cluster.spark_conf().items() if key not in unsaid}
    result = tmp_path / "result.json"
    driver = cluster.popen("driver", [sys.executable, "-c", DIRECT_MASTER_DRIVER, cluster.master_url,
                                      json.dumps(conf), result], log=tmp_path / "driver.log", role="direct-driver")
    try:
        status = driver.wait(timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        cluster.stop_process(driver)
        pytest.fail("the job never ran: " + (tmp_path / "driver.log").read_text()[-3000:])
    assert status == 0, (tmp_path / "driver.log").read_text()[-5000:]
    found = json.loads(result.read_text())
    assert found["driver_host"] == cluster.address("driver")
    assert found["hosts"] and set(found["hosts"]) <= {"worker1", "worker2"}  # the tasks ran on the workers


def test_every_host_resolves_every_host_by_name_and_carries_its_own_host_name(spark_cluster: VirtualCluster):
    names = list(spark_cluster.hosts)
    for name in names:
        answer = spark_cluster.run(name, ["sh", "-c", 'hostname; getent ahostsv4 "$@" | sort -u', "sh", *names]).stdout
        own, *resolved = answer.split("\n")
        assert own == name
        addresses = {line.split()[0] for line in resolved if line}
        assert addresses == {spark_cluster.address(other) for other in names}


def test_the_machines_own_namespace_has_no_address_route_or_interface_of_the_cluster(spark_cluster: VirtualCluster):
    subnet = ipaddress.IPv4Network(spark_cluster.subnet)
    routes = json.loads(subprocess.run(["ip", "-j", "route"], capture_output=True, text=True, check=True).stdout)
    addresses = json.loads(subprocess.run(["ip", "-j", "addr"], capture_output=True, text=True, check=True).stdout)
    cluster_routes = [route for route in routes if route["dst"] != "default"
                      and ipaddress.IPv4Network(route["dst"], strict=False).overlaps(subnet)]
    cluster_addresses = [info["local"] for link in addresses for info in link.get("addr_info", [])
                         if info["family"] == "inet" and ipaddress.IPv4Address(info["local"]) in subnet]
    assert cluster_routes == [] and cluster_addresses == []
    root_links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert spark_cluster.prefix not in root_links


def test_a_probe_between_hosts_fails_while_the_link_is_cut_and_succeeds_after_it_is_restored(
        store_cluster: VirtualCluster):
    assert store_cluster.can_connect("driver", "namenode", 9870)
    store_cluster.cut_link("namenode")
    assert not store_cluster.can_connect("driver", "namenode", 9870, timeout_s=1.0)
    assert store_cluster.can_connect("driver", "datanode", 9864)  # only that host is cut off
    store_cluster.restore_link("namenode")
    _wait_until(lambda: store_cluster.can_connect("driver", "namenode", 9870), what="namenode reachable again")


def test_interface_counters_count_the_bytes_two_hosts_exchange_and_nothing_on_a_third(store_cluster: VirtualCluster):
    size = 3 << 20
    listener = store_cluster.popen("peer", [sys.executable, "-c", (
        "import socket; server = socket.create_server(('0.0.0.0', 5000)); print('listening', flush=True)\n"
        "connection, _ = server.accept()\n"
        "print(sum(iter(lambda: len(connection.recv(1 << 16)), 0)), flush=True)")], stdout=subprocess.PIPE, text=True)
    assert listener.stdout.readline().strip() == "listening"
    before = {name: store_cluster.interface_bytes(name) for name in ("driver", "peer", "datanode")}
    store_cluster.run("driver", [sys.executable, "-c", (
        f"import socket; s = socket.create_connection(('peer', 5000)); s.sendall(bytes({size})); s.close()")])
    received = listener.communicate(timeout=60)[0]
    traffic = {name: store_cluster.interface_bytes(name) - before[name] for name in before}
    assert int(received) == size
    assert traffic["driver"].tx_bytes >= size and traffic["peer"].rx_bytes >= size
    assert traffic["datanode"].rx_bytes < 10_000  # a few ARP broadcasts at most


def test_a_stopped_store_refuses_connections_and_serves_its_files_again_after_a_restart(
        store_cluster: VirtualCluster):
    reader = [sys.executable, "-c", "import storage, sys; print(storage.open_store(sys.argv[1]).read_bytes('a.txt').decode())",
              store_cluster.store_url("/kept")]
    store_cluster.run("driver", [sys.executable, "-c",
                                 "import storage, sys; storage.open_store(sys.argv[1]).write_bytes('a.txt', b'still here')",
                                 store_cluster.store_url("/kept")])
    store_cluster.stop_store()
    assert not store_cluster.can_connect("driver", "namenode", 9870)
    assert not store_cluster.can_connect("driver", "datanode", 9864)
    store_cluster.start_store()
    assert store_cluster.run("driver", reader).stdout.strip() == "still here"


def test_killing_a_host_ends_its_processes_and_removes_it_while_the_others_go_on(store_cluster: VirtualCluster):
    sleeper = store_cluster.popen("peer", ["sh", "-c", "sleep 600 & sleep 600; wait"])
    namespace = store_cluster.host("peer").namespace
    _wait_until(lambda: len(subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True,
                                           check=True).stdout.split()) == 3, what="three processes on peer")
    killed = store_cluster.kill_host("peer")
    assert sleeper.pid in killed and len(killed) == 3
    assert sleeper.returncode == -9
    assert not any(_running(pid) for pid in killed)
    assert namespace not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    with pytest.raises(VirtualClusterError, match="was killed"):
        store_cluster.can_connect("peer", "driver", 22)
    assert store_cluster.can_connect("driver", "namenode", 9870)


def test_down_leaves_no_namespace_interface_hosts_file_or_process_behind(tmp_path: Path, cluster_support: None):
    cluster = VirtualCluster(workers=0, extra_hosts=["peer"], work_dir=tmp_path).up()
    prefix = cluster.prefix
    # sh ends on SIGTERM; its child does not get the signal and is found in the namespace instead.
    orphan_maker = cluster.popen("peer", ["sh", "-c", "sleep 600 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    orphan = int(orphan_maker.stdout.readline())
    orphan_maker.stdout.close()
    assert _names_with_prefix(prefix)
    cluster.down()
    assert _names_with_prefix(prefix) == []
    assert not _running(orphan)
    assert not (Path("/run/sparkdbn-virtual-cluster") / f"{prefix}.json").exists()


def test_a_cluster_left_by_a_killed_process_is_removed_when_the_next_one_comes_up(tmp_path: Path,
                                                                                  cluster_support: None):
    creator_code = (
        "import subprocess, sys, time; sys.path.insert(0, sys.argv[1])\n"
        "from support.virtual_cluster import VirtualCluster\n"
        "cluster = VirtualCluster(workers=0, work_dir=sys.argv[2]).up()\n"
        "sleeper = cluster.popen('driver', ['sleep', '600'], stdout=subprocess.DEVNULL)\n"
        "print(cluster.prefix, sleeper.pid, flush=True); time.sleep(600)")
    with open(tmp_path / "creator.log", "wb") as creator_log:
        creator = subprocess.Popen([sys.executable, "-c", creator_code, str(HERE.parent), str(tmp_path / "left")],
                                   stdout=subprocess.PIPE, stderr=creator_log, text=True)
        said = creator.stdout.readline().split()
        with state_lock():  # no cluster coming up elsewhere (another test file's) cleans the leftover before we look
            creator.kill()
            creator.wait()
            creator.stdout.close()
            assert len(said) == 2, (tmp_path / "creator.log").read_text()[-3000:]
            prefix, sleeper = said
            assert _names_with_prefix(prefix) and _running(sleeper)  # nothing ran its teardown
    with VirtualCluster(workers=0, store=False, work_dir=tmp_path / "next") as cluster:
        assert _names_with_prefix(prefix) == []
        assert not _running(sleeper)
        assert cluster.prefix != prefix


def test_the_command_line_brings_a_cluster_up_runs_a_command_in_a_host_and_takes_it_down(tmp_path: Path,
                                                                                        cluster_support: None):
    script = str(HERE.parents[1] / "scripts" / "virtual-cluster")
    with open(tmp_path / "up.log", "w") as up_log:
        up = subprocess.Popen([script, "up", "--workers", "0", "--extra-host", "peer", "--work-dir", str(tmp_path / "c")],
                              stdout=subprocess.PIPE, stderr=up_log, text=True)
        first_lines = [up.stdout.readline(), up.stdout.readline()]  # "up in ... s", "cluster <prefix>: ..."
        assert first_lines[1].startswith("cluster "), first_lines + [(tmp_path / "up.log").read_text()]
        prefix = first_lines[1].split()[1].rstrip(":")
        status = subprocess.run([script, "status"], capture_output=True, text=True, check=True).stdout
        assert f"{prefix}-peer" in status and f"{prefix}-namenode" in status
        inside = subprocess.run([script, "exec", "--cluster", prefix, "peer", "--", "sh", "-c", "hostname; getent hosts namenode"],
                                capture_output=True, text=True, check=True).stdout.split()
        assert inside[0] == "peer" and inside[2] == "namenode"
        down = subprocess.run([script, "down", prefix], capture_output=True, text=True)
        assert down.returncode == 0 and f"cluster {prefix} is down" in down.stdout, down.stderr
        assert up.wait(timeout=60) == 0
        up.stdout.close()
    assert _names_with_prefix(prefix) == []
