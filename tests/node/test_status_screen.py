"""`sparkdbn status` says what a run trains on: where from, how much, of what shape, its classes."""

from __future__ import annotations

from node.watch._status import format_status


def _record(data: dict, classes: list | None) -> dict:
    return {"status": "running", "created": 0.0, "data": data, "classes": classes, "phases": ["finetune"],
            "steps": {"finetune": {"epochs_done": 1, "epochs": 3, "nodes": [], "result": None, "restarts": []}}}


def test_the_status_screen_names_a_runs_data_and_classes_before_its_phases():
    staged = {"source": "dataset file:///data/iris", "n_samples": 120, "feature_shape": [4], "partitions": 4,
              "n_classes": 3}
    lines = format_status("iris", _record(staged, ["setosa", "versicolor", "virginica"]), {}, now=5.0).splitlines()
    assert lines[1] == ("data: dataset file:///data/iris, 120 samples of 4 features in 4 partitions, 3 classes "
                        "(setosa, versicolor, virginica)")
    assert lines[2] == "phases:"

    images = {"source": "arrays (1000, 1, 28, 28)", "origin": "recipe digits28", "n_samples": 1000, "feature_shape": [1, 28, 28],
              "partitions": 8, "n_classes": 12}
    lines = format_status("lenet", _record(images, list(range(12))), {}, now=5.0).splitlines()
    assert lines[1] == ("data: arrays (1000, 1, 28, 28) (recipe digits28), 1000 samples of 1x28x28 features in 8 partitions, 12 classes "
                        "(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ...)")

    unlabelled = {"source": "DataFrame[features, label]", "n_samples": 50, "feature_shape": [64], "partitions": 2,
                  "n_classes": None}
    lines = format_status("rbm", _record(unlabelled, None), {}, now=5.0).splitlines()
    assert lines[1] == "data: DataFrame[features, label], 50 samples of 64 features in 2 partitions"
    assert not any(line.startswith("data:") for line in format_status("new", {}, {}, now=5.0).splitlines())


def test_a_running_record_whose_driver_stopped_renewing_elsewhere_shows_as_probably_stopped(tmp_path):
    # A driver on another host cannot be looked up: its lease renewals (each says when, by its clock) tell.
    import time

    import storage
    from node.watch._status import driver_state

    folder = storage.LeaseFolder(storage.open_store(str(tmp_path)), "r", b"status-screen-run-key-of-32-bytes")
    assert driver_state(folder, now=time.time()) is None  # nobody ever held the run
    entry = {"token": "t", "fit": "f", "host": "elsewhere", "pid": 42, "started": time.time(), "timeout_s": 60.0}
    assert folder.take(1, entry)
    folder.renew(1, 0, "t")
    now = time.time()
    assert driver_state(folder, now=now + 10) == (True, "driver: host elsewhere, pid 42, lease renewed "
                                                                       "10s ago")
    assert driver_state(folder, now=now + 119)[0]  # within twice the timeout: clocks may differ
    assert driver_state(folder, now=now + 600) == (
        False, "probably not running: its driver (host elsewhere, pid 42) last renewed its lease 10min ago by the two "
               "hosts' clocks (it renews every 15 s); the next fit of the run takes it over after watching its lease "
               "for 60 s and resumes it")
    lines = format_status("r", {"status": "running"}, {"n1": {"status": "alive", "host": "elsewhere", "pid": 43}},
                          now=now + 600, driver=driver_state(folder, now=now + 600)).splitlines()
    assert lines[0] == "run r: stopped without finishing (its record says running)"
    assert lines[-1].startswith("  n1  gone ")
    folder.release(1, 0, "t")
    assert driver_state(folder, now=now) == (
        False, "not running: its driver (host elsewhere, pid 42) released the run without marking its record")
