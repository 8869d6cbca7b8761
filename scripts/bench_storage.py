#!/usr/bin/env python3
"""Storage benchmark: weight snapshot put/get and dataset shard reads, on both backends.

* put + get of a 784x500 float32 snapshot (``WeightStore.put_version`` / ``get_version``,
  sha256 and the HMAC of its name included) on a local directory and on WebHDFS (the ``hdfs`` client against the
  in-process test server), median ms over N runs, next to a plain ``np.save`` + ``os.replace``
  / ``np.load`` of the same array in the same directory.
* a run record write, fenced (lease listing + exclusive create of the generation's next record + pruning),
  next to one signed ``run.json`` replaced, as records were written before the fencing.
* shard read throughput (MB/s of feature data) of ``Dataset.read_shard`` (sha256-verified
  Parquet -> numpy) against a plain ``np.load`` of the same arrays from local ``.npy`` files.

    .venv/bin/python scripts/bench_storage.py [--quick]
"""


if __name__ == "__main__":  # started as a program: where the project is not importable, inside its virtualenv
    import _venv

    _venv.ensure()

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

import storage

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from support.webhdfs_server import WebHDFSServer  # noqa: E402 - the test server lives with the tests

from _results import BenchRun, add_json_option  # noqa: E402


def _median_ms(fn, runs: int) -> float:
    fn()  # warm-up (connections, caches)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _bench_snapshots(stores: dict, runs: int, tmp: str, run: BenchRun) -> None:
    rng = np.random.default_rng(0)
    params = {"rbm0.W": rng.standard_normal((784, 500)).astype(np.float32)}
    size_mb = params["rbm0.W"].nbytes / 1e6
    path = os.path.join(tmp, "plain.npy")

    def plain_put():
        with open(path + ".tmp", "wb") as handle:
            np.save(handle, params["rbm0.W"])
        os.replace(path + ".tmp", path)

    def plain_put_fsync():
        with open(path + ".tmp", "wb") as handle:
            np.save(handle, params["rbm0.W"])
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(path + ".tmp", path)

    def plain_put_fsync_directory():  # what a local store put makes durable: the rename too
        plain_put_fsync()
        descriptor = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    fsync_put_ms = _median_ms(plain_put_fsync, runs)
    directory_put_ms = _median_ms(plain_put_fsync_directory, runs)
    plain_put_ms = _median_ms(plain_put, runs)
    plain_get_ms = _median_ms(lambda: np.load(path, allow_pickle=False), runs)
    print("\nstore put = npz encode + sha256 + HMAC name + atomic write (local: fsync, rename, directory fsync; webhdfs: "
          "CREATE, datanode PUT, RENAME);")
    print("store get = MAC check + size-bounded read + sha256 check + npz decode (allow_pickle=False)")
    print(f"snapshot 784x500 float32 ({size_mb:.2f} MB), median of {runs} runs")
    print(f"{'backend':<10} {'put ms':>8} {'get ms':>8}   {'put / np.save':>13} {'get / np.load':>13}")
    print(f"{'np.save/load':<10} {plain_put_ms:8.2f} {plain_get_ms:8.2f}   {1.0:13.1f} {1.0:13.1f}")
    print(f"{'  +fsync':<10} {fsync_put_ms:8.2f} {'':8}   {fsync_put_ms / plain_put_ms:13.1f}")
    rows = [["np.save + os.replace / np.load", plain_put_ms, plain_get_ms, 1.0, 1.0],
            ["  the same with fsync", fsync_put_ms, None, fsync_put_ms / plain_put_ms, None],
            ["  and the directory fsynced", directory_put_ms, None, directory_put_ms / plain_put_ms, None]]
    print(f"{'  +dir fsync':<10} {directory_put_ms:8.2f} {'':8}   {directory_put_ms / plain_put_ms:13.1f}")
    for name, store in stores.items():
        weights = storage.WeightStore(store, "bench", b"bench-key-0123456789abcdef")
        version = iter(range(1, 10**6))
        refs = []
        put_ms = _median_ms(lambda: refs.append(weights.put_version("rbm0", "n", next(version), params)), runs)
        get_ms = _median_ms(lambda: weights.get_version(refs[-1]), runs)
        print(f"{name:<10} {put_ms:8.2f} {get_ms:8.2f}   {put_ms / plain_put_ms:13.1f} {get_ms / plain_get_ms:13.1f}")
        rows.append([f"WeightStore, {name}", put_ms, get_ms, put_ms / plain_put_ms, get_ms / plain_get_ms])
    run.table(f"Snapshot 784x500 float32 ({size_mb:.2f} MB), median of {runs} runs",
              ["writer / reader", "put ms", "get ms", "put / np.save", "get / np.load"], rows,
              "put: npz encode, sha256, HMAC name, atomic write (local: fsync; WebHDFS: CREATE, datanode PUT, RENAME); "
              "get: MAC check, size-bounded read, sha256 check, npz decode (allow_pickle=False).")


