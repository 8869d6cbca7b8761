"""The driver warns of what the nodes refused as unverified, once per epoch it happens (node.watch._refusals)."""

from __future__ import annotations

import logging

from node.watch._refusals import RefusalWatch


def report(node: str, time: float, **dropped: int) -> dict:
    stats = {"dropped_stale": 40, "dropped_missing": 3,
             **{f"dropped_{reason}": count for reason, count in dropped.items()}}
    return {"node": node, "time": time, "stats": stats}


def test_unverified_drops_are_warned_of_once_per_epoch_by_reason_and_ordinary_ones_never(caplog):
    watch = RefusalWatch("r")
    with caplog.at_level(logging.WARNING, logger="node.watch._refusals"):
        assert watch.note("rbm0", 0, [report("a", 1.0), report("b", 2.0)]) == {}  # stale, missing: ordinary
        assert not caplog.records
        # Running totals: the node's newest report of the epoch holds them; an older one is not added again.
        added = watch.note("rbm0", 1, [report("a", 3.0, corrupt=1), report("a", 4.0, corrupt=5, unauthenticated=2),
                                       report("b", 5.0, bad_signature=7)])
        assert added == {"corrupt": 5, "unauthenticated": 2, "bad_signature": 7}
        assert watch.note("rbm0", 2, [report("a", 6.0, corrupt=5, unauthenticated=2)]) == {}  # nothing new
        # A new process under a node's name counts from 0: its 3 are new, not 3 fewer.
        assert watch.note("finetune", 0, [report("a", 7.0, oversized=3), report("b", 8.0, bad_signature=9)]) == {
            "oversized": 3, "bad_signature": 2}
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2
    assert messages[0].startswith("run r rbm0 epoch 2: the nodes refused 14 messages or store files that did not "
                                  "verify (bad_signature 7, corrupt 5, unauthenticated 2)")
    assert "run r finetune epoch 1: the nodes refused 5 " in messages[1]


def test_the_watch_of_a_fit_adds_the_epochs_unverified_drops_to_its_summary(caplog):
    from node.watch import RunWatch

    class Settings:  # no early stopping, no live log, no MLflow
        early_stopping = log_dir = mlflow_tracking_uri = None

        def to_dict(self) -> dict:
            return {}

    class Record:
        def step(self, phase: str) -> dict:
            return {}

    watch = RunWatch(settings=Settings(), run="r", spec={}, record=Record(), weights=None, feature_shape=(4,),
                     validator=None)
    quiet, attacked = {"records": [report("a", 1.0)]}, {"records": [report("a", 2.0, unauthenticated=4)]}
    with caplog.at_level(logging.WARNING, logger="node.watch._refusals"):
        assert watch.end_epoch("rbm0", 0, quiet, model=None) is False
        assert watch.end_epoch("rbm0", 1, attacked, model=None) is False
    assert "refused" not in quiet and attacked["refused"] == {"unauthenticated": 4}
    assert [record.levelname for record in caplog.records] == ["WARNING"]
