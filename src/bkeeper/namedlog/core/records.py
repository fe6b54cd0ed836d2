"""Positions, the record envelope and the record batch of named logs (pure code, no I/O).

An entry of a named log's ledger holds either one record (format 1, below) or a batch of
records (format 2); its first byte says which. Readers of the raw ledger see these bytes;
:func:`decode_entry` turns an entry of either format back into its records.

**Format 1, one record** (the envelope; what a writer with batching off writes), big-endian:

=========  =======================================================================
bytes      field
=========  =======================================================================
1          format version, 1
1          flags: bit 0 = a key follows, bit 1 = properties follow
8          append timestamp, milliseconds since the Unix epoch (signed)
2 + n      key: length n (at most 65,535), then the key bytes (only with flag bit 0)
2 + ...    properties (only with flag bit 1): count (at most 1,024), then for each one
           name length (2), name (UTF-8, at most 1,024 bytes), value length (4), value
rest       the payload
=========  =======================================================================

**Format 2, a record batch** (:func:`encode_batch`), big-endian:

=========  =======================================================================
bytes      field
=========  =======================================================================
1          format version, 2
1          codec of the body: 0 none, 1 zstd, 2 lz4
4          record count n, 1 to ``BATCH_RECORDS_MAX``
4          body length in bytes, uncompressed (only when the codec is not 0; at most
           ``BATCH_BODY_BYTES_MAX``)
rest       the body: as is with codec 0; else compressed as a whole, zstd as one
           Zstandard frame (RFC 8878), lz4 as one LZ4 block (no frame: its size is the
           body length above)
=========  =======================================================================

The body, uncompressed: a table of n record lengths (4 bytes each), then the n records
back to back, each a format-1 envelope as above (its own timestamp, key, properties and
payload) of the length the table gives; the body is exactly ``4 * n + sum(lengths)`` bytes.
Record i of the batch in entry E of ledger L has position ``(L, E, i)``; the record of a
format-1 entry has index 0. A reader lacking an entry's codec (``zstandard`` / ``lz4`` not
installed) fails with a ``ProtocolError`` naming it.

**Format 3, a chunk of a large record** (:func:`encode_chunks`), big-endian:

=========  =======================================================================
bytes      field
=========  =======================================================================
1          format version, 3
1          flags, 0 (reserved: a reader refuses others)
4          chunk index i, 0 to n - 1
4          chunk count n, 2 to ``CHUNKS_MAX``
4          record bytes: the length of the whole record's envelope (at most
           ``RECORD_BYTES_MAX``)
rest       piece i of the record's format-1 envelope (the envelope cut in n pieces, in
           order; each the writer's ``chunk_bytes`` long but the last)
=========  =======================================================================

A record whose envelope is larger than the writer's ``LogConfig.chunk_bytes`` is written as
n consecutive entries of one ledger, chunks 0 to n - 1, with nothing between them (never in a
batch, never compressed, never across a ledger roll). Its position is its **last** chunk's,
``(L, E_last)``, and :attr:`Record.chunks` says how many entries it spans (its first chunk is
entry ``E_last - chunks + 1``). A chunk alone holds no record: :func:`decode_entry` refuses
it, and readers put chunks back together with :class:`bkeeper.namedlog.core.chunks.Reassembly`.
Readers before format 3 fail on a chunk with a ``ProtocolError`` naming format 3.

**Fast path for decoders of many entries at once** (Spark's Arrow conversion):
:func:`entry_envelopes` gives an entry's records as :class:`Envelopes`: their count, the
length table (``record_count`` big-endian u32, ``numpy.frombuffer(lengths, ">u4")``) and the
envelopes back to back in one buffer, with no per-record Python work (a format-1 entry is
one envelope of the entry's length). Joining several entries' ``lengths`` and ``data`` gives
one table and one buffer; an envelope with flags 0 is the head (``HEAD``; its fields at
``HEAD_VERSION_AT``, ``HEAD_FLAGS_AT``, ``HEAD_TIMESTAMP_AT``) followed by the payload.
"""

from __future__ import annotations

import importlib
import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from bkeeper.common.errors import ConfigError, ProtocolError

