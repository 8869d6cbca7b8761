"""One store suite, run on the local backend and on WebHDFS (the real ``hdfs`` client against the test server)."""

from __future__ import annotations

import os
import pickle

import pytest

from storage import (
    StoreError,
    StoreNotFoundError,
    StorePathError,
    open_store,
    parse_store_url,
)


def test_written_bytes_read_back_identically(store):
    payload = bytes(range(256)) * 1000
    store.write_bytes("dir/sub/file.bin", payload)
    assert store.read_bytes("dir/sub/file.bin") == payload
    assert store.size("dir/sub/file.bin") == len(payload)


def test_overwriting_a_file_replaces_its_content(store):
    store.write_bytes("run.json", b'{"v": 1}')
    store.write_bytes("run.json", b'{"v": 2, "longer": true}')
    assert store.read_bytes("run.json") == b'{"v": 2, "longer": true}'
    assert store.list("") == ["run.json"]


def test_empty_file_round_trips(store):
    store.write_bytes("empty", b"")
    assert store.read_bytes("empty") == b""
    assert store.exists("empty")


def test_streamed_write_from_a_generator_is_read_back_in_order(store):
    chunks = [bytes([i % 251]) * (10_000 + i) for i in range(40)]
    store.write_stream("big/stream.bin", (chunk for chunk in chunks))
    assert store.read_bytes("big/stream.bin") == b"".join(chunks)


def test_open_read_streams_the_file(store):
    payload = b"0123456789" * 50_000
    store.write_bytes("s.bin", payload)
    with store.open_read("s.bin") as reader:
        head = reader.read(10)
        rest = reader.read()
    assert head + rest == payload


def test_exists_distinguishes_files_directories_and_missing_paths(store):
    store.write_bytes("a/b/c.txt", b"x")
    assert store.exists("a/b/c.txt")
    assert store.exists("a/b")
    assert not store.exists("a/b/missing.txt")
    assert not store.exists("nowhere/at/all")


def test_list_returns_sorted_children_and_empty_for_missing_directories(store):
    for name in ["zeta", "alpha", "mid"]:
        store.write_bytes(f"d/{name}", b"1")
    store.makedirs("d/subdir")
    assert store.list("d") == ["alpha", "mid", "subdir", "zeta"]
    assert store.list("not/there") == []


def test_list_of_a_file_is_an_error(store):
    store.write_bytes("f", b"1")
    with pytest.raises(StoreError, match="not a directory"):
        store.list("f")


def test_list_hides_temporary_files_of_unfinished_writes(store):
    store.write_bytes("d/real", b"1")
    # What a killed writer leaves behind: only its temporary file.
    store.backend.write_bytes("d/._tmp-deadbeef", b"partial")
    assert store.list("d") == ["real"]


def test_delete_removes_files_and_reports_missing_ones(store):
    store.write_bytes("x/y", b"1")
    assert store.delete("x/y") is True
    assert not store.exists("x/y")
    assert store.delete("x/y") is False


def test_delete_of_a_non_empty_directory_needs_recursive(store):
    store.write_bytes("tree/a/b", b"1")
    with pytest.raises(StoreError, match="not empty"):
        store.delete("tree")
    assert store.exists("tree/a/b")
    assert store.delete("tree", recursive=True) is True
    assert not store.exists("tree")


def test_makedirs_is_idempotent(store):
    store.makedirs("p/q/r")
    store.makedirs("p/q/r")
    assert store.list("p/q") == ["r"]


def test_rename_moves_and_replaces_the_destination(store):
    store.write_bytes("src", b"new")
    store.write_bytes("dst/file", b"old")
    store.rename("src", "dst/file")
    assert store.read_bytes("dst/file") == b"new"
    assert not store.exists("src")
    store.write_bytes("src2", b"other")
    store.rename("src2", "fresh/parent/file")
    assert store.read_bytes("fresh/parent/file") == b"other"


def test_create_exclusive_creates_once_and_never_replaces(store):
    assert store.create_exclusive("locks/lease.json", b"first") is True
    assert store.create_exclusive("locks/lease.json", b"second") is False
    assert store.read_bytes("locks/lease.json") == b"first"
    assert store.list("locks") == ["lease.json"]  # no temporary left behind by the refused attempt
    store.delete("locks/lease.json")
    assert store.create_exclusive("locks/lease.json", b"third") is True
    assert store.read_bytes("locks/lease.json") == b"third"


def test_missing_files_raise_not_found_naming_the_path(store):
    with pytest.raises(StoreNotFoundError, match="missing.bin"):
        store.read_bytes("missing.bin")
    with pytest.raises(StoreNotFoundError, match="missing.bin"):
        with store.open_read("missing.bin"):
            pass
    with pytest.raises(StoreNotFoundError):
        store.rename("missing.bin", "other")


@pytest.mark.parametrize("bad", ["../escape", "a/../../b", "/etc/passwd", "a\\b", "ok/..", "nul\x00byte"])
def test_paths_escaping_the_store_root_are_refused(store, bad):
    with pytest.raises(StorePathError):
        store.write_bytes(bad, b"x")
    with pytest.raises(StorePathError):
        store.read_bytes(bad)
    with pytest.raises(StorePathError):
        store.child(bad)


def test_child_store_is_rooted_at_the_sub_directory(store):
    child = store.child("datasets/d1")
    child.write_bytes("part", b"abc")
    assert store.read_bytes("datasets/d1/part") == b"abc"
    assert child.url.endswith("/datasets/d1")
    assert open_store(child.url, user=store.user).read_bytes("part") == b"abc"


