"""The run key: every source in order, the file kept on the driver's machine, and the messages when it is wrong."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

import storage
from node import cli
from node.run._keys import RunKeyError, derive_run_key, resolve_run_key, stored_key_path

MASTER = b"a master secret of 32 bytes long"
STORE = "/data/sparkdbn-store"


@pytest.fixture
def environ(tmp_path):
    """An environment of our own: the config directory in tmp_path, no SPARKDBN_* variables."""
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path / "home")}


def write_secret(path: Path, secret: bytes, mode: int = 0o600) -> str:
    path.write_bytes(secret)
    path.chmod(mode)
    return str(path)


def test_the_run_key_is_the_hmac_of_the_run_under_the_master_secret_and_differs_per_run():
    key = derive_run_key(MASTER, "r1")
    assert key == bytes.fromhex(storage.mac_hex(MASTER, "sparkdbn run key", "r1")) and len(key) == 32
    assert key != derive_run_key(MASTER, "r2") and key != derive_run_key(b"another master secret!", "r1")


def test_each_source_is_taken_in_order_key_key_file_env_file_env_key_spark_then_the_kept_file(tmp_path, environ):
    files = {name: write_secret(tmp_path / name, f"secret from {name} ........".encode()) for name in ("arg", "env")}
    environ.update(SPARKDBN_KEY_FILE=files["env"], SPARKDBN_KEY="secret from SPARKDBN_KEY ....")
    spark_conf = {"spark.authenticate.secret": "secret from the spark conf ...."}
    kept = stored_key_path("r1", STORE, environ)
    os.makedirs(os.path.dirname(kept))
    write_secret(Path(kept), b"secret kept from the first fit ..\n")

    def resolved(**given):
        return resolve_run_key("r1", STORE, environ=environ, spark_conf=spark_conf, create=False, **given)

    expectations = [
        (dict(key=b"secret given directly ........"), b"secret given directly ........", "the key given"),
        (dict(key_file=files["arg"]), b"secret from arg ........", f"key file {files['arg']}"),
        ({}, b"secret from env ........", "SPARKDBN_KEY_FILE"),
    ]
    for given, secret, source in expectations:
        found = resolved(**given)
        assert found.key == derive_run_key(secret, "r1") and source in found.source
    del environ["SPARKDBN_KEY_FILE"]
    assert resolved().key == derive_run_key(b"secret from SPARKDBN_KEY ....", "r1")
    del environ["SPARKDBN_KEY"]
    assert resolved().source == "spark.authenticate.secret"
    assert resolved().key == derive_run_key(b"secret from the spark conf ....", "r1")
    spark_conf.clear()
    found = resolved()
    assert found.key == derive_run_key(b"secret kept from the first fit ..", "r1") and "kept" in found.source
    assert "key=" not in repr(found) and found.key.hex() not in repr(found)


def test_a_first_fit_generates_a_key_kept_private_on_this_machine_and_never_in_the_store(tmp_path, environ):
    store = tmp_path / "store"
    first = resolve_run_key("r1", str(store), environ=environ)
    path = stored_key_path("r1", str(store), environ)
    assert first.source == f"key file {path} (generated)"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(os.path.dirname(os.path.dirname(path))).st_mode) == 0o700
    assert path.startswith(str(tmp_path / "config" / "sparkdbn" / "keys"))
    assert not store.exists()  # the store was not even created, let alone written
    again = resolve_run_key("r1", f"file://{store}", environ=environ, create=False)  # same store, other spelling
    assert again.key == first.key and "kept from the first fit" in again.source
    other_run = resolve_run_key("r2", str(store), environ=environ)
    other_store = resolve_run_key("r1", str(tmp_path / "elsewhere"), environ=environ)
    assert len({first.key, other_run.key, other_store.key}) == 3
    # The kept file holds the master secret: the same secret given another way yields the same key.
    assert resolve_run_key("r1", "any", key_file=path, environ={}).key == first.key


def test_without_xdg_config_home_the_key_is_kept_under_home_dot_config(tmp_path):
    environ = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": "relative/ignored"}
    resolve_run_key("r1", STORE, environ=environ)
    assert stored_key_path("r1", STORE, environ).startswith(str(tmp_path / "home" / ".config" / "sparkdbn" / "keys"))
    assert os.path.exists(stored_key_path("r1", STORE, environ))


def test_a_resume_without_any_key_says_where_it_looked_and_how_to_provide_one(environ):
    with pytest.raises(RunKeyError) as caught:
        resolve_run_key("r1", STORE, environ=environ, create=False)
    message = str(caught.value)
    for expected in ("key=, key_file=", "SPARKDBN_KEY_FILE", "SPARKDBN_KEY", "spark.authenticate.secret",
                     stored_key_path("r1", STORE, environ), "first trained", "copy that file"):
        assert expected in message, expected
    assert not os.path.exists(stored_key_path("r1", STORE, environ))


def test_a_store_reached_through_a_link_finds_its_key_and_a_moved_one_names_the_keys_kept(tmp_path, environ):
    # Keys were filed by the store's path as given: the same store through a symbolic link had "no key",
    # and a store moved elsewhere said so without naming the key files kept for that run.
    real, link = tmp_path / "disk" / "store", tmp_path / "link"
    real.mkdir(parents=True)
    link.symlink_to(real)
    first = resolve_run_key("r1", str(real), environ=environ)
    assert resolve_run_key("r1", f"file://{link}", environ=environ, create=False).key == first.key
    assert stored_key_path("r1", str(link), environ) == stored_key_path("r1", str(real), environ)

    # A key filed by the linked path as given (before keys followed links) is still found.
    legacy = tmp_path / "old" / "store"
    legacy.mkdir(parents=True)
    (tmp_path / "old-link").symlink_to(legacy)
    as_given = storage.sha256_hex(f"file://{tmp_path / 'old-link'}\nr2".encode())[:16]
    keys = Path(environ["XDG_CONFIG_HOME"]) / "sparkdbn" / "keys"
    write_secret(keys / f"r2-{as_given}.key", MASTER)
    assert resolve_run_key("r2", str(tmp_path / "old-link"), environ=environ, create=False).key == \
        derive_run_key(MASTER, "r2")

    with pytest.raises(RunKeyError) as caught:
        resolve_run_key("r1", str(tmp_path / "moved"), environ=environ, create=False)
    assert str(caught.value).endswith(f"Kept here for a run named 'r1' of another store URL (a store moved keeps its "
                                      f"key under its old URL): {stored_key_path('r1', str(real), environ)}; point "
                                      "SPARKDBN_KEY_FILE at the one of this store")
    # Said to command-line users too: what to set, and where the docs say it.
    assert "point SPARKDBN_KEY_FILE at a copy of it (docs/store.md, Run keys)" in str(caught.value)


def test_the_command_lines_help_says_where_run_keys_live_and_how_another_machine_finds_one(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    said = " ".join(capsys.readouterr().out.split())
    assert "~/.config/sparkdbn/keys/" in said and "SPARKDBN_KEY_FILE=<a copy of that file>" in said


@pytest.mark.parametrize(
    "given, message",
    [
        (dict(key=b"short"), "at least 16"),
        (dict(key=b"k" * 32, key_file="/x"), "not both"),
        (dict(key_file="/no/such/key"), "cannot read the key file /no/such/key"),
        (dict(key_file="EMPTY"), "holds 0 byte"),
        (dict(key_file="HUGE"), "not a key file"),
        (dict(spark_conf={"spark.authenticate.secret": "tiny"}), "spark.authenticate.secret: .*at least 16"),
    ],
)  # fmt: skip
def test_a_key_that_is_too_short_unreadable_or_ambiguous_is_refused_clearly(tmp_path, environ, given, message):
    if given.get("key_file") == "EMPTY":
        given["key_file"] = write_secret(tmp_path / "empty", b"\n")
    elif given.get("key_file") == "HUGE":
        given["key_file"] = write_secret(tmp_path / "huge", b"x" * 100_000)
    with pytest.raises(RunKeyError, match=message):
        resolve_run_key("r1", STORE, environ=environ, **given)


def test_a_short_sparkdbn_key_is_refused_naming_the_variable(environ):
    environ["SPARKDBN_KEY"] = "pw"
    with pytest.raises(RunKeyError, match="SPARKDBN_KEY: the secret has 2 byte"):
        resolve_run_key("r1", STORE, environ=environ)


def test_a_kept_key_file_that_others_can_read_is_refused(environ):
    resolve_run_key("r1", STORE, environ=environ)
    path = stored_key_path("r1", STORE, environ)
    os.chmod(path, 0o644)
    with pytest.raises(RunKeyError, match=f"chmod 600 {path}"):
        resolve_run_key("r1", STORE, environ=environ)


def test_resuming_with_another_key_stops_at_the_run_record_saying_the_key_is_wrong(tmp_path, environ):
    store = storage.open_store(str(tmp_path / "store"))
    first = resolve_run_key("r1", store.url, environ=environ)
    storage.RunStore(store, "r1", first.key).write_record({"phases": ["rbm0"], "status": "running"})
    environ["SPARKDBN_KEY"] = "a different secret, 32 bytes...."
    wrong = resolve_run_key("r1", store.url, environ=environ, create=False)
    with pytest.raises(storage.AuthenticationError, match="does not verify under the key given \\(wrong key"):
        storage.RunStore(store, "r1", wrong.key).read_record()


def test_the_key_module_does_not_import_pyspark():
    source = Path(__file__).parents[2].joinpath("node", "run", "_keys.py").read_text()
    imported = set()
    for statement in ast.walk(ast.parse(source)):
        if isinstance(statement, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in statement.names)
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0:
            imported.add(statement.module.split(".")[0])
    assert "pyspark" not in imported and imported <= {"__future__", "contextlib", "logging", "os", "secrets", "stat",
                                                       "dataclasses", "typing", "storage"}  # fmt: skip