__all__ = [
    "BATCH_BODY_BYTES_MAX",
    "BATCH_FORMAT_VERSION",
    "BATCH_HEAD",
    "BATCH_RECORDS_MAX",
    "CHUNKS_MAX",
    "CHUNK_BYTES_MIN",
    "CHUNK_FORMAT_VERSION",
    "CHUNK_HEAD",
    "CODECS",
    "CODEC_LZ4",
    "CODEC_NONE",
    "CODEC_ZSTD",
    "FORMAT_VERSION",
    "Envelopes",
    "HEAD",
    "HEAD_FLAGS_AT",
    "HEAD_TIMESTAMP_AT",
    "HEAD_VERSION_AT",
    "KEY_BYTES_MAX",
    "PROPERTIES_MAX",
    "PROPERTY_NAME_BYTES_MAX",
    "Position",
    "RECORD_BYTES_MAX",
    "Record",
    "available_codecs",
    "codec_id",
    "decode_entry",
    "decode_record",
    "encode_batch",
    "encode_record",
    "entry_envelopes",
]

FORMAT_VERSION = 1
KEY_BYTES_MAX = 0xFFFF
PROPERTIES_MAX = 1024
PROPERTY_NAME_BYTES_MAX = 1024

_FLAG_KEY = 0x1
_FLAG_PROPERTIES = 0x2
#: The head every record starts with (the table above): format version, flags, timestamp.
HEAD = struct.Struct(">BBq")
#: Where the head's fields lie, for decoders that parse many records at once (Spark's Arrow
#: conversion): a record with flags 0 is the head followed by the payload.
HEAD_VERSION_AT = 0
HEAD_FLAGS_AT = 1
HEAD_TIMESTAMP_AT = 2
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_TIMESTAMP = struct.Struct(">q")
_PLAIN_HEAD_BYTES = HEAD.size
_new_tuple = tuple.__new__

#: The first byte of an entry holding a record batch.
BATCH_FORMAT_VERSION = 2
#: The head of a record batch: format version 2, codec, record count.
BATCH_HEAD = struct.Struct(">BBI")
#: Records one batch holds at most.
BATCH_RECORDS_MAX = 1 << 20
#: Bytes a batch's body holds at most, uncompressed (a reader refuses to inflate more).
BATCH_BODY_BYTES_MAX = 64 * 1024 * 1024
CODEC_NONE = 0
CODEC_ZSTD = 1
CODEC_LZ4 = 2
#: Codec names (as ``LogConfig.compression`` takes them) and their ids.
CODECS = {"none": CODEC_NONE, "zstd": CODEC_ZSTD, "lz4": CODEC_LZ4}
_CODEC_NAMES = {number: name for name, number in CODECS.items()}
_CODEC_PACKAGES = {CODEC_ZSTD: "zstandard", CODEC_LZ4: "lz4"}
#: zstd's level for batches: fast (the writer compresses on the event loop).
ZSTD_LEVEL = 1

