"""Pub-sub weight exchange: announcement latency, and the trainer's per-round cost of publish + merge.

1. Latency: a node in this process publishes a 784x500 float32 snapshot (plus biases); a node in
   another process polls ``fresh_snapshots`` and reports when the verified snapshot is available
   to merge.  publish() -> available, median and p99, on the local store and on the WebHDFS test
   server (``support.webhdfs_server``, run in its own process).
2. Round cost: what the trainer waits for per partition, ``merge`` (3 fresh peers) + ``publish``
   (copy + NaN check + queue), as a fraction of one partition's 784-500 RBM CD-1 training on
   ``--partition`` samples, measured side by side in this process.  The background write is
   reported too: it overlaps training but competes for cores on a small machine.
3. Cost of authentication, side by side in this process: a snapshot's write and read as before
   (name = sha256 of the bytes, checked on read) and now (``WeightStore``: sha256 + HMAC in the
   name, MAC checked before the read, size bounded), alternating, on both stores; the MAC
   operations alone; and their share of a node's round (one put, three fetches, one signed
   announcement, three verified ones).
4. Cost of encryption, side by side in this process: a signed announcement sent and received over plain
   ZeroMQ sockets and over the run's CurveZMQ ones (``actors._transport``), alternating; and the time
   from connect to completed handshake of each.

    .venv/bin/python scripts/bench_actors.py [--quick] [--announcements 30] [--partition 1500]
"""

from __future__ import annotations

if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()


import argparse
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import zmq
from threadpoolctl import threadpool_limits
from zmq.utils.monitor import recv_monitor_message

import actors
import rbm
import storage
from actors._curve import as_run_publisher, as_run_subscriber
from rbm.datasets import load_digits28

from _results import BenchRun, add_json_option

SECRET = b"bench-secret-0123456789abcdef"
PHASE = "rbm"
RECEIVER_POLL_S = 0.0005


def snapshot_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "W": (0.01 * rng.standard_normal((784, 500))).astype(np.float32),
        "hbias": np.zeros(500, np.float32),
        "vbias": np.zeros(784, np.float32),
    }


def receiver(config: dict) -> None:
    """Subprocess: report on stdout when each announced version is available to merge."""
    store = storage.open_store(config["store"])
    with actors.start_node(config["run"], "receiver", store, SECRET, anti_entropy_interval_s=600.0) as node:
        last = 0
        while last < config["last_version"]:
            snapshots = node.fresh_snapshots(PHASE)
            now = time.time()
            for snapshot in snapshots:
                last = max(last, snapshot.version)
                print(json.dumps({"version": snapshot.version, "t": now}), flush=True)
            if not snapshots:
                time.sleep(RECEIVER_POLL_S)


def announcement_latency(store_url: str, count: int) -> list[float]:
    """Seconds from publish() in this process to 'available for merge' in another, per version."""
    run = f"latency-{os.getpid()}-{time.monotonic_ns()}"
    store = storage.open_store(store_url)
    rng = np.random.default_rng(0)
    params = snapshot_params(rng)
    latencies = []
    with actors.start_node(run, "sender", store, SECRET, anti_entropy_interval_s=600.0) as node:
        config = {"store": store_url, "run": run, "last_version": count + 1}
        command = [sys.executable, __file__, "--receiver", json.dumps(config)]
        child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        try:
            for version in range(1, count + 2):  # version 1 warms up (connection, caches); not counted
                params["W"][0, 0] = version
                started = time.time()
                node.publish(PHASE, params, samples_seen=version)
                while True:
                    line = child.stdout.readline()
                    if not line:
                        raise RuntimeError(f"the receiver process exited (code {child.wait()})")
                    report = json.loads(line)
                    if report["version"] == version:
                        break
                if version > 1:
                    latencies.append(report["t"] - started)
        finally:
            child.wait(30)
    return latencies


