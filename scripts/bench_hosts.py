"""Multi-host benchmark on the virtual cluster (needs root and iproute2; docs/cluster.md, the virtual cluster).

    sudo .venv/bin/python scripts/bench_hosts.py [--announcements 300] [--epochs 1] [--dataset digits28]

1. Announcement latency: one node process publishes signed announcements at a steady pace, another
   receives them through the real transport; the latency is receipt time minus the announcement's
   ``sent_at`` (one machine, one clock).  Across two worker hosts (through the bridge) and on one
   host's loopback, median and p99, and their ratio.
2. Training with 1, 2 and 3 worker hosts (``spark.cores.max`` = K on a 3-worker cluster, store
   ``hdfs://`` on the namenode host): a 784-500-500 DBN on digits28, one epoch per phase by
   default.  Per node and partition: bytes in and out of the node's host interface (its
   counters), beside what the node's partition reports say it wrote and read from the store
   (``sent_bytes``/``read_bytes``: weights only, no HTTP, Spark or ZeroMQ overhead); samples/s.

All hosts share the machine's cores (2 here): more worker hosts do not bring more compute, so
samples/s measures the cost of coordination, not a speed-up.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.virtual_cluster import VirtualCluster, cluster_unavailable_reason  # noqa: E402

from _results import BenchRun, add_json_option  # noqa: E402

PEER_CODE = r'''
import json, sys, time, threading
from actors import WeightAnnouncement, decode_frames, encode_message
from actors._transport import Transport
role, bind, count, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
SECRET, RUN = b"bench-hosts-secret-0123456789", "bench"
latencies, done = [], threading.Event()
def on_frames(frames):
    message = decode_frames(frames, SECRET, RUN)
    latencies.append(time.time() - message.sent_at)
    if len(latencies) >= count:
        done.set()
transport = Transport(bind, on_frames, lambda: [], role, SECRET).start()
print(transport.endpoint, flush=True)
if role == "sub":
    transport.set_peers([sys.stdin.readline().strip()])
    done.wait(120)
    json.dump(latencies, open(out, "w"))
else:
    sys.stdin.readline()  # the subscriber is connected
    for version in range(count + 20):  # a few extra: the first may race the subscription
        transport.send(encode_message(WeightAnnouncement(run=RUN, node="pub", phase="rbm0", version=version,
                       sha256="0" * 64, mac="0" * 64, samples_seen=version, sent_at=time.time()), SECRET))
        time.sleep(0.01)
    time.sleep(1.0)
transport.close()
'''


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def announcement_latency(cluster: VirtualCluster, pub_host: str, sub_host: str, loopback: bool, count: int,
                         work: Path) -> list[float]:
    out = work / f"latency-{pub_host}-{sub_host}-{loopback}.json"
    bind_pub = "127.0.0.1" if loopback else cluster.address(pub_host)
    bind_sub = "127.0.0.1" if loopback else cluster.address(sub_host)
    sub = cluster.popen(sub_host, [sys.executable, "-c", PEER_CODE, "sub", bind_sub, str(count), str(out)],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pub = cluster.popen(pub_host, [sys.executable, "-c", PEER_CODE, "pub", bind_pub, str(count), "-"],
                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        sub.stdout.readline()
        endpoint = pub.stdout.readline().strip()
        sub.stdin.write(endpoint + "\n")
        sub.stdin.flush()
        time.sleep(0.5)  # let the subscription reach the publisher (a slow joiner only loses the first few)
        pub.stdin.write("go\n")
        pub.stdin.flush()
        sub.wait(timeout=180)
        pub.wait(timeout=60)
    finally:
        for process in (sub, pub):
            if process.poll() is None:
                cluster.stop_process(process)
    return json.loads(out.read_text())[:count]


DRIVER_CODE = r'''
import json, sys, time
from pyspark.sql import SparkSession
import node, rbm
from rbm.datasets import load_digits28
conf, store_url, epochs, out = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
builder = SparkSession.builder.appName("bench-hosts")
for key, value in conf.items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
split = load_digits28()
X, y = split.X_train.reshape(len(split.X_train), -1), split.y_train
model = rbm.DBN(hidden_layer_sizes=(500, 500), batch_size=50, random_state=0)
history = []
trainer = node.Trainer(spark, store_url, epochs=epochs, partitions=2 * int(conf["spark.cores.max"]), progress=False,
                       key=b"bench-hosts-run-key-0123456789", on_epoch=lambda s: history.append(s))
started = time.time()
trainer.fit(model, X, y)
wall = time.time() - started
records = [r for s in history for r in s["records"]]
json.dump({"wall_s": wall, "samples": sum(r["samples"] for r in records), "records": records,
           "train_wall_s": sum(s["wall_s"] for s in history)}, open(out, "w"), default=str)
spark.stop()
'''


def training(cluster: VirtualCluster, workers: int, epochs: int, work: Path) -> dict:
    out = work / f"train-{workers}.json"
    conf = cluster.spark_conf(**{"spark.cores.max": str(workers)})
    before = {host: cluster.interface_bytes(host) for host in cluster.worker_hosts}
    log = work / f"driver-{workers}.log"
    driver = cluster.popen("driver", [sys.executable, "-c", DRIVER_CODE, json.dumps(conf),
                                      cluster.store_url(f"/bench-{workers}"), str(epochs), str(out)], log=log)
    if driver.wait(timeout=1800) != 0:
        raise SystemExit(f"training with {workers} worker host(s) failed:\n{log.read_text()[-3000:]}")
    after = {host: cluster.interface_bytes(host) for host in cluster.worker_hosts}
    result = json.loads(out.read_text())
    per_host: dict[str, dict] = {}
    for record in result["records"]:
        host = record["node"].rsplit("-", 1)[0]
        entry = per_host.setdefault(host, {"partitions": 0, "sent": 0, "read": 0})
        entry["partitions"] += 1
        entry["sent"] += record["sent_bytes"]
        entry["read"] += record["read_bytes"]
    for host, entry in per_host.items():
        traffic = after[host] - before[host]
        entry["rx"], entry["tx"] = traffic.rx_bytes, traffic.tx_bytes
    result["per_host"] = per_host
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--announcements", type=int, default=300)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 3])
    add_json_option(parser)
    args = parser.parse_args(argv)
    reason = cluster_unavailable_reason()
    if reason:
        print(f"bench_hosts: {reason}", file=sys.stderr)
        return 2
    run = BenchRun(__file__, args).start()
    work = Path(tempfile.mkdtemp(prefix="bench-hosts-"))
    print(f"machine: {os.cpu_count()} cores in all, shared by every host of the virtual cluster")
    with VirtualCluster(workers=max(args.workers), work_dir=work / "cluster") as cluster:
        across = announcement_latency(cluster, "worker1", "worker2", False, args.announcements, work)
        loop = announcement_latency(cluster, "worker1", "worker1", True, args.announcements, work)
        print(f"\nannouncement latency ({args.announcements} announcements, 10 ms apart):")
        print(f"{'':>22}{'median ms':>12}{'p99 ms':>10}")
        rows = {"across hosts": across, "loopback": loop}
        for name, values in rows.items():
            print(f"{name:>22}{1000 * statistics.median(values):>12.3f}{1000 * percentile(values, 0.99):>10.3f}")
        print(f"{'ratio across/loopback':>22}{statistics.median(across) / statistics.median(loop):>12.2f}"
              f"{percentile(across, 0.99) / percentile(loop, 0.99):>10.2f}")
        run.table(f"Announcement latency on the virtual cluster ({args.announcements} announcements, 10 ms apart)",
                  ["path", "median ms", "p99 ms"],
                  [*([name, 1000 * statistics.median(values), 1000 * percentile(values, 0.99)]
                     for name, values in rows.items()),
                   ["ratio, across hosts / loopback", statistics.median(across) / statistics.median(loop),
                    percentile(across, 0.99) / percentile(loop, 0.99)]])
        results = {workers: training(cluster, workers, args.epochs, work) for workers in args.workers}
    print(f"\n784-500-500 DBN on digits28, {args.epochs} epoch(s) per phase, 2 partitions per worker host, "
          "store hdfs:// on the namenode host")
    print(f"{'worker hosts':>13}{'samples/s':>11}{'per node and partition: rx MB':>32}{'tx MB':>8}"
          f"{'store-level MB (read+written)':>31}{'interface/store':>17}")
    base = None
    table = []
    for workers, result in results.items():
        rate = result["samples"] / result["train_wall_s"]
        base = base or rate
        hosts = result["per_host"].values()
        partitions = sum(entry["partitions"] for entry in hosts)
        rx = sum(entry["rx"] for entry in hosts) / partitions / 1e6
        tx = sum(entry["tx"] for entry in hosts) / partitions / 1e6
        store = sum(entry["sent"] + entry["read"] for entry in hosts) / partitions / 1e6
        print(f"{workers:>13}{rate:>11.0f}{rx:>32.2f}{tx:>8.2f}{store:>31.2f}{(rx + tx) / store if store else float('nan'):>17.2f}")
        table.append([workers, rate, rate / base, rx, tx, store, (rx + tx) / store if store else None])
    print("samples/s relative to 1 worker host: " + ", ".join(
        f"{workers}: {result['samples'] / result['train_wall_s'] / base:.2f}" for workers, result in results.items()))
    print(f"(work folder: {work})")
    run.table(f"784-500-500 DBN on digits28, {args.epochs} epoch(s) per phase, 2 partitions per worker host, "
              "store hdfs:// on the namenode host",
              ["worker hosts", "samples/s", "samples/s / 1 host", "interface rx MB per node and partition", "tx MB",
               "store-level MB (read + written)", "interface / store"], table,
              "All hosts share the machine's cores: more worker hosts bring no more compute, so samples/s measures "
              "the cost of coordination, not a speed-up.")
    run.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