#: The first byte of an entry holding a chunk of a large record.
CHUNK_FORMAT_VERSION = 3
#: The head of a chunk: format version 3, flags, chunk index, chunk count, record bytes.
CHUNK_HEAD = struct.Struct(">BBIII")
#: The largest record (its whole envelope: payload, key, properties and a 10-byte head) a
#: writer takes and a reader puts back together: 64 MiB of payload with up to 1 MiB of key
#: and properties. A reader holds at most one record in progress, so this bounds its memory.
RECORD_BYTES_MAX = 65 * 1024 * 1024
#: The smallest chunk (``LogConfig.chunk_bytes`` at least).
CHUNK_BYTES_MIN = 64 * 1024
#: Chunks one record has at most (a reader refuses a chunk head claiming more).
CHUNKS_MAX = -(-RECORD_BYTES_MAX // CHUNK_BYTES_MIN)


class Position(NamedTuple):
    """Where a record lives: (ledger id, entry id, index in the entry's batch). Positions
    sort in log order, because a log only ever appends ledgers with ids greater than those
    it holds and a batch's records lie in index order. A single-record entry's record is
    index 0. As a start, ``(L, E, I)`` means record I of entry E, or the first record after
    it when E has no record I (so ``(L, E, n)`` of a batch of n records is ``(L, E + 1, 0)``).
    """

    ledger_id: int
    entry_id: int
    #: Shadows ``tuple.index``, which positions have no use for.
    index: int = 0  # type: ignore[assignment]

    def __str__(self) -> str:
        if self.index:
            return f"{self.ledger_id}:{self.entry_id}:{self.index}"
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """``"LEDGER:ENTRY"`` or ``"LEDGER:ENTRY:INDEX"`` as printed by ``str(position)``."""
        parts = text.split(":")
        try:
            if len(parts) not in (2, 3):
                raise ValueError(text)
            position = cls(*(int(part) for part in parts))
        except ValueError:
            raise ConfigError(
                f"position {text!r} is not LEDGER:ENTRY or LEDGER:ENTRY:INDEX (integers)"
            ) from None
        if min(position) < 0:
            raise ConfigError(f"position {text!r} has a negative part")
        return position

    def next(self) -> Position:
        """The position right after this record's (the next index of its entry)."""
        return Position(self.ledger_id, self.entry_id, self.index + 1)


class _NoProperties(Mapping[str, bytes]):
    """The properties of a record that has none: empty, read-only, shared, picklable."""

    __slots__ = ()

    def __getitem__(self, name: str) -> bytes:
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "{}"

    def __reduce__(self) -> str:
        return "NO_PROPERTIES"  # unpickled as this module's one instance


#: The properties of a record that has none.
NO_PROPERTIES: Mapping[str, bytes] = _NoProperties()


class Record(NamedTuple):
    """One record of a named log, as a reader gets it. ``entry_records``: how many records
    the entry holding it has (1: a format-1 entry; n: a batch, this one at
    ``position.index``). A named tuple: immutable, and cheap to make (a reader makes one per
    record)."""

    position: Position
    timestamp_ms: int
    payload: bytes
    key: bytes | None = None
    properties: Mapping[str, bytes] = NO_PROPERTIES
    entry_records: int = 1
    #: Entries the record spans: 1, or its chunk count when it was chunked (format 3: its
    #: position is its last chunk's, its first chunk is entry ``entry_id - chunks + 1``).
    chunks: int = 1


def encode_record(
    payload: bytes | bytearray | memoryview,
    timestamp_ms: int,
    key: bytes | None = None,
    properties: Mapping[str, bytes] | None = None,
) -> bytes:
    """The envelope bytes of one record; ``ConfigError`` when a part is too large."""
    flags = (_FLAG_KEY if key is not None else 0) | (_FLAG_PROPERTIES if properties else 0)
    parts: list[bytes | bytearray | memoryview] = [HEAD.pack(FORMAT_VERSION, flags, timestamp_ms)]
    if key is not None:
        if len(key) > KEY_BYTES_MAX:
            raise ConfigError(f"record key of {len(key)} bytes exceeds {KEY_BYTES_MAX}")
        parts += (_U16.pack(len(key)), key)
    if properties:
        if len(properties) > PROPERTIES_MAX:
            raise ConfigError(f"{len(properties)} record properties exceed {PROPERTIES_MAX}")
        parts.append(_U16.pack(len(properties)))
        for name, value in properties.items():
            raw = name.encode()
            if len(raw) > PROPERTY_NAME_BYTES_MAX:
                raise ConfigError(f"property name {name[:40]!r}... exceeds 1024 bytes")
            if not isinstance(value, bytes | bytearray):
                raise ConfigError(f"property {name!r} must be bytes")
            parts += (_U16.pack(len(raw)), raw, _U32.pack(len(value)), value)
    parts.append(payload)
    return b"".join(parts)


def decode_record(
    data: bytes | bytearray | memoryview, position: Position, entry_records: int = 1
) -> Record:
    """The record in envelope ``data`` (one of ``entry_records`` in its entry);
    ``ProtocolError`` naming the position when malformed."""
    view = memoryview(data)
    try:
        version, flags, timestamp = HEAD.unpack_from(view)
        if version != FORMAT_VERSION:
            raise ProtocolError(f"record format {version} is not {FORMAT_VERSION}")
        if flags & ~(_FLAG_KEY | _FLAG_PROPERTIES):
            raise ProtocolError(f"unknown record flags {flags:#x}")
        offset = HEAD.size
        key = None
        if flags & _FLAG_KEY:
            (size,) = _U16.unpack_from(view, offset)
            offset += 2
            key = bytes(view[offset : offset + size])
            offset += size
            if len(key) != size:
                raise ProtocolError("record key is cut short")
        properties: Mapping[str, bytes] = NO_PROPERTIES
        if flags & _FLAG_PROPERTIES:
            properties = found = {}
            (count,) = _U16.unpack_from(view, offset)
            offset += 2
            for _ in range(count):
                (size,) = _U16.unpack_from(view, offset)
                name = bytes(view[offset + 2 : offset + 2 + size]).decode()
                offset += 2 + size
                (size,) = _U32.unpack_from(view, offset)
                value = bytes(view[offset + 4 : offset + 4 + size])
                offset += 4 + size
                if len(value) != size:
                    raise ProtocolError("record property is cut short")
                found[name] = value
        if offset > len(view):
            raise ProtocolError("record envelope is cut short")
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"record at {position} is malformed: {exc}") from exc
    except ProtocolError as exc:
        raise ProtocolError(f"record at {position} is malformed: {exc}") from exc
    return Record(position, timestamp, bytes(view[offset:]), key, properties, entry_records)