def store_round_trip(store_url: str, count: int) -> list[float]:
    """Seconds of put_version + get_version alone (the floor under the announcement latency)."""
    weights = storage.WeightStore(storage.open_store(store_url), f"floor-{os.getpid()}", SECRET)
    params = snapshot_params(np.random.default_rng(1))
    times = []
    for version in range(1, count + 1):
        params["W"][0, 0] = version
        started = time.perf_counter()
        weights.get_version(weights.put_version(PHASE, "floor", version, params))
        times.append(time.perf_counter() - started)
    return times


def _median_us(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return float(np.median(times)) * 1e6


def authentication_cost(store_url: str, count: int) -> dict[str, float]:
    """Median seconds of a snapshot's put and get, plain sha256 (before) and authenticated (now), alternating."""
    store = storage.open_store(store_url)
    run = f"auth-{os.getpid()}-{time.monotonic_ns()}"
    weights = storage.WeightStore(store, run, SECRET)
    params = snapshot_params(np.random.default_rng(2))
    bound = storage.snapshot_size_bound({name: value.shape for name, value in params.items()})
    times: dict[str, list[float]] = {"put_plain": [], "put_mac": [], "get_plain": [], "get_mac": []}
    for version in range(1, count + 1):
        params["W"][0, 0] = version
        started = time.perf_counter()  # before: the file named by the sha256 of its bytes
        data = storage.encode_params(params)
        digest = storage.sha256_hex(data)
        path = f"runs/{run}/plain/{version:08d}-{digest}.npz"
        store.write_bytes(path, data)
        times["put_plain"].append(time.perf_counter() - started)
        started = time.perf_counter()
        ref = weights.put_version(PHASE, "bench", version, params)
        times["put_mac"].append(time.perf_counter() - started)
        started = time.perf_counter()
        data = store.read_bytes(path)
        assert storage.sha256_hex(data) == digest
        storage.decode_params(data, path)
        times["get_plain"].append(time.perf_counter() - started)
        started = time.perf_counter()
        weights.get_version(ref, max_bytes=bound)
        times["get_mac"].append(time.perf_counter() - started)
    return {name: float(np.median(values)) for name, values in times.items()}


def mac_operations_us() -> dict[str, float]:
    """Median microseconds of the MAC work added per snapshot and per announcement."""
    digest = "ab" * 32
    parts = ("sparkdbn snapshot v1", "run-1", PHASE, "node-a", 12, digest)
    mac = storage.mac_hex(SECRET, *parts)
    announcement = actors.WeightAnnouncement(run="run-1", node="node-a", phase=PHASE, version=12, sha256=digest,
                                             mac=mac, samples_seen=1500, sent_at=time.time())  # fmt: skip
    frames = actors.encode_message(announcement, SECRET)
    topic, payload = frames[0], frames[1]
    return {
        "snapshot_mac": _median_us(lambda: storage.mac_hex(SECRET, *parts), 2000),
        "snapshot_verify": _median_us(lambda: storage.verify_mac(SECRET, mac, *parts), 2000),
        "announce_sign": _median_us(lambda: actors.encode_message(announcement, SECRET), 2000),
        "announce_verify": _median_us(lambda: actors.decode_frames(frames, SECRET, "run-1"), 2000),
        # before: the same HMAC-SHA256, over topic + payload, raw digest
        "announce_hmac_before": _median_us(lambda: hmac.new(SECRET, topic + payload, hashlib.sha256).digest(), 2000),
        "announce_hmac_now": _median_us(lambda: storage.mac_hex(SECRET, "sparkdbn wire v2", topic, payload), 2000),
    }


def _socket_pair(context: zmq.Context, curve: bool) -> tuple[zmq.Socket, zmq.Socket, float]:
    """A connected PUB/SUB pair on loopback (the run's CurveZMQ, or none) and its handshake's seconds."""
    publisher, subscriber = context.socket(zmq.PUB), context.socket(zmq.SUB)
    for socket_ in (publisher, subscriber):
        socket_.setsockopt(zmq.LINGER, 0)
    if curve:
        as_run_publisher(publisher, SECRET)
        as_run_subscriber(subscriber, SECRET)
    publisher.bind("tcp://127.0.0.1:0")
    subscriber.setsockopt(zmq.SUBSCRIBE, b"")
    monitor = subscriber.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    started = time.perf_counter()
    subscriber.connect(publisher.getsockopt_string(zmq.LAST_ENDPOINT))
    recv_monitor_message(monitor)
    handshake = time.perf_counter() - started
    subscriber.disable_monitor()
    monitor.close()
    while not publisher.poll(10, zmq.POLLOUT):
        pass
    time.sleep(0.05)  # the subscription reaches the publisher
    return publisher, subscriber, handshake


def encryption_cost(count: int) -> dict[str, float]:
    """Median microseconds, plain ZeroMQ against the run's CurveZMQ, alternating: one signed announcement
    sent and received, and a connection's handshake."""
    announcement = actors.WeightAnnouncement(run="run-1", node="node-a", phase=PHASE, version=12, sha256="ab" * 32,
                                             mac="cd" * 32, samples_seen=1500, sent_at=time.time())  # fmt: skip
    frames = actors.encode_message(announcement, SECRET)
    times: dict[str, list[float]] = {f"{what}_{kind}": [] for what in ("message", "handshake")
                                     for kind in ("plain", "curve")}  # fmt: skip
    context = zmq.Context()
    try:
        for _ in range(count):
            for kind in ("plain", "curve"):
                publisher, subscriber, handshake = _socket_pair(context, kind == "curve")
                times[f"handshake_{kind}"].append(handshake)
                for _ in range(20):
                    started = time.perf_counter()
                    publisher.send_multipart(frames)
                    subscriber.recv_multipart()
                    times[f"message_{kind}"].append(time.perf_counter() - started)
                publisher.close()
                subscriber.close()
    finally:
        context.term()
    return {name: 1e6 * float(np.median(values)) for name, values in times.items()}


def describe_auth(name: str, cost: dict[str, float]) -> str:
    put, get = (cost["put_plain"], cost["put_mac"]), (cost["get_plain"], cost["get_mac"])
    return (f"  {name:8s} put: sha256 {put[0] * 1000:6.2f} ms  MAC {put[1] * 1000:6.2f} ms  ({put[1] / put[0]:4.2f}x)   "
            f"get: sha256 {get[0] * 1000:6.2f} ms  MAC {get[1] * 1000:6.2f} ms  ({get[1] / get[0]:4.2f}x)")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_webhdfs(root: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    serve = f"from support.webhdfs_server import main; main(['--port', '{port}', '--root', {root!r}])"
    tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
    server = subprocess.Popen([sys.executable, "-c", serve], env=dict(os.environ, PYTHONPATH=tests))
    url = f"hdfs://127.0.0.1:{port}/bench"
    deadline = time.monotonic() + 30
    while True:
        try:
            storage.open_store(url, retry_timeout_s=0.5).makedirs("")
            return server, url
        except storage.StoreError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.kill()
                raise
            time.sleep(0.1)


def round_cost(store_url: str, partition: int, rounds: int) -> dict[str, float]:
    """Median seconds of training one partition, merge(3 peers), publish(), and the background write."""
    X = load_digits28().X_train.reshape(-1, 784)[:partition]
    model = rbm.RBM(n_components=500, batch_size=100, learning_rate=0.05, random_state=0).initialize(784)
    train_rng = np.random.default_rng(0)
    model.train_partition(X[:200], None, PHASE, train_rng)  # warm up BLAS and buffers
    store = storage.open_store(store_url)
    run = f"round-{os.getpid()}"
    times: dict[str, list[float]] = {"train": [], "merge": [], "publish": [], "write": []}
    peers = [actors.start_node(run, f"peer-{index}", store, SECRET, anti_entropy_interval_s=600.0) for index in range(3)]
    node = actors.start_node(run, "trainer", store, SECRET, anti_entropy_interval_s=600.0)
    try:
        own = model.parameters(PHASE)
        for round_index in range(rounds):
            before = node.stats()["fetched"]
            for index, peer in enumerate(peers):
                peer.publish(PHASE, {name: value + 0.001 * (index + 1) for name, value in own.items()}, round_index)
            deadline = time.monotonic() + 60
            node.fresh_snapshots(PHASE)
            while node.stats()["fetched"] < before + len(peers):  # untimed: the peers' work, not the trainer's
                if time.monotonic() > deadline:
                    raise RuntimeError("peer snapshots did not arrive within 60 s")
                time.sleep(0.001)
            started = time.perf_counter()
            own, used = node.merge(PHASE, own)
            times["merge"].append(time.perf_counter() - started)
            assert len(used) == len(peers), len(used)
            model.set_parameters(own)
            metrics = model.train_partition(X, None, PHASE, train_rng)
            times["train"].append(metrics["seconds"])
            own = model.parameters(PHASE)
            started = time.perf_counter()
            node.publish(PHASE, own, (round_index + 1) * partition)
            times["publish"].append(time.perf_counter() - started)
            node.flush()
            times["write"].append(time.perf_counter() - started)
    finally:
        node.stop()
        for peer in peers:
            peer.stop()
    return {name: float(np.median(values)) for name, values in times.items()}


def describe(latencies: list[float], floor: list[float]) -> str:
    values = np.asarray(latencies) * 1000
    floor_ms = float(np.median(floor)) * 1000
    return (
        f"median {np.median(values):7.1f} ms   p99 {np.percentile(values, 99):7.1f} ms   (n={len(values)});"
        f"  store write+read alone {floor_ms:6.1f} ms -> {np.median(values) / floor_ms:4.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (8 announcements, 2 rounds)")
    parser.add_argument("--announcements", type=int, default=30)
    parser.add_argument("--partition", type=int, default=1500, help="samples per partition (default 1500)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--receiver", help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.receiver:
        receiver(json.loads(args.receiver))
        return
    run = BenchRun(__file__, args).start()
    latencies = []
    count, rounds = (8, 2) if args.quick else (args.announcements, args.rounds)
    print(f"cores: {os.cpu_count()}; snapshot 784x500 float32 + biases ({(784 * 500 + 1284) * 4 / 1e6:.2f} MB)")
    with tempfile.TemporaryDirectory(prefix="bench-actors-") as root:
        local = os.path.join(root, "local")
        latencies.append(("local", announcement_latency(local, count), store_round_trip(local, count)))
        print(f"announcement latency, local store : {describe(*latencies[-1][1:])}")
        auth = {"local": authentication_cost(local, count)}
        server, url = start_webhdfs(os.path.join(root, "hdfs"))
        try:
            latencies.append(("WebHDFS", announcement_latency(url, count), store_round_trip(url, count)))
            print(f"announcement latency, WebHDFS     : {describe(*latencies[-1][1:])}")
            auth["WebHDFS"] = authentication_cost(url, count)
        finally:
            server.terminate()
            server.wait(10)
        print(f"authentication, medians of {count} alternating snapshot writes/reads (before: sha256 name; now: "
              "sha256 + HMAC name, MAC checked first, size bounded):")  # fmt: skip
        for name, cost in auth.items():
            print(describe_auth(name, cost))
        macs = mac_operations_us()
        print(f"  MAC of a snapshot name {macs['snapshot_mac']:.1f} us, its check {macs['snapshot_verify']:.1f} us; "
              f"announcement encode+sign {macs['announce_sign']:.1f} us, verify+decode {macs['announce_verify']:.1f} us "
              f"(the HMAC itself: before {macs['announce_hmac_before']:.1f} us, now {macs['announce_hmac_now']:.1f} us)")
        crypto = encryption_cost(count)
        print(f"encryption, medians of {count} alternating connections (20 announcements each): an announcement "
              f"sent and received, plain {crypto['message_plain']:.0f} us, CurveZMQ {crypto['message_curve']:.0f} us "
              f"({crypto['message_curve'] / crypto['message_plain']:.2f}x); a handshake, plain "
              f"{crypto['handshake_plain'] / 1000:.2f} ms, CurveZMQ {crypto['handshake_curve'] / 1000:.2f} ms "
              f"({crypto['handshake_curve'] / crypto['handshake_plain']:.2f}x)")
        # One BLAS thread, as in a one-core Spark task; also keeps a shared machine's noise down.
        with threadpool_limits(1):
            cost = round_cost(os.path.join(root, "local"), args.partition, rounds)
    blocking = cost["merge"] + cost["publish"]
    print(f"per round, partition of {args.partition} samples, 784-500 RBM CD-1 (batch 100, 1 BLAS thread), "
          "3 fresh peers, medians:")
    print(f"  train partition        {cost['train'] * 1000:8.1f} ms   1.000")
    print(f"  merge (3 peers)        {cost['merge'] * 1000:8.1f} ms   {cost['merge'] / cost['train']:.3f}")
    print(f"  publish (trainer side) {cost['publish'] * 1000:8.1f} ms   {cost['publish'] / cost['train']:.3f}")
    print(f"  publish + merge        {blocking * 1000:8.1f} ms   {blocking / cost['train']:.3f}   (target <= 0.050)")
    write = cost["write"]
    print(f"  background write+announce {write * 1000:5.1f} ms   {write / cost['train']:.3f}   (overlaps training)")
    per_round_s = (macs["snapshot_mac"] + 3 * macs["snapshot_verify"] + 4 * macs["announce_hmac_now"]) / 1e6
    print(f"  MAC work per round     {per_round_s * 1000:8.3f} ms   {per_round_s / cost['train']:.5f}   "
          "(1 put, 3 fetches, 1 announcement signed, 3 verified)")

    run.table(f"Announcement latency: publish() to mergeable on a peer in another process ({count} announcements)",
              ["store", "median ms", "p99 ms", "store write + read alone, ms", "latency / store alone"],
              [[name, 1000 * float(np.median(values)), 1000 * float(np.percentile(values, 99)),
                1000 * float(np.median(floor)), float(np.median(values) / np.median(floor))]
               for name, values, floor in latencies])
    run.table(f"What the trainer waits for per partition ({args.partition} samples, 784-500 RBM CD-1, batch 100, "
              "1 BLAS thread, 3 fresh peers; medians)",
              ["step", "ms", "of the partition's training"],
              [["train the partition", 1000 * cost["train"], 1.0],
               ["merge (3 peers)", 1000 * cost["merge"], cost["merge"] / cost["train"]],
               ["publish (the trainer's side)", 1000 * cost["publish"], cost["publish"] / cost["train"]],
               ["publish + merge", 1000 * blocking, blocking / cost["train"]],
               ["background write + announce (overlaps training)", 1000 * write, write / cost["train"]],
               ["MAC work (1 put, 3 fetches, 1 announcement signed, 3 verified)", 1000 * per_round_s,
                per_round_s / cost["train"]]])
    run.table(f"Authentication: medians of {count} alternating snapshot writes / reads",
              ["store", "put, sha256 name (ms)", "put, sha256 + HMAC name (ms)", "ratio",
               "get, sha256 name (ms)", "get, MAC checked first (ms)", "ratio"],
              [[name, 1000 * c["put_plain"], 1000 * c["put_mac"], c["put_mac"] / c["put_plain"],
                1000 * c["get_plain"], 1000 * c["get_mac"], c["get_mac"] / c["get_plain"]] for name, c in auth.items()])
    run.table(f"Encryption: medians of {count} alternating loopback connections, plain ZeroMQ and the run's CurveZMQ",
              ["what", "plain (us)", "CurveZMQ (us)", "ratio"],
              [[what, crypto[f"{key}_plain"], crypto[f"{key}_curve"], crypto[f"{key}_curve"] / crypto[f"{key}_plain"]]
               for what, key in (("a signed announcement sent and received", "message"),
                                 ("connect to completed handshake", "handshake"))])
    run.finish()


if __name__ == "__main__":
    main()
