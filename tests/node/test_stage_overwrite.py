"""``sparkdbn stage`` (first staging or ``--overwrite``) killed with SIGKILL mid-way: the same command completes.

The command runs as a process of its own (``python -m node.cli``) with a ``sitecustomize`` on its
path that SIGKILLs it just before its N-th store write, N picked from a counting run of the same
staging in this process.  (``tests/storage/test_datasets.py`` enumerates every write in-process.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import storage
from node import cli, stage_recipe

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROCESS_TIMEOUT_S = 180.0

KILL_HOOK = '''
import os
if os.environ.get("SPARKDBN_TEST_KILL_AT_WRITE"):
    import signal
    import storage

    _kill_at, _count = int(os.environ["SPARKDBN_TEST_KILL_AT_WRITE"]), [0]

    def _dying(write):
        def counted(self, path, *args, **kwargs):
            _count[0] += 1
            if _count[0] == _kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            return write(self, path, *args, **kwargs)
        return counted

    storage.Store.write_bytes = _dying(storage.Store.write_bytes)
    storage.Store.create_exclusive = _dying(storage.Store.create_exclusive)
'''


def staged_writes(url: str, monkeypatch, overwrite: bool = True) -> list[tuple[str, str]]:
    """``(store URL, path)`` of every store write of ``stage --recipe digits --shards 3 [--overwrite]`` at ``url``."""
    writes: list[tuple[str, str]] = []
    for name in ("write_bytes", "create_exclusive"):
        original = getattr(storage.Store, name)

        def counted(self, path, *args, _original=original, **kwargs):  # noqa: ANN001, ANN202
            if threading.current_thread() is threading.main_thread():  # not a thread another test left running
                writes.append((self.url, path))
            return _original(self, path, *args, **kwargs)

        monkeypatch.setattr(storage.Store, name, counted)
    stage_recipe("digits", url, shards=3, overwrite=overwrite)
    monkeypatch.undo()
    return writes


@pytest.mark.slow
def test_stage_overwrite_killed_mid_way_leaves_the_old_or_the_new_dataset_and_the_same_command_completes(
        tmp_path, monkeypatch, capsys):
    hook = tmp_path / "kill-hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_HOOK)
    counting = str(tmp_path / "counting")
    stage_recipe("digits", counting, shards=4)
    writes = staged_writes(counting, monkeypatch)
    train = [index for index, (url, _) in enumerate(writes, 1) if not url.endswith("/test")]
    test = [index for index, (url, _) in enumerate(writes, 1) if url.endswith("/test")]
    points = {"a held-out shard": test[2], "a training shard": train[2], "the meta swap": train[-1]}
    assert writes[train[-1] - 1][1] == "_meta.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook), str(ROOT)]))
    for where, kill_at in points.items():
        url = str(tmp_path / f"d-{kill_at}")
        stage_recipe("digits", url, shards=4)  # the dataset being replaced
        old = {split: storage.open_dataset(split).read_all() for split in (url, url + "/test")}
        command = ["stage", "--recipe", "digits", "--url", url, "--shards", "3", "--overwrite"]
        done = subprocess.run([sys.executable, "-m", "node.cli", *command], cwd=ROOT, capture_output=True, text=True,
                              env=dict(env, SPARKDBN_TEST_KILL_AT_WRITE=str(kill_at)), timeout=PROCESS_TIMEOUT_S)
        assert done.returncode == -9, (where, done.returncode, done.stderr[-3000:])
        for split in (url, url + "/test"):  # each split opens, whole: the old dataset or the new one
            dataset = storage.open_dataset(split)
            assert dataset.num_shards in (3, 4), where
            np.testing.assert_array_equal(dataset.read_all()[0], old[split][0])  # same data, either way
        assert cli.main(command) == 0, capsys.readouterr().err  # the same command again completes
        for split in (url, url + "/test"):
            dataset = storage.open_dataset(split)
            assert dataset.num_shards == 3, where
            folder = dataset.meta["shards"][0]["name"].split("/")[0]
            assert sorted(set(storage.open_store(split).list("")) - {"test"}) == ["_meta.json", folder], where


@pytest.mark.slow
def test_a_first_staging_killed_mid_way_is_completed_by_the_same_command(tmp_path, monkeypatch, capsys):
    # The held-out split is staged first: killed after it, a rerun refused "<url>/test already holds a dataset"
    # and only --overwrite went on, though nothing but this staging had written there.
    hook = tmp_path / "kill-hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(KILL_HOOK)
    writes = staged_writes(str(tmp_path / "counting"), monkeypatch, overwrite=False)
    # The pair's lease is written first (the dataset's: held over both datasets), then the split, then the training set.
    leased = [index for index, (url, path) in enumerate(writes, 1) if path.startswith("_staging-lease/")]
    train = [index for index, (url, path) in enumerate(writes, 1)
             if not url.endswith("/test") and not path.startswith("_staging-lease/")]
    test = [index for index, (url, _) in enumerate(writes, 1) if url.endswith("/test")]
    assert min(leased) < min(test) and max(test) < min(train)
    points = {"a held-out shard": test[2], "the first training write": train[0], "a training shard": train[2],
              "the training meta": train[-1]}
    assert writes[train[-1] - 1][1] == "_meta.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(hook), str(ROOT)]))
    counted = str(tmp_path / "counting")
    expected = {split: storage.open_dataset(counted + split).read_all()[0] for split in ("", "/test")}
    for where, kill_at in points.items():
        url = str(tmp_path / f"d-{kill_at}")
        command = ["stage", "--recipe", "digits", "--url", url, "--shards", "3"]
        done = subprocess.run([sys.executable, "-m", "node.cli", *command], cwd=ROOT, capture_output=True, text=True,
                              env=dict(env, SPARKDBN_TEST_KILL_AT_WRITE=str(kill_at)), timeout=PROCESS_TIMEOUT_S)
        assert done.returncode == -9, (where, done.returncode, done.stderr[-3000:])
        assert cli.main(command) == 0, (where, capsys.readouterr().err)  # no --overwrite: only its own leftovers
        pair = {storage.open_dataset(url + split).meta["split_pair"] for split in ("", "/test")}
        assert len(pair) == 1, where
        for split in ("", "/test"):
            np.testing.assert_array_equal(storage.open_dataset(url + split).read_all()[0], expected[split])

    # A dataset staged at <url>/test on its own (no pair) is not a leftover: still refused.
    url = str(tmp_path / "own-test")
    storage.stage_arrays(url + "/test", expected["/test"][:20], shards=1)
    assert cli.main(["stage", "--recipe", "digits", "--url", url, "--shards", "3"]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert storage.open_dataset(url + "/test").n_samples == 20