# -- record batches (format 2) ------------------------------------------------------------


class Envelopes(NamedTuple):
    """An entry's records as envelopes (:func:`entry_envelopes`): ``record_count`` of
    them, ``lengths`` their lengths (``record_count`` big-endian u32) and ``data`` the
    envelopes back to back (exactly the sum of the lengths)."""

    record_count: int
    lengths: bytes | memoryview
    data: bytes | memoryview


def _codec_module(codec: int) -> Any:
    """The module implementing ``codec`` (imported on first use); ``ProtocolError`` naming
    it when it is unknown or not installed."""
    package = _CODEC_PACKAGES.get(codec)
    if package is None:
        raise ProtocolError(f"unknown record batch codec {codec}")
    try:
        if codec == CODEC_LZ4:
            return importlib.import_module("lz4.block")
        return importlib.import_module(package)
    except ImportError:
        raise ProtocolError(
            f"record batch codec {_CODEC_NAMES[codec]} needs the {package} package, which is "
            f"not installed (pip install {package})"
        ) from None


def available_codecs() -> list[str]:
    """The codec names this process can write and read."""
    names = ["none"]
    for name, number in CODECS.items():
        if number == CODEC_NONE:
            continue
        try:
            _codec_module(number)
        except ProtocolError:
            continue
        names.append(name)
    return names


def codec_id(name: str) -> int:
    """The id of codec ``name``; ``ConfigError`` when it is unknown or not installed."""
    number = CODECS.get(name)
    if number is None:
        raise ConfigError(f"compression {name!r} is not one of {', '.join(CODECS)}")
    if number != CODEC_NONE:
        try:
            _codec_module(number)
        except ProtocolError as exc:
            raise ConfigError(f"compression {name!r}: {exc}") from None
    return number


def encode_batch(
    envelopes: Sequence[bytes | bytearray | memoryview], codec: int = CODEC_NONE
) -> bytes:
    """The entry bytes of a batch of records, each given as its envelope
    (:func:`encode_record`), compressed with ``codec``; ``ConfigError`` when the batch is
    empty, has too many records or too large a body."""
    count = len(envelopes)
    if not 1 <= count <= BATCH_RECORDS_MAX:
        raise ConfigError(f"a record batch holds 1 to {BATCH_RECORDS_MAX} records, not {count}")
    table = struct.pack(f">{count}I", *map(len, envelopes))
    if codec == CODEC_NONE:
        return b"".join(
            (BATCH_HEAD.pack(BATCH_FORMAT_VERSION, CODEC_NONE, count), table, *envelopes)
        )
    body = b"".join((table, *envelopes))
    if len(body) > BATCH_BODY_BYTES_MAX:
        raise ConfigError(f"a record batch of {len(body)} bytes exceeds {BATCH_BODY_BYTES_MAX}")
    try:
        module = _codec_module(codec)
    except ProtocolError as exc:
        raise ConfigError(str(exc)) from None
    if codec == CODEC_ZSTD:
        packed = module.ZstdCompressor(level=ZSTD_LEVEL).compress(body)
    else:
        packed = module.compress(body, store_size=False)
    head = BATCH_HEAD.pack(BATCH_FORMAT_VERSION, codec, count) + _U32.pack(len(body))
    return head + bytes(packed)


