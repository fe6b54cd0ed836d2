"""Entry bodies, their digests and the ledger master key.

An entry body, as a bookie stores and serves it::

    ledger id (8) | entry id (8) | LAC (8) | cumulative length (8) | digest (0/4/8/20) | payload

All integers big-endian and signed. The digest covers the 32-byte header and the payload:

============  =====  ===================================================================
type          bytes  algorithm
============  =====  ===================================================================
CRC32         8      zlib CRC-32, written as a big-endian 64-bit integer (as Java's CRC32)
CRC32C        4      CRC-32C (Castagnoli), written as a big-endian 32-bit integer
HMAC          20     HMAC-SHA1 keyed with SHA-1(b"mac" + password)
DUMMY         0      none
============  =====  ===================================================================

The WRITE_LAC body is ``ledger id (8) | lac (8) | digest over those 16 bytes``. The master
key sent to bookies with adds and fencing reads is SHA-1(b"ledger" + password), whatever the
digest type. Verification checks the digest and that ledger and entry ids are the expected
ones, and raises :class:`DigestMismatchError` naming both otherwise.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
import zlib
from collections.abc import Callable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar, overload

import crc32c as _crc32c

from bkeeper.common.errors import ConfigError, DigestMismatchError
from bkeeper.wire.batch_frames import split_bodies

__all__ = [
    "ENTRY_HEADER",
    "DigestManager",
    "DigestType",
    "EntryT",
    "VerifiedEntry",
    "mac_key",
    "master_key",
]

ENTRY_HEADER = struct.Struct(">qqqq")
_LAC_HEADER = struct.Struct(">qq")
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_HEADER_BYTES = ENTRY_HEADER.size
#: Header and CRC digest in one unpack, for the batch verifier.
_HEADER_CRC32C = struct.Struct(">qqqqI")
_HEADER_CRC32 = struct.Struct(">qqqqQ")
#: Body length, header and CRC digest in one unpack, for the batch frame verifier.
_LEN_HEADER_CRC32C = struct.Struct(">iqqqqI")
_LEN_HEADER_CRC32 = struct.Struct(">iqqqqQ")

Buffer = bytes | bytearray | memoryview


class DigestType(enum.IntEnum):
    """Digest types, numbered as ``LedgerMetadataFormat.DigestType``."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4

    @classmethod
    def parse(cls, name: str | int | DigestType) -> DigestType:
        """From a name (``crc32``, ``crc32c``, ``hmac``/``mac``, ``dummy``) or a number."""
        if isinstance(name, int):
            try:
                return cls(name)
            except ValueError:
                raise ConfigError(f"digest type {name} is not one of 1..4") from None
        key = name.strip().upper()
        key = "HMAC" if key == "MAC" else key
        try:
            return cls[key]
        except KeyError:
            raise ConfigError(
                f"digest type {name!r} is not one of crc32, crc32c, hmac, dummy"
            ) from None

    @property
    def digest_bytes(self) -> int:
        return _DIGEST_BYTES[self]


_DIGEST_BYTES = {
    DigestType.CRC32: 8,
    DigestType.CRC32C: 4,
    DigestType.HMAC: 20,
    DigestType.DUMMY: 0,
}


def master_key(password: bytes) -> bytes:
    """The 20-byte ledger key bookies check: SHA-1(b"ledger" + password)."""
    return hashlib.sha1(b"ledger" + password).digest()


def mac_key(password: bytes) -> bytes:
    """The HMAC-SHA1 key of the MAC digest: SHA-1(b"mac" + password)."""
    return hashlib.sha1(b"mac" + password).digest()


class VerifiedEntry(NamedTuple):
    """An entry body that passed its digest: its header fields and payload (a view of the
    body). A named tuple, not a dataclass: readers make one per entry, and a tuple is the
    cheapest to make. The client hands its users a subclass, :class:`bkeeper.client.Entry`
    (``DigestManager(..., entry_type=Entry)`` builds those directly, at no extra cost)."""

    ledger_id: int
    entry_id: int
    lac: int
    length: int
    payload: memoryview

    @property
    def data(self) -> bytes:
        return bytes(self.payload)


def _digest_function(digest_type: DigestType, password: bytes) -> Callable[[Buffer, Buffer], bytes]:
    """A function (header, payload) -> digest bytes."""
    if digest_type is DigestType.CRC32:
        pack64 = _U64.pack
        crc = zlib.crc32
        return lambda head, body: pack64(crc(body, crc(head)))
    if digest_type is DigestType.CRC32C:
        pack32 = _U32.pack
        crc32c = _crc32c.crc32c
        return lambda head, body: pack32(crc32c(body, crc32c(head)))
    if digest_type is DigestType.HMAC:
        base = hmac.new(mac_key(password), digestmod=hashlib.sha1)

        def mac(head: Buffer, body: Buffer) -> bytes:
            h = base.copy()
            h.update(head)
            h.update(body)
            return h.digest()

        return mac
    return lambda head, body: b""


