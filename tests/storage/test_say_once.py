"""The one helper that says a thing once: a warning the first time, the repeats quieter, memory bounded."""

import logging
import threading

from storage import SayOnce


def test_a_key_is_said_once_at_warning_level_and_its_repeats_at_debug(caplog):
    say_once = SayOnce(logging.getLogger("test.say_once"))
    with caplog.at_level(logging.DEBUG, logger="test.say_once"):
        firsts = [say_once.say(key, "refused %s", key) for key in ("a", "b", "a", ("c", 1), ("c", 1))]
    assert firsts == [True, True, False, True, False]
    assert [(record.levelno, record.getMessage()) for record in caplog.records] == [
        (logging.WARNING, "refused a"), (logging.WARNING, "refused b"), (logging.DEBUG, "refused a"),
        (logging.WARNING, "refused ('c', 1)"), (logging.DEBUG, "refused ('c', 1)")]
    assert {record.filename for record in caplog.records} == {"test_say_once.py"}  # the caller's line, not the helper's


def test_repeats_can_be_left_unsaid(caplog):
    say_once = SayOnce(logging.getLogger("test.say_once"), repeats_at=None)
    with caplog.at_level(logging.DEBUG, logger="test.say_once"):
        for _ in range(3):
            say_once.say("small partitions", "few steps")
    assert [record.levelno for record in caplog.records] == [logging.WARNING]


def test_only_the_newest_keys_are_remembered():
    say_once = SayOnce(logging.getLogger("test.say_once"), max_remembered=2)
    assert [say_once.first(key) for key in ("a", "b", "c")] == [True, True, True]
    assert say_once.first("c") is False and say_once.first("a") is True  # "a", the oldest, was forgotten


def test_threads_asking_about_one_key_hear_first_exactly_once():
    say_once = SayOnce(logging.getLogger("test.say_once"))
    answers: list[bool] = []
    start = threading.Barrier(8)

    def ask() -> None:
        start.wait()
        answers.extend(say_once.first(("peer", index % 4)) for index in range(1000))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(answers) == 4 and len(answers) == 8000