def _inflate(view: memoryview, codec: int, size: int) -> bytes:
    module = _codec_module(codec)
    if size > BATCH_BODY_BYTES_MAX:
        raise ProtocolError(f"body of {size} bytes exceeds {BATCH_BODY_BYTES_MAX}")
    try:
        if codec == CODEC_ZSTD:
            body = module.ZstdDecompressor().decompress(view, max_output_size=size)
        else:
            body = module.decompress(view, uncompressed_size=size)
    except Exception as exc:  # the codecs raise their own error types
        raise ProtocolError(f"{_CODEC_NAMES[codec]} body does not decompress: {exc}") from exc
    if len(body) != size:
        raise ProtocolError(f"body inflates to {len(body)} bytes, not {size}")
    return bytes(body)  # the codecs are untyped


def entry_envelopes(
    data: bytes | bytearray | memoryview, ledger_id: int, entry_id: int
) -> Envelopes:
    """The records of an entry of either format, as envelopes (see the module docstring's
    fast path); ``ProtocolError`` naming the entry when its batch is malformed. The
    envelopes themselves are not checked here (:func:`decode_record` does)."""
    view = memoryview(data)
    if not view or view[0] != BATCH_FORMAT_VERSION:
        return Envelopes(1, _U32.pack(len(view)), view)
    try:
        if len(view) < BATCH_HEAD.size:
            raise ProtocolError("head is cut short")
        _, codec, count = BATCH_HEAD.unpack_from(view)
        if not 1 <= count <= BATCH_RECORDS_MAX:
            raise ProtocolError(f"record count {count} is not 1 to {BATCH_RECORDS_MAX}")
        if codec == CODEC_NONE:
            body = view[BATCH_HEAD.size :]
        else:
            _codec_module(codec)  # unknown or missing: say so first
            if len(view) < BATCH_HEAD.size + 4:
                raise ProtocolError("head is cut short")
            (size,) = _U32.unpack_from(view, BATCH_HEAD.size)
            body = memoryview(_inflate(view[BATCH_HEAD.size + 4 :], codec, size))
        table = 4 * count
        if len(body) < table:
            raise ProtocolError(f"length table of {count} records is cut short")
        total = sum(struct.unpack_from(f">{count}I", body))
        if total != len(body) - table:
            raise ProtocolError(f"records add up to {total} bytes, not {len(body) - table}")
    except ProtocolError as exc:
        raise ProtocolError(f"record batch at {ledger_id}:{entry_id}: {exc}") from None
    return Envelopes(count, body[:table], body[table:])


def decode_entry(
    data: bytes | bytearray | memoryview, ledger_id: int, entry_id: int
) -> list[Record]:
    """The records of an entry of either format, in index order; ``ProtocolError`` naming
    the position when malformed."""
    view = memoryview(data)
    if not view or view[0] != BATCH_FORMAT_VERSION:
        if view and view[0] == CHUNK_FORMAT_VERSION:
            raise ProtocolError(
                f"entry {ledger_id}:{entry_id} is a chunk of a large record (format 3), not a "
                "record: readers put chunks back together (bkeeper.namedlog.core.chunks)"
            )
        at = _new_tuple(Position, (ledger_id, entry_id, 0))
        if len(view) >= _PLAIN_HEAD_BYTES and view[0] == FORMAT_VERSION and not view[1]:
            (timestamp,) = _TIMESTAMP.unpack_from(view, HEAD_TIMESTAMP_AT)
            payload = bytes(view[_PLAIN_HEAD_BYTES:])
            return [_new_tuple(Record, (at, timestamp, payload, None, NO_PROPERTIES, 1, 1))]
        return [decode_record(view, at)]
    count, lengths, body = entry_envelopes(view, ledger_id, entry_id)
    records: list[Record] = []
    offset = 0
    for index, length in enumerate(struct.unpack(f">{count}I", lengths)):
        end = offset + length
        if length >= _PLAIN_HEAD_BYTES and body[offset] == FORMAT_VERSION and not body[offset + 1]:
            # Inline (no key, no properties: the common case): no call per record.
            (timestamp,) = _TIMESTAMP.unpack_from(body, offset + HEAD_TIMESTAMP_AT)
            at = _new_tuple(Position, (ledger_id, entry_id, index))
            payload = bytes(body[offset + _PLAIN_HEAD_BYTES : end])
            records.append(
                _new_tuple(Record, (at, timestamp, payload, None, NO_PROPERTIES, count, 1))
            )
        else:
            at = Position(ledger_id, entry_id, index)
            records.append(decode_record(body[offset:end], at, count))
        offset = end
    return records
