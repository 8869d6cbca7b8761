"""One walk of an exception's causes (``node._errors.error_chain``), and the rules built on it."""

from __future__ import annotations

import storage
from node._errors import InputDataError, TrainingError, error_chain, store_failure
from node.cli._options import Terminated, interrupt_word, is_interrupt


def _raised(make):
    try:
        make()
    except BaseException as error:  # noqa: BLE001 - the test looks at what was raised
        return error
    raise AssertionError("nothing was raised")


def _from(outer, inner):
    def make():
        raise outer from inner
    return make


def _while_handling(outer, inner):
    def make():
        try:
            raise inner
        except BaseException:
            raise outer
    return make


def test_the_chain_follows_causes_and_contexts_outermost_first_each_once():
    down = storage.StoreUnavailableError("store down")
    error = _raised(_while_handling(TrainingError("fit failed"), _raised(_from(InputDataError("bad"), down))))
    assert [type(link) for link in error_chain(error)] == [TrainingError, InputDataError, storage.StoreUnavailableError]
    assert [type(link) for link in error_chain(error, context=False)] == [TrainingError]
    assert error_chain(None) == []
    looped = TrainingError("a")
    looped.__cause__ = TrainingError("b")
    looped.__cause__.__cause__ = looped
    assert len(error_chain(looped)) == 2


def test_a_store_failure_is_what_an_error_was_raised_from_not_what_it_met_while_handling_one():
    down = storage.StoreUnavailableError("store down")
    assert store_failure(_raised(_from(TrainingError("publish failed"), down))) is down
    # An error of its own raised while a store failure was handled (bad data found in an except block)
    # is not one: Spark would meet the data, not the store, on every attempt.
    assert store_failure(_raised(_while_handling(InputDataError("bad row"), down))) is None


def test_interrupts_are_found_through_contexts():
    error = _raised(_while_handling(RuntimeError("py4j broke"), KeyboardInterrupt()))
    assert is_interrupt(error) and interrupt_word(error) == "interrupted"
    error = _raised(_while_handling(RuntimeError("py4j broke"), Terminated()))
    assert interrupt_word(error) == "terminated (SIGTERM)"
    assert not is_interrupt(_raised(_from(TrainingError("x"), ValueError("y"))))