def test_store_pickles_to_its_url_and_works_after_unpickling(store):
    store.write_bytes("k", b"v")  # builds the backend (and the HTTP client)
    blob = pickle.dumps(store)
    assert len(blob) < 400
    assert b"InsecureClient" not in blob and b"Session" not in blob
    clone = pickle.loads(blob)
    assert clone == store
    assert clone.read_bytes("k") == b"v"


def test_deleting_the_root_needs_recursive(store):
    with pytest.raises(StorePathError):
        store.delete("")


def test_store_urls_are_parsed_into_backends_and_roots(tmp_path):
    assert parse_store_url(str(tmp_path)).root == str(tmp_path)
    assert parse_store_url(f"file://{tmp_path}").kind == "local"
    single = parse_store_url("hdfs://nn:9870/data/runs")
    assert (single.kind, single.root, single.namenodes) == ("webhdfs", "/data/runs", ("http://nn:9870",))
    ha = parse_store_url("hdfs://nn1:9870;nn2:9871/x")
    assert ha.namenodes == ("http://nn1:9870", "http://nn2:9871")
    assert ha.url == "hdfs://nn1:9870;nn2:9871/x"
    assert parse_store_url("webhdfs://nn/").namenodes == ("http://nn:9870",)
    assert parse_store_url("swebhdfs://nn/a").namenodes == ("https://nn:9871",)
    for bad in ["s3://bucket/x", "file://remote-host/x", "hdfs:///no-host", "hdfs://nn:port/x", ""]:
        with pytest.raises(StorePathError):
            parse_store_url(bad)


def test_single_slash_urls_are_urls_not_relative_folders(tmp_path, monkeypatch):
    # `file:/abs` (as Hadoop's Path prints it) and `hdfs:/path` were taken for relative local folders
    # named "file:" and "hdfs:" under the working directory.
    monkeypatch.chdir(tmp_path)
    assert parse_store_url("file:/data/runs") == parse_store_url("file:///data/runs")
    assert parse_store_url("FILE:/data/runs%20a").root == "/data/runs a"
    with pytest.raises(StorePathError, match=r"'hdfs:/data' names no namenode; write hdfs://host:port/path"):
        parse_store_url("hdfs:/data")
    with pytest.raises(StorePathError, match="names no namenode"):
        parse_store_url("webhdfs:data")
    with pytest.raises(StorePathError, match="a file URL takes an absolute path"):
        parse_store_url("file:data/runs")
    assert parse_store_url("a:b").root == str(tmp_path / "a:b")  # a file name with a colon stays a path
    assert not list(tmp_path.iterdir())


def test_open_store_returns_a_store_unchanged(local_store):
    assert open_store(local_store) is local_store
    assert open_store("relative/dir").root.endswith("/relative/dir")  # a relative path is a local store


def test_a_failing_stream_leaves_the_old_file_and_no_temporary(store):
    store.write_bytes("d/f", b"old")

    def chunks():
        yield b"new data " * 1000
        raise RuntimeError("producer failed")

    with pytest.raises(RuntimeError, match="producer failed"):
        store.write_stream("d/f", chunks())
    assert store.read_bytes("d/f") == b"old"
    assert store.backend.list("d") == ["f"]
    if store.is_local:  # the backend listing hides temporaries; look at the directory itself
        import os

        assert os.listdir(os.path.join(store.root, "d")) == ["f"]


def test_readers_see_whole_versions_while_a_file_is_overwritten(store):
    import threading

    versions = [bytes([v]) * 300_000 for v in range(1, 6)]
    store.write_bytes("hot", versions[0])
    seen, errors = [], []

    def reader():
        try:
            for _ in range(15):
                seen.append(store.read_bytes("hot"))
        except Exception as exc:  # reported below; a reader must never fail
            errors.append(exc)

    thread = threading.Thread(target=reader)
    thread.start()
    for data in versions[1:] * 3:
        store.write_bytes("hot", data)
    thread.join()
    assert not errors
    assert seen and all(data in versions for data in seen)


def test_a_bounded_read_returns_a_file_within_the_bound_and_refuses_a_larger_one(store):
    from storage import FileTooLargeError

    store.write_bytes("f", b"x" * 1000)
    assert store.read_bytes("f", max_bytes=1000) == b"x" * 1000
    with pytest.raises(FileTooLargeError, match="larger than the 999 bytes allowed"):
        store.read_bytes("f", max_bytes=999)
    with pytest.raises(ValueError, match="max_bytes"):
        store.read_bytes("f", max_bytes=-1)


def test_the_local_store_fsyncs_the_directory_after_every_rename_create_and_new_directory(local_store, monkeypatch):
    events: list[tuple[str, str]] = []
    fsync, replace, link = os.fsync, os.replace, os.link

    def recorded_fsync(descriptor: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{descriptor}")))
        fsync(descriptor)

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", lambda source, target: (events.append(("name", target)), replace(source, target)))
    monkeypatch.setattr(os, "link", lambda source, target: (events.append(("name", target)), link(source, target)))
    root = local_store.root

    def durable(path: str) -> bool:
        """The last new name at ``path`` was followed by an fsync of its directory."""
        named = max(index for index, event in enumerate(events) if event == ("name", path))
        return ("fsync", os.path.dirname(path)) in events[named + 1:]

    local_store.write_bytes("a/b/file", b"one")
    assert durable(f"{root}/a/b/file")
    assert ("fsync", root) in events and ("fsync", f"{root}/a") in events  # the new directories' entries too
    local_store.write_bytes("a/b/file", b"two")
    assert durable(f"{root}/a/b/file")
    assert local_store.create_exclusive("a/c/lease", b"x")
    assert durable(f"{root}/a/c/lease")
    local_store.rename("a/b/file", "a/d/moved")
    assert durable(f"{root}/a/d/moved") and events[-1] == ("fsync", f"{root}/a/b")  # and where it left
