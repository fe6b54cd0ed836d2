"""The record envelope and the log metadata encoding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkeeper.common.errors import ConfigError, ProtocolError
from bkeeper.namedlog import LogMetadata, Position, decode_record, encode_record, logs_root
from bkeeper.namedlog.core import LogLedger, check_log_name

POS = Position(3, 4)


@given(
    payload=st.binary(max_size=300),
    timestamp=st.integers(-(2**63), 2**63 - 1),
    key=st.none() | st.binary(max_size=70),
    properties=st.dictionaries(st.text(max_size=10), st.binary(max_size=20), max_size=5),
)
def test_records_round_trip(payload, timestamp, key, properties):
    record = decode_record(encode_record(payload, timestamp, key, properties), POS)
    assert (record.payload, record.timestamp_ms, record.key) == (payload, timestamp, key)
    assert dict(record.properties) == properties
    assert record.position == POS


def test_envelope_bytes_are_as_documented():
    data = encode_record(b"pay", 0x0102030405060708, b"k", {"a": b"v"})
    assert data == (
        b"\x01\x03\x01\x02\x03\x04\x05\x06\x07\x08"  # version, flags, timestamp
        b"\x00\x01k"  # key
        b"\x00\x01\x00\x01a\x00\x00\x00\x01v"  # one property
        b"pay"
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01",
        b"\x02\x00" + bytes(8),
        b"\x01\x80" + bytes(8),
        b"\x01\x01" + bytes(8) + b"\x00\x05ab",
    ],
)
def test_malformed_records_name_their_position(data):
    with pytest.raises(ProtocolError, match="record at 3:4"):
        decode_record(data, POS)


def test_limits_and_positions():
    with pytest.raises(ConfigError):
        encode_record(b"", 0, b"k" * 70_000)
    assert Position.parse("12:7") == Position(12, 7) and str(Position(12, 7)) == "12:7"
    assert Position(1, 99) < Position(2, 0)
    for bad in ("12", "a:b", "-1:0"):
        with pytest.raises(ConfigError):
            Position.parse(bad)
    for bad in ("", "../x", "a/b", ".hidden", "x" * 201):
        with pytest.raises(ConfigError):
            check_log_name(bad)


def test_metadata_round_trip_and_checks():
    meta = LogMetadata(5, (LogLedger(1, 6), LogLedger(4, 7)), Position(4, 0))
    assert LogMetadata.decode(meta.encode()) == meta
    with pytest.raises(ConfigError):
        meta.with_ledger(3, 8)
    truncated, dropped = meta.truncated(Position(9, 0))
    assert dropped == [1] and [x.ledger_id for x in truncated.ledgers] == [4]
    for bad in (
        b"{",
        b'{"format": 2}',
        b'{"format":1,"ctime_ms":1,"ledgers":[{"id":2,"ctime_ms":1},{"id":1,"ctime_ms":1}]}',
    ):
        with pytest.raises(ProtocolError):
            LogMetadata.decode(bad)
    assert logs_root("/ledgers") == "/bkeeper/logs"
    assert logs_root("/a/b/ledgers") == "/a/b/bkeeper/logs"
