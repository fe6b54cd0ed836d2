"""Ledger metadata serialization, byte-compatible with Apache BookKeeper 4.9+.

Pure codec, no I/O. Layout of a ledger's metadata node:

* format 3 (written for new ledgers): ``b"BookieMetadataFormatVersion\\t3\\n"`` then the
  ``LedgerMetadataFormat`` protobuf prefixed by its length as a varint (Java's
  ``writeDelimitedTo``);
* format 2 (read, and written back for ledgers read in it): the same header line with ``2``,
  then the protobuf *text* format of ``LedgerMetadataFormat``.

Format 1 (BookKeeper < 4.2, plain text) is refused with ``ProtocolError``. Field numbers of
``LedgerMetadataFormat``: quorumSize 1 (write quorum), ensembleSize 2, length 3, lastEntryId 4,
state 5, segment 6 {ensembleMember 1, firstEntryId 2}, digestType 7, password 8,
ackQuorumSize 9 (absent: equal to the write quorum), ctime 10, customMetadata 11
{key 1, value 2}, cToken 12.
"""

from __future__ import annotations

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from bkeeper.common.errors import BKeeperError, ConfigError, ProtocolError
from bkeeper.common.ids import BookieId
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.store import NODE_DATA_BYTES_MAX
from bkeeper.wire import varint as wire_varint
from bkeeper.wire._pb.data_formats_pb2 import LedgerMetadataFormat
from bkeeper.wire.digest import DigestType

__all__ = [
    "HEADER_KEY",
    "decode_ledger_metadata",
    "decode_varint",
    "encode_ledger_metadata",
    "from_proto",
    "to_proto",
]

HEADER_KEY = b"BookieMetadataFormatVersion"
_VERSION_DIGITS_MAX = 10


def encode_ledger_metadata(metadata: LedgerMetadata) -> bytes:
    """The bytes of ``metadata`` in its ``format_version`` (2 or 3)."""
    message = to_proto(metadata)
    header = HEADER_KEY + b"\t%d\n" % metadata.format_version
    if metadata.format_version == 3:
        body = message.SerializeToString()
        return header + wire_varint.encode_varint(len(body)) + body
    if metadata.format_version == 2:
        return header + text_format.MessageToString(message).encode()
    raise ConfigError(f"ledger metadata format {metadata.format_version} cannot be written")


def decode_ledger_metadata(data: bytes) -> LedgerMetadata:
    """Metadata from a node's bytes (format 2 or 3); ``ProtocolError`` if unreadable."""
    version, body = _split_header(data)
    message = LedgerMetadataFormat()
    try:
        if version == 3:
            length, offset = decode_varint(body, 0)
            if offset + length != len(body):
                raise ProtocolError(f"metadata body is {len(body) - offset} bytes, not {length}")
            message.ParseFromString(body[offset:])
        elif version == 2:
            text_format.Parse(body.decode(), message)
        else:
            raise ProtocolError(f"ledger metadata format {version} is not supported")
    except (DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"ledger metadata (format {version}) is unreadable: {exc}") from exc
    return from_proto(message, version)


def to_proto(metadata: LedgerMetadata) -> LedgerMetadataFormat:
    message = LedgerMetadataFormat(
        quorumSize=metadata.write_quorum,
        ensembleSize=metadata.ensemble_size,
        length=metadata.length,
        lastEntryId=metadata.last_entry_id,
        state=LedgerMetadataFormat.State.ValueType(int(metadata.state)),
        digestType=LedgerMetadataFormat.DigestType.ValueType(metadata.digest_type),
        ackQuorumSize=metadata.ack_quorum,
    )
    if metadata.has_password:
        message.password = metadata.password
    for first_entry_id, ensemble in metadata.segments.items():
        message.segment.add(ensembleMember=list(ensemble), firstEntryId=first_entry_id)
    if metadata.ctime_ms is not None:
        message.ctime = metadata.ctime_ms
    for key in sorted(metadata.custom_metadata):
        message.customMetadata.add(key=key, value=metadata.custom_metadata[key])
    if metadata.ctoken:
        message.cToken = metadata.ctoken
    return message


def from_proto(message: LedgerMetadataFormat, format_version: int = 3) -> LedgerMetadata:
    """The model of a decoded message; ``ProtocolError`` if it breaks an invariant."""
    try:
        return LedgerMetadata(
            ensemble_size=message.ensembleSize,
            write_quorum=message.quorumSize,
            ack_quorum=(
                message.ackQuorumSize if message.HasField("ackQuorumSize") else message.quorumSize
            ),
            segments={
                s.firstEntryId: tuple(BookieId(b) for b in s.ensembleMember)
                for s in message.segment
            },
            digest_type=(
                DigestType(message.digestType)
                if message.HasField("digestType")
                else DigestType.CRC32
            ),
            password=message.password,
            has_password=message.HasField("password"),
            state=LedgerState(message.state),
            last_entry_id=message.lastEntryId if message.HasField("lastEntryId") else -1,
            length=message.length,
            ctime_ms=message.ctime if message.HasField("ctime") else None,
            custom_metadata={e.key: e.value for e in message.customMetadata},
            ctoken=message.cToken,
            format_version=format_version,
        )
    except (BKeeperError, ValueError) as exc:
        raise ProtocolError(f"ledger metadata breaks an invariant: {exc}") from exc


def decode_varint(data: bytes, offset: int) -> tuple[int, int]:
    """The length varint at ``offset`` and the offset after it; ``ProtocolError`` if malformed
    or larger than a node can hold."""
    value, after = wire_varint.decode_varint(data, offset)
    if value > NODE_DATA_BYTES_MAX:
        raise ProtocolError(f"length {value} exceeds {NODE_DATA_BYTES_MAX}")
    return value, after


def _split_header(data: bytes) -> tuple[int, bytes]:
    key, tab, rest = data.partition(b"\t")
    if key != HEADER_KEY or not tab:
        raise ProtocolError(f"ledger metadata does not start with {HEADER_KEY.decode()}")
    digits, newline, body = rest.partition(b"\n")
    if not newline or not digits.isdigit() or len(digits) > _VERSION_DIGITS_MAX:
        raise ProtocolError(f"ledger metadata header has a bad version {digits[:16]!r}")
    return int(digits), body