#: What a :class:`DigestManager` makes of a verified body.
EntryT = TypeVar("EntryT", bound=VerifiedEntry)


class DigestManager(Generic[EntryT]):
    """Builds and verifies the entry bodies of one ledger; verified entries are made as
    ``entry_type`` (:class:`VerifiedEntry` or a subclass of it)."""

    __slots__ = ("_digest", "_entry", "digest_length", "digest_type", "ledger_id")

    @overload
    def __init__(
        self: DigestManager[VerifiedEntry],
        ledger_id: int,
        digest_type: DigestType,
        password: bytes,
    ) -> None: ...

    @overload
    def __init__(
        self,
        ledger_id: int,
        digest_type: DigestType,
        password: bytes,
        entry_type: type[EntryT],
    ) -> None: ...

    def __init__(
        self,
        ledger_id: int,
        digest_type: DigestType,
        password: bytes,
        entry_type: type[Any] = VerifiedEntry,
    ) -> None:
        self._entry: type[EntryT] = entry_type
        self.ledger_id = ledger_id
        self.digest_type = DigestType(digest_type)
        self.digest_length = self.digest_type.digest_bytes
        self._digest = _digest_function(self.digest_type, password)

    def encode_entry(self, entry_id: int, lac: int, length: int, payload: Buffer) -> bytes:
        """The full entry body for ``payload``: header, digest, payload."""
        header = ENTRY_HEADER.pack(self.ledger_id, entry_id, lac, length)
        return b"".join((header, self._digest(header, payload), payload))

    def entry_parts(
        self, entry_id: int, lac: int, length: int, payload: Buffer
    ) -> tuple[bytes, bytes]:
        """The 32-byte header and the digest of an entry body, for callers that frame the
        body themselves (``header + digest + payload`` is :meth:`encode_entry`)."""
        header = ENTRY_HEADER.pack(self.ledger_id, entry_id, lac, length)
        return header, self._digest(header, payload)

    def frame_entry(
        self, entry_id: int, lac: int, length: int, payload: Buffer, prefix: bytes
    ) -> bytes:
        """``prefix`` + the entry body (header, digest, payload), with one copy: a whole v2
        ADD frame when ``prefix`` is its head (``v2.add_frame_prefix``)."""
        header = ENTRY_HEADER.pack(self.ledger_id, entry_id, lac, length)
        return b"".join((prefix, header, self._digest(header, payload), payload))

    def frame_entries(
        self,
        first_entry_id: int,
        lac: int,
        length: int,
        payloads: Sequence[Buffer],
        prefix_of: Callable[[int], bytes],
    ) -> tuple[list[bytes], list[int]]:
        """:meth:`frame_entry` for consecutive entries from ``first_entry_id`` (``length``:
        the ledger's bytes before the first), in one pass: the frames, each preceded by
        ``prefix_of(body bytes)`` (asked again only when the size changes), and the ledger's
        length after each entry."""
        frames: list[bytes] = []
        lengths: list[int] = []
        add_frame, add_length = frames.append, lengths.append
        pack = ENTRY_HEADER.pack
        ledger = self.ledger_id
        fixed = _HEADER_BYTES + self.digest_length
        join = b"".join
        size = -1
        prefix = b""
        if self.digest_type is DigestType.CRC32C:  # the default, inline
            crc = _crc32c.crc32c
            pack32 = _U32.pack
            for entry_id, payload in enumerate(payloads, first_entry_id):
                n = len(payload)
                if n != size:
                    size, prefix = n, prefix_of(fixed + n)
                length += n
                header = pack(ledger, entry_id, lac, length)
                add_frame(join((prefix, header, pack32(crc(payload, crc(header))), payload)))
                add_length(length)
            return frames, lengths
        digest = self._digest
        for entry_id, payload in enumerate(payloads, first_entry_id):
            n = len(payload)
            if n != size:
                size, prefix = n, prefix_of(fixed + n)
            length += n
            header = pack(ledger, entry_id, lac, length)
            add_frame(join((prefix, header, digest(header, payload), payload)))
            add_length(length)
        return frames, lengths

    def verify_entry(self, body: Buffer, expected_entry_id: int | None = None) -> EntryT:
        """Check ``body``; return its fields or raise :class:`DigestMismatchError`."""
        view = body if isinstance(body, memoryview) else memoryview(body)
        start = _HEADER_BYTES + self.digest_length
        if len(view) < start:
            raise DigestMismatchError(
                self.ledger_id,
                -1 if expected_entry_id is None else expected_entry_id,
                f"entry body of {len(view)} bytes is shorter than its {start}-byte header",
            )
        ledger_id, entry_id, lac, length = ENTRY_HEADER.unpack_from(view)
        if ledger_id != self.ledger_id:
            raise DigestMismatchError(
                self.ledger_id, entry_id, f"body belongs to ledger {ledger_id}"
            )
        if expected_entry_id is not None and entry_id != expected_entry_id:
            raise DigestMismatchError(ledger_id, expected_entry_id, f"body holds entry {entry_id}")
        payload = view[start:]
        if self._digest(view[:_HEADER_BYTES], payload) != view[_HEADER_BYTES:start]:
            raise DigestMismatchError(ledger_id, entry_id)
        return self._entry(ledger_id, entry_id, lac, length, payload)

    def verify_entries(self, bodies: Sequence[Buffer], first_entry_id: int) -> list[EntryT]:
        """:meth:`verify_entry` for consecutive entries from ``first_entry_id`` (one batch
        answer). CRC digests are checked as integers, header and digest in one unpack, so
        the per-entry work is one unpack, two CRC calls and the checks; a body that fails
        goes through :meth:`verify_entry`, which raises naming the fault."""
        crc: Callable[..., int]
        if self.digest_type is DigestType.CRC32C:
            layout, crc = _HEADER_CRC32C, _crc32c.crc32c
        elif self.digest_type is DigestType.CRC32:
            layout, crc = _HEADER_CRC32, zlib.crc32
        else:
            return [self.verify_entry(b, i) for i, b in enumerate(bodies, first_entry_id)]
        start = layout.size
        unpack = layout.unpack_from
        ledger = self.ledger_id
        entries: list[EntryT] = []
        append = entries.append
        make = self._entry
        new = tuple.__new__  # the named tuple's own __new__ is a Python function: skipped
        for expected, body in enumerate(bodies, first_entry_id):
            view = body if type(body) is memoryview else memoryview(body)
            if len(view) >= start:
                ledger_id, entry_id, lac, length, digest = unpack(view)
                payload = view[start:]
                if (
                    ledger_id == ledger
                    and entry_id == expected
                    and crc(payload, crc(view[:_HEADER_BYTES])) == digest
                ):
                    append(new(make, (ledger_id, entry_id, lac, length, payload)))
                    continue
            append(self.verify_entry(view, expected))  # raises, naming the fault
        return entries

    def verify_batch_frame(
        self, frame: memoryview, bodies_at: int, first_entry_id: int, count: int
    ) -> list[EntryT]:
        """:meth:`verify_entries` for the first ``count`` bodies of a BATCH_READ answer
        ``frame`` (``u32 length, body`` repeated from ``bodies_at``; see
        ``bkeeper.wire.batch_frames``), split and checked in one pass: one unpack per entry
        for its length, header and digest. A cut or overrunning length raises
        :class:`ProtocolError`, a bad body :class:`DigestMismatchError` as ``verify_entry``
        names it."""
        crc: Callable[..., int]
        if self.digest_type is DigestType.CRC32C:
            layout, crc = _LEN_HEADER_CRC32C, _crc32c.crc32c
        elif self.digest_type is DigestType.CRC32:
            layout, crc = _LEN_HEADER_CRC32, zlib.crc32
        else:
            return self.verify_entries(split_bodies(frame, bodies_at, count), first_entry_id)
        unpack = layout.unpack_from
        fixed = layout.size  # length, header and digest
        ledger = self.ledger_id
        entries: list[EntryT] = []
        append = entries.append
        make = self._entry
        new = tuple.__new__
        pos, end = bodies_at, len(frame)
        expected = first_entry_id
        stop_id = first_entry_id + count
        while pos < end and expected < stop_id:
            if end - pos >= fixed:
                size, ledger_id, entry_id, lac, length, digest = unpack(frame, pos)
                stop = pos + 4 + size
                if size >= fixed - 4 and stop <= end:
                    payload = frame[pos + fixed : stop]
                    if (
                        ledger_id == ledger
                        and entry_id == expected
                        and crc(payload, crc(frame[pos + 4 : pos + 4 + _HEADER_BYTES])) == digest
                    ):
                        append(new(make, (ledger_id, entry_id, lac, length, payload)))
                        expected += 1
                        pos = stop
                        continue
            (body,) = split_bodies(frame, pos, 1)  # raises for a cut or overrunning length
            append(self.verify_entry(body, expected))  # raises, naming the fault
            expected += 1
            pos += 4 + len(body)
        return entries

    def encode_lac(self, lac: int) -> bytes:
        """The WRITE_LAC body: ledger id, lac, digest over both."""
        header = _LAC_HEADER.pack(self.ledger_id, lac)
        return header + self._digest(header, b"")

    def verify_lac(self, body: Buffer) -> int:
        """The LAC in a WRITE_LAC body, after checking its ledger id and digest."""
        view = body if isinstance(body, memoryview) else memoryview(body)
        if len(view) != _LAC_HEADER.size + self.digest_length:
            raise DigestMismatchError(self.ledger_id, -1, f"LAC body of {len(view)} bytes")
        ledger_id, lac = _LAC_HEADER.unpack_from(view)
        if ledger_id != self.ledger_id:
            raise DigestMismatchError(self.ledger_id, -1, f"LAC body belongs to ledger {ledger_id}")
        if self._digest(view[: _LAC_HEADER.size], b"") != view[_LAC_HEADER.size :]:
            raise DigestMismatchError(self.ledger_id, -1, "LAC digest mismatch")
        return int(lac)
