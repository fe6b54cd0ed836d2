"""The ledger metadata model and its byte-level format (v3 binary, v2 text)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkeeper.common.errors import ConfigError, ProtocolError
from bkeeper.meta import DigestType
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.metadata_format import (
    decode_ledger_metadata,
    decode_varint,
    encode_ledger_metadata,
)
from bkeeper.wire.varint import encode_varint

HEADER_V3 = b"BookieMetadataFormatVersion\t3\n"
BOOKIES = ("10.0.0.1:3181", "10.0.0.2:3181", "10.0.0.3:3181")


def new_ledger(**overrides: object) -> LedgerMetadata:
    metadata = LedgerMetadata.new(BOOKIES, 2, 2, DigestType.CRC32C, b"secret", ctime_ms=1_700_000)
    return metadata if not overrides else LedgerMetadata(**{**_fields(metadata), **overrides})


def _fields(metadata: LedgerMetadata) -> dict[str, object]:
    return {name: getattr(metadata, name) for name in metadata.__dataclass_fields__}


def test_quorums_must_nest() -> None:
    with pytest.raises(ConfigError):
        LedgerMetadata.new(BOOKIES, 4, 2, DigestType.CRC32, b"")
    with pytest.raises(ConfigError):
        LedgerMetadata.new(BOOKIES, 2, 3, DigestType.CRC32, b"")
    with pytest.raises(ConfigError):
        LedgerMetadata.new(BOOKIES, 1, 0, DigestType.CRC32, b"")
    with pytest.raises(ConfigError):
        LedgerMetadata.new(("a:1", "a:1"), 2, 2, DigestType.CRC32, b"")  # not distinct


def test_segments_choose_the_ensemble_of_an_entry() -> None:
    metadata = new_ledger().with_new_segment(10, ("b:1", "c:1", "d:1"))
    metadata = metadata.with_new_segment(25, ("e:1", "c:1", "d:1"))
    assert metadata.ensemble_for(0) == BOOKIES
    assert metadata.ensemble_for(9) == BOOKIES
    assert metadata.ensemble_for(10) == ("b:1", "c:1", "d:1")
    assert metadata.ensemble_for(1000) == metadata.last_ensemble == ("e:1", "c:1", "d:1")
    # A new segment at the same first entry replaces the last (nothing was written to it).
    replaced = metadata.with_new_segment(25, ("f:1", "c:1", "d:1"))
    assert list(replaced.segments) == [0, 10, 25]
    with pytest.raises(ConfigError):
        metadata.with_new_segment(5, BOOKIES)


def test_helpers_return_new_values() -> None:
    metadata = new_ledger()
    recovering = metadata.in_recovery()
    closed = recovering.closed(last_entry_id=41, length=4200)
    assert metadata.state is LedgerState.OPEN and recovering.state is LedgerState.IN_RECOVERY
    assert closed.is_closed and (closed.last_entry_id, closed.length) == (41, 4200)
    assert metadata.with_state(LedgerState.CLOSED).last_entry_id == -1
    with pytest.raises(ConfigError):
        new_ledger(last_entry_id=3)  # an open ledger has no last entry yet
    assert "secret" not in repr(metadata)


def test_v3_bytes_are_bookkeepers() -> None:
    data = encode_ledger_metadata(new_ledger(custom_metadata={"app": b"x"}, ctoken=77))
    assert data.startswith(HEADER_V3)
    length, offset = decode_varint(data, len(HEADER_V3))
    body = data[offset:]
    assert len(body) == length
    fields = _wire_fields(body)
    # Hand-checked tags: quorumSize(1)=Qw, ensembleSize(2)=E, state(5), digestType(7), ...
    assert body[:4] == b"\x08\x02\x10\x03"  # field 1 varint 2; field 2 varint 3
    assert fields[1] == [2] and fields[2] == [3] and fields[9] == [2]
    assert fields[4] == [(1 << 64) - 1]  # lastEntryId -1 as a two's-complement int64
    assert fields[5] == [1] and fields[7] == [3] and fields[8] == [b"secret"]
    assert fields[10] == [1_700_000] and fields[12] == [77]
    segment = _wire_fields(fields[6][0])
    assert segment[1] == [b.encode() for b in BOOKIES] and segment[2] == [0]
    assert _wire_fields(fields[11][0]) == {1: [b"app"], 2: [b"x"]}


def test_v2_text_format_decodes() -> None:
    data = (
        b"BookieMetadataFormatVersion\t2\n"
        b"quorumSize: 2\nensembleSize: 3\nlength: 100\nlastEntryId: 9\nstate: CLOSED\n"
        b'segment {\n  ensembleMember: "10.0.0.1:3181"\n  ensembleMember: "10.0.0.2:3181"\n'
        b'  ensembleMember: "10.0.0.3:3181"\n  firstEntryId: 0\n}\n'
        b'digestType: CRC32\npassword: "pw"\nackQuorumSize: 2\nctime: 1500\n'
    )
    metadata = decode_ledger_metadata(data)
    assert metadata.state is LedgerState.CLOSED and metadata.last_entry_id == 9
    assert (metadata.ensemble_size, metadata.write_quorum, metadata.ack_quorum) == (3, 2, 2)
    assert metadata.segments == {0: BOOKIES} and metadata.password == b"pw"
    assert metadata.digest_type is DigestType.CRC32 and metadata.format_version == 2
    # Written back in the format it was read in.
    assert decode_ledger_metadata(encode_ledger_metadata(metadata)) == metadata
    assert encode_ledger_metadata(metadata).startswith(b"BookieMetadataFormatVersion\t2\n")


def test_missing_ack_quorum_means_write_quorum() -> None:
    data = encode_ledger_metadata(new_ledger(ack_quorum=1))
    text = b"BookieMetadataFormatVersion\t2\nquorumSize: 2\nensembleSize: 2\nlength: 0\n"
    text += b'state: OPEN\nsegment { ensembleMember: "a:1" ensembleMember: "b:1" firstEntryId: 0 }'
    assert decode_ledger_metadata(text).ack_quorum == 2
    assert decode_ledger_metadata(data).ack_quorum == 1


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"BookieMetadataFormatVersion\t1\nwhatever",
        b"BookieMetadataFormatVersion\t3\n\x05\x08",  # truncated body
        b"BookieMetadataFormatVersion\tx\n",
        b"SomethingElse\t3\n\x00",
        b"BookieMetadataFormatVersion\t2\nquorumSize: 3\nensembleSize: 2\nlength: 0\nstate: OPEN",
    ],
)
def test_unreadable_metadata_is_a_protocol_error(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        decode_ledger_metadata(data)


bookie_ids = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20)


@given(
    ensembles=st.lists(st.lists(bookie_ids, min_size=3, max_size=3, unique=True), min_size=1),
    quorums=st.sampled_from([(1, 1), (2, 1), (2, 2), (3, 2), (3, 3)]),
    digest=st.sampled_from(list(DigestType)),
    password=st.binary(max_size=32),
    custom=st.dictionaries(st.text(max_size=10), st.binary(max_size=10), max_size=3),
    closed_at=st.none() | st.integers(min_value=-1, max_value=1 << 40),
    ctime=st.none() | st.integers(min_value=0, max_value=1 << 50),
)
def test_v3_round_trip(
    ensembles: list[list[str]],
    quorums: tuple[int, int],
    digest: DigestType,
    password: bytes,
    custom: dict[str, bytes],
    closed_at: int | None,
    ctime: int | None,
) -> None:
    metadata = LedgerMetadata.new(
        ensembles[0], *quorums, digest, password, ctime_ms=ctime, custom_metadata=custom
    )
    for index, ensemble in enumerate(ensembles[1:], start=1):
        metadata = metadata.with_new_segment(index * 10, ensemble)
    if closed_at is not None:
        metadata = metadata.closed(closed_at, max(closed_at, 0) * 10)
    assert decode_ledger_metadata(encode_ledger_metadata(metadata)) == metadata


@given(st.integers(min_value=0, max_value=1 << 20))
def test_varint_round_trip(value: int) -> None:
    assert decode_varint(encode_varint(value), 0) == (value, len(encode_varint(value)))


def _wire_fields(body: bytes) -> dict[int, list[object]]:
    """A minimal protobuf wire-format reader: field number -> values (varints or bytes)."""
    fields: dict[int, list[object]] = {}
    offset = 0
    while offset < len(body):
        tag, offset = _varint(body, offset)
        number, wire_type = tag >> 3, tag & 7
        if wire_type == 0:
            value, offset = _varint(body, offset)
            fields.setdefault(number, []).append(value)
        elif wire_type == 2:
            length, offset = _varint(body, offset)
            fields.setdefault(number, []).append(body[offset : offset + length])
            offset += length
        else:
            raise AssertionError(f"unexpected wire type {wire_type}")
    return fields


def _varint(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, offset
