"""Positions and the record envelope of named logs (pure code, no I/O).

A record is stored as one ledger entry whose payload is the envelope below (big-endian).
Readers of the raw ledger see these bytes; :func:`decode_record` turns them back.

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
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from bkeeper.common.errors import ConfigError, ProtocolError

__all__ = [
    "FORMAT_VERSION",
    "HEAD",
    "HEAD_FLAGS_AT",
    "HEAD_TIMESTAMP_AT",
    "HEAD_VERSION_AT",
    "KEY_BYTES_MAX",
    "PROPERTIES_MAX",
    "PROPERTY_NAME_BYTES_MAX",
    "Position",
    "Record",
    "decode_record",
    "encode_record",
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


class Position(NamedTuple):
    """Where a record lives: (ledger id, entry id). Positions sort in log order, because a
    log only ever appends ledgers with ids greater than those it holds."""

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"

    @classmethod
    def parse(cls, text: str) -> Position:
        """``"LEDGER:ENTRY"`` as printed by ``str(position)``."""
        ledger, sep, entry = text.partition(":")
        try:
            if not sep:
                raise ValueError(text)
            position = cls(int(ledger), int(entry))
        except ValueError:
            raise ConfigError(f"position {text!r} is not LEDGER:ENTRY (two integers)") from None
        if position.ledger_id < 0 or position.entry_id < 0:
            raise ConfigError(f"position {text!r} has a negative part")
        return position


@dataclass(frozen=True)
class Record:
    """One record of a named log, as a reader gets it."""

    position: Position
    timestamp_ms: int
    payload: bytes
    key: bytes | None = None
    properties: Mapping[str, bytes] = field(default_factory=dict)


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


def decode_record(data: bytes | bytearray | memoryview, position: Position) -> Record:
    """The record in ``data``; ``ProtocolError`` naming the position when malformed."""
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
        properties: dict[str, bytes] = {}
        if flags & _FLAG_PROPERTIES:
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
                properties[name] = value
        if offset > len(view):
            raise ProtocolError("record envelope is cut short")
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"record at {position} is malformed: {exc}") from exc
    except ProtocolError as exc:
        raise ProtocolError(f"record at {position} is malformed: {exc}") from exc
    return Record(position, timestamp, bytes(view[offset:]), key, properties)
