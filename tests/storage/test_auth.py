"""The one digest and MAC helper: sha256, HMAC-SHA256 over length-prefixed parts, signed JSON, refusal counts."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging

import pytest

from storage import AuthenticationError, mac_hex, sha256_hex, sign_json, verify_json, verify_mac
from storage._auth import Refusals

KEY = b"k" * 32


def test_sha256_hex_is_hashlib_sha256():
    assert sha256_hex(b"abc") == hashlib.sha256(b"abc").hexdigest()


def test_mac_hex_is_hmac_sha256_of_length_prefixed_parts():
    expected = hmac.new(KEY, b"\0" * 7 + b"\x02ab" + b"\0" * 7 + b"\x01c" + b"\0" * 7 + b"\x0212", "sha256").hexdigest()
    assert mac_hex(KEY, "ab", b"c", 12) == expected
    assert mac_hex(KEY, "ab", "c") != mac_hex(KEY, "a", "bc")  # no ambiguity between parts
    assert mac_hex(KEY, "ab") != mac_hex(b"K" * 32, "ab")


def test_verify_mac_accepts_only_the_exact_mac():
    mac = mac_hex(KEY, "purpose", "x")
    assert verify_mac(KEY, mac, "purpose", "x")
    assert not verify_mac(KEY, mac, "purpose", "y")
    assert not verify_mac(KEY, mac[:-1] + ("0" if mac[-1] != "0" else "1"), "purpose", "x")
    assert not verify_mac(KEY, None, "purpose", "x")  # type: ignore[arg-type]
    assert not verify_mac(KEY, "\u00e9" * 64, "purpose", "x")


def test_signed_json_round_trips_and_binds_its_context():
    value = {"b": [1, 2.5, None, True], "a": "caf\u00e9", "n": 10**20}
    data = sign_json(KEY, value, "ctx", "r1")
    assert verify_json(KEY, data, "ctx", "r1", where="here") == value
    with pytest.raises(AuthenticationError, match="here: the signature does not verify"):
        verify_json(KEY, data, "ctx", "r2", where="here")
    with pytest.raises(AuthenticationError):
        verify_json(b"K" * 32, data, "ctx", "r1", where="here")


@pytest.mark.parametrize(
    "data",
    [b"", b"\xff\xfe", b"{}", b"[1]", json.dumps({"signed": 1}).encode(), b"[" * 100_000,
     json.dumps({"hmac_sha256": 5, "signed": 1}).encode(), b'{"hmac_sha256": "00", "signed": NaN}'],
)  # fmt: skip
def test_anything_but_a_signed_envelope_raises_an_authentication_error(data):
    with pytest.raises(AuthenticationError, match="where"):
        verify_json(KEY, data, "ctx", where="where")


def test_refusals_count_each_item_once_and_log_once_per_source(caplog):
    refusals = Refusals(logging.getLogger("test.refusals"), max_remembered=3)
    with caplog.at_level(logging.WARNING):
        for item in ("f1", "f2", "f1", "f3"):
            refusals.refuse("unauthenticated", item, "folder-a", f"{item} bad")
        refusals.refuse("corrupt", "f9", "folder-b", "f9 bad")
    assert refusals.counts() == {"unauthenticated": 3, "corrupt": 1}
    assert [record.getMessage().split(":")[0] for record in caplog.records] == ["refused (unauthenticated)", "refused (corrupt)"]
    for item in ("f4", "f5", "f6"):  # memory is bounded: f1 is forgotten, then counted again
        refusals.refuse("unauthenticated", item, "folder-a", "bad")
    refusals.refuse("unauthenticated", "f1", "folder-a", "bad")
    assert refusals.counts()["unauthenticated"] == 7
