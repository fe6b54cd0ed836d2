"""Digests, protocol detection and the entry-set encoding."""

from __future__ import annotations

import contextlib

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkeeper.common.errors import ConfigError, DigestMismatchError, ProtocolError
from bkeeper.wire import entryset, v2, v3
from bkeeper.wire.codes import Protocol
from bkeeper.wire.detect import detect_protocol
from bkeeper.wire.digest import DigestManager, DigestType
from bkeeper.wire.messages import ReadRequest


def test_crc32c_known_vector():
    assert crc32c.crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize("digest", list(DigestType))
@given(payload=st.binary(max_size=100), position=st.integers(0, 1000))
def test_tampering_any_byte_is_detected(digest, payload, position):
    manager = DigestManager(42, digest, b"pw")
    body = bytearray(manager.encode_entry(7, 6, 100, payload))
    assert manager.verify_entry(bytes(body), 7).data == payload
    index = position % len(body)
    body[index] ^= 0x01
    if digest is DigestType.DUMMY and index >= 32:
        return  # no digest: the payload is unprotected
    if digest is DigestType.DUMMY and 16 <= index < 32:
        return  # LAC and length are covered only by a digest
    with pytest.raises(DigestMismatchError) as info:
        manager.verify_entry(bytes(body), 7)
    assert "ledger" in str(info.value) and "entry" in str(info.value)


def test_wrong_entry_or_ledger_is_a_mismatch():
    manager = DigestManager(1, DigestType.CRC32C, b"pw")
    body = manager.encode_entry(3, 2, 10, b"x")
    with pytest.raises(DigestMismatchError, match="ledger 1 entry 4"):
        manager.verify_entry(body, 4)
    with pytest.raises(DigestMismatchError, match="ledger 1"):
        DigestManager(2, DigestType.CRC32C, b"pw").verify_entry(body, 3)
    with pytest.raises(DigestMismatchError):
        DigestManager(1, DigestType.HMAC, b"pw").verify_entry(b"short", 3)


def test_hmac_depends_on_password():
    body = DigestManager(1, DigestType.HMAC, b"a").encode_entry(0, -1, 1, b"x")
    with pytest.raises(DigestMismatchError):
        DigestManager(1, DigestType.HMAC, b"b").verify_entry(body, 0)


def test_lac_body_round_trip():
    manager = DigestManager(5, DigestType.CRC32, b"pw")
    assert manager.verify_lac(manager.encode_lac(77)) == 77
    with pytest.raises(DigestMismatchError):
        manager.verify_lac(manager.encode_lac(77)[:-1] + b"\x00")


def test_digest_type_names():
    assert DigestType.parse("crc32c") is DigestType.CRC32C
    assert DigestType.parse("MAC") is DigestType.HMAC
    with pytest.raises(ConfigError, match="sha256"):
        DigestType.parse("sha256")


def test_detection():
    assert detect_protocol(v2.encode_request(ReadRequest(1, 2))) is Protocol.V2
    assert detect_protocol(v3.encode_request(ReadRequest(1, 2, txn_id=1))) is Protocol.V3
    with pytest.raises(ProtocolError):
        detect_protocol(b"\x7fgarbage")
    with pytest.raises(ProtocolError):
        detect_protocol(b"")


@given(st.lists(st.integers(0, 500), max_size=200))
def test_entry_set_round_trip(ids):
    ids = sorted(set(ids))
    assert entryset.decode_entry_ids(entryset.encode_entry_ids(ids)) == ids


def test_entry_set_layout_by_hand():
    # ids 1,2,3,6,7,8,11: one group {first 1, last 6, size 3, period 5} and one {11, 11, 1, 0}
    data = entryset.encode_entry_ids([1, 2, 3, 6, 7, 8, 11])
    assert data[:8] == bytes.fromhex("0000000000000002") and data[8:64] == bytes(56)
    assert data[64:88] == bytes.fromhex("000000000000000100000000000000060000000300000005")
    assert data[88:] == bytes.fromhex("000000000000000b000000000000000b0000000100000000")


@given(st.binary(max_size=200))
def test_entry_set_garbage_raises_protocol_error(data):
    with contextlib.suppress(ProtocolError):
        entryset.decode_ranges(data)


def test_entry_set_refuses_huge_expansion():
    data = bytes.fromhex("0000000000000001").ljust(64, b"\0") + bytes.fromhex(
        "000000000000000040000000000000000000000100000002"
    )
    with pytest.raises(ProtocolError, match="more than"):
        entryset.decode_ranges(data)
