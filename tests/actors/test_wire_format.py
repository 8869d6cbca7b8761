"""Messages and the signed msgpack wire format."""

import time

import msgpack
import pytest

from actors import SCHEMA_VERSION, Goodbye, MessageError, WeightAnnouncement, decode_frames, encode_message
from actors._wire import TOPIC, sign

SECRET = b"run-secret-0123456789"


def announcement(**changes):
    fields = dict(run="run-1", node="node-a", phase="rbm", version=3, path="runs/run-1/weights/rbm/node-a/x.npz",
                  sha256="ab" * 32, samples_seen=1200, sent_at=1_700_000_000.5)  # fmt: skip
    fields.update(changes)
    return WeightAnnouncement(**fields)


def reason_of(frames, secret=SECRET, run="run-1"):
    with pytest.raises(MessageError) as caught:
        decode_frames(frames, secret, run)
    return caught.value.reason


def test_an_announcement_and_a_goodbye_survive_the_round_trip_exactly():
    for message in (announcement(), Goodbye(run="run-1", node="node-a", sent_at=time.time())):
        assert decode_frames(encode_message(message, SECRET), SECRET, "run-1") == message


def test_messages_are_frozen_and_carry_the_schema_version():
    message = announcement()
    assert message.schema == SCHEMA_VERSION
    with pytest.raises(AttributeError):
        message.version = 4  # type: ignore[misc]


def test_a_frame_signed_with_another_secret_is_a_bad_signature():
    assert reason_of(encode_message(announcement(), b"someone-else")) == "bad_signature"


def test_a_frame_without_its_signature_is_a_bad_signature():
    assert reason_of(encode_message(announcement(), SECRET)[:2]) == "bad_signature"


def test_a_tampered_payload_is_a_bad_signature():
    topic, payload, mac = encode_message(announcement(version=3), SECRET)
    forged = msgpack.packb({**msgpack.unpackb(payload), "version": 99})
    assert reason_of([topic, forged, mac]) == "bad_signature"


def test_a_correctly_signed_message_of_another_run_is_dropped_as_wrong_run():
    assert reason_of(encode_message(announcement(run="run-2"), SECRET)) == "wrong_run"


def test_an_unknown_schema_is_dropped_as_schema():
    payload = msgpack.packb({**msgpack.unpackb(encode_message(announcement(), SECRET)[1]), "schema": SCHEMA_VERSION + 1})
    assert reason_of([TOPIC, payload, sign(SECRET, TOPIC, payload)]) == "schema"


@pytest.mark.parametrize(
    "frames",
    [
        [b"only-one-frame"],
        [TOPIC, b"a", b"b", b"c"],
        [b"other-topic", b"x", b"y"],
    ],
)
def test_frames_of_the_wrong_shape_are_malformed(frames):
    assert reason_of(frames) == "malformed"


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1 not msgpack",
        msgpack.packb([1, 2, 3]),
        msgpack.packb({"type": "announce", "schema": SCHEMA_VERSION, "run": "run-1"}),
        msgpack.packb({"type": "shout", "schema": SCHEMA_VERSION, "run": "run-1"}),
        msgpack.packb({"type": "goodbye", "schema": SCHEMA_VERSION, "run": "run-1", "node": 7, "sent_at": 1.0}),
    ],
)
def test_signed_garbage_is_malformed_and_never_raises_anything_else(payload):
    assert reason_of([TOPIC, payload, sign(SECRET, TOPIC, payload)]) == "malformed"


def test_a_negative_version_is_malformed():
    assert reason_of(encode_message(announcement(version=-1), SECRET)) == "malformed"


def test_an_oversized_payload_is_refused_before_its_signature_is_computed():
    payload = b"\x00" * (1 << 20)
    assert reason_of([TOPIC, payload, sign(SECRET, TOPIC, payload)]) == "malformed"
