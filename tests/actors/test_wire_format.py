"""Messages and the signed msgpack wire format."""

import time

import msgpack
import pytest

from actors import SCHEMA_VERSION, Goodbye, MessageError, WeightAnnouncement, decode_frames, encode_message
from actors._wire import TOPIC, sign

SECRET = b"run-secret-0123456789"


def announcement(**changes):
    fields = dict(run="run-1", node="node-a", phase="rbm", version=3, sha256="ab" * 32, mac="cd" * 32,
                  samples_seen=1200, sent_at=1_700_000_000.5)  # fmt: skip
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
        msgpack.packb({"type": ["announce"], "schema": SCHEMA_VERSION, "run": "run-1"}),
        msgpack.packb({"type": {"announce": 1}, "schema": SCHEMA_VERSION, "run": "run-1"}),
        msgpack.packb({"type": "goodbye", "schema": SCHEMA_VERSION, "run": "run-1", "node": 7, "sent_at": 1.0}),
    ],
)
def test_signed_garbage_is_malformed_and_never_raises_anything_else(payload):
    assert reason_of([TOPIC, payload, sign(SECRET, TOPIC, payload)]) == "malformed"


@pytest.mark.parametrize(
    "changes",
    [dict(version=-1), dict(node=""), dict(node="../other"), dict(phase="a/b"), dict(node="x" * 300),
     dict(sha256="AB" * 32), dict(mac="cd" * 31)],
)  # fmt: skip
def test_announcements_with_bad_versions_names_or_digests_are_malformed(changes):
    assert reason_of(encode_message(announcement(**changes), SECRET)) == "malformed"


@pytest.mark.parametrize(
    "payload",
    [b"\x91" * 60_000 + b"\x00",  # arrays nested 60000 deep (within the payload size limit)
     b"\xdd\x00\x01\x00\x00" + b"\x00" * 10,  # an array claiming 65536 items
     msgpack.packb({"type": "announce", "schema": SCHEMA_VERSION, "run": "run-1", "node": "x" * 5000})],
)  # fmt: skip
def test_deep_nesting_and_long_fields_are_refused_by_the_decoder_as_malformed(payload):
    with pytest.raises(MessageError, match="msgpack") as caught:
        decode_frames([TOPIC, payload, sign(SECRET, TOPIC, payload)], SECRET, "run-1")
    assert caught.value.reason == "malformed"


def test_an_oversized_payload_is_refused_before_its_signature_is_computed():
    payload = b"\x00" * (1 << 20)
    assert reason_of([TOPIC, payload, sign(SECRET, TOPIC, payload)]) == "malformed"