def _bench_shards(stores: dict, n_rows: int, shards: int, repeats: int, tmp: str, run: BenchRun) -> None:
    rng = np.random.default_rng(1)
    X = rng.random((n_rows, 784), dtype=np.float32)
    X[X < 0.6] = 0.0  # image-like: mostly blank pixels
    y = rng.integers(0, 10, n_rows)
    bounds = np.linspace(0, n_rows, shards + 1).astype(int)
    npy_paths = []
    for i in range(shards):
        npy = os.path.join(tmp, f"shard-{i}.npy")
        np.save(npy, X[bounds[i]:bounds[i + 1]])
        npy_paths.append(npy)
    total_mb = X.nbytes / 1e6

    def best_mb_s(fn) -> float:
        fn()
        best = min(_timed(fn) for _ in range(repeats))
        return total_mb / best

    reference = best_mb_s(lambda: [np.load(p, allow_pickle=False) for p in npy_paths])
    print(f"\nshard reads: {n_rows}x784 float32 ({total_mb:.0f} MB) in {shards} shards, best of {repeats}")
    print(f"{'source':<28} {'MB/s':>8} {'vs np.load':>10}")
    print(f"{'np.load of local .npy':<28} {reference:8.0f} {1.0:10.2f}")
    rows = [["np.load of local .npy", reference, 1.0]]
    for name, store in stores.items():
        for layout in ("binary", "list"):
            url = store.child(f"datasets/bench-{layout}")
            storage.stage_arrays(url, X, y, shards=shards, layout=layout)
            dataset = storage.open_dataset(url)
            rate = best_mb_s(lambda: [dataset.read_shard(i) for i in range(dataset.num_shards)])
            print(f"{name + ' read_shard (' + layout + ')':<28} {rate:8.0f} {rate / reference:10.2f}")
            rows.append([f"{name} read_shard ({layout})", rate, rate / reference])
    run.table(f"Shard reads: {n_rows}x784 float32 ({total_mb:.0f} MB) in {shards} shards, best of {repeats}",
              ["source", "MB/s", "vs np.load"], rows)


def _bench_records(stores: dict, runs: int, run: BenchRun) -> None:
    """A run record write: fenced (list the lease folder, read the holder, create the generation's next record
    file, prune this writer's third newest) against store layout 2's (one signed run.json, replaced)."""
    key = b"bench-key-0123456789abcdef"
    record = {"status": "running", "steps": {f"phase{index}": {"epochs_done": index, "nodes": ["a", "b"]}
                                             for index in range(4)}}
    print(f"\nrun record write ({len(json.dumps(record))} bytes of JSON), median of {runs} runs")
    print(f"{'backend':<10} {'replace ms':>10} {'fenced ms':>10} {'fenced / replace':>17}")
    rows = []
    for name, store in stores.items():
        folder = storage.LeaseFolder(store, "records", key)
        folder.take(1, {"token": "bench"})
        runs_store = storage.RunStore(store, "records", key)

        def fenced() -> None:
            view = folder.view()  # DriverLease.check_store: a newer generation?
            assert view.generation == 1 and folder.holder(1) is not None  # ... and is this one's entry still there
            runs_store.write_record(record, generation=1)

        replace_ms = _median_ms(lambda: store.write_bytes("runs/records/run.json", storage.sign_json(
            key, record, "sparkdbn run record v1", "records")), runs)
        fenced_ms = _median_ms(fenced, runs)
        print(f"{name:<10} {replace_ms:10.2f} {fenced_ms:10.2f} {fenced_ms / replace_ms:17.1f}")
        rows.append([name, replace_ms, fenced_ms, fenced_ms / replace_ms])
    run.table(f"Run record write ({len(json.dumps(record))} bytes of JSON), median of {runs} runs",
              ["store", "replace ms", "fenced ms", "fenced / replace"], rows)


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="few runs, small dataset")
    add_json_option(parser)
    args = parser.parse_args()
    run = BenchRun(__file__, args).start()
    runs, n_rows, repeats = (5, 4000, 2) if args.quick else (30, 36000, 5)
    with tempfile.TemporaryDirectory() as tmp, WebHDFSServer(os.path.join(tmp, "hdfs")) as server:
        stores = {
            "local": storage.open_store(os.path.join(tmp, "local")),
            "webhdfs": storage.open_store(server.store_url("/bench")),
        }
        print(f"storage benchmark ({'quick' if args.quick else 'full'}); WebHDFS test server at {server.url}")
        _bench_snapshots(stores, runs, tmp, run)
        _bench_records(stores, runs, run)
        _bench_shards(stores, n_rows, 8, repeats, tmp, run)
    run.finish()


if __name__ == "__main__":
    main()
