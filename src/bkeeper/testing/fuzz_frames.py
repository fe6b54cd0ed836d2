"""Frames for fuzzing a bookie's wire protocol, from a seeded generator (pure: no I/O).

Three families, each frame with its 4-byte length prefix and a kind name for the report:

- **answered**: frames a correct bookie answers without closing the connection. v2: ADD,
  READ (fencing too), BATCH_READ, AUTH, and every other opcode with a garbage body; v3: every
  ``OperationType`` with weird values (huge, negative and meta-entry ids, wrong master keys,
  long polls, random request masks), unknown operations, unknown enum values (protocol
  version, add and read flags), a missing protocol version, and bodies that lack their
  required fields. Ledger ids that a request could create a ledger with come from a small
  set (``ledgers``) and entry ids added from a small set, so the bookie's ledger table and
  index stay bounded, as a real cluster's would: the fuzz tests the protocol, not capacity.
- **fatal**: frames after which a correct bookie closes the connection: random bytes, length
  prefixes over the frame limit whose first bytes name no request, zero and negative
  lengths, first bytes that are neither v2 nor v3, undecodable protobuf, v2 packets too
  short for their opcode.
- **truncated**: the first part of an answered frame, after which the client goes away.
"""

from __future__ import annotations

import dataclasses
import random
import struct
from collections.abc import Callable, Sequence

from bkeeper.common.limits import MASTER_KEY_BYTES, MAX_FRAME_BYTES_DEFAULT
from bkeeper.wire import v2, v3
from bkeeper.wire.codes import OperationType, V2Flag, V2OpCode
from bkeeper.wire.digest import master_key
from bkeeper.wire.messages import (
    AddRequest,
    AuthMessage,
    AuthRequest,
    BatchReadRequest,
    ForceLedgerRequest,
    GetBookieInfoRequest,
    GetListOfEntriesRequest,
    ReadLacRequest,
    ReadRequest,
    Request,
    StartTlsRequest,
    UnknownRequest,
    WriteLacRequest,
)
from bkeeper.wire.varint import encode_varint

__all__ = ["FUZZ_KEY", "FrameFactory", "Pool", "pb_bytes", "pb_varint"]

#: The master key of the fuzzer's "own" ledgers (others get random keys: EUA).
FUZZ_KEY = master_key(b"fuzz")

_LEN = struct.Struct(">i")
_ENTRY_HEAD = struct.Struct(">qqqq")
_I64_MIN, _I64_MAX = -(1 << 63), (1 << 63) - 1
#: Ids that have tripped implementations: boundaries, meta-entry ids, sign flips.
WEIRD_IDS = (
    0,
    1,
    2,
    3,
    100,
    2**31 - 1,
    2**31,
    2**32,
    2**53,
    2**62,
    _I64_MAX,
    -1,
    -2,
    -0x1000,
    -0x2000,
    -0x4000,
    -0x8000,
    _I64_MIN,
)
#: Entry ids added are weird ones or below this.
ENTRY_IDS = 1024
_SERVED_V2 = {int(V2OpCode.ADD_ENTRY), int(V2OpCode.READ_ENTRY), int(V2OpCode.AUTH)}
_SERVED_V2.add(int(V2OpCode.BATCH_READ_ENTRY))


def pb_varint(number: int, value: int) -> bytes:
    """A protobuf varint field."""
    return encode_varint(number << 3) + encode_varint(value)


def pb_bytes(number: int, data: bytes) -> bytes:
    """A protobuf length-delimited field."""
    return encode_varint(number << 3 | 2) + encode_varint(len(data)) + data


_pv, _pb = pb_varint, pb_bytes


def _frame(payload: bytes) -> bytes:
    return _LEN.pack(len(payload)) + payload


Pool = tuple[list[bytes], list[int]]


class FrameFactory:
    """Makes fuzz frames; the same seed gives the same frames."""

    def __init__(self, seed: int, ledgers: Sequence[int]) -> None:
        self.rng = random.Random(seed)
        self.ledgers = tuple(ledgers)
        self.kinds: list[str] = []
        self._kind_ids: dict[str, int] = {}
        r = self
        self._v2_makers: list[tuple[str, Callable[[], bytes]]] = [
            ("v2 ADD", r._v2_add),
            ("v2 READ", r._v2_read),
            ("v2 BATCH_READ", r._v2_batch),
            ("v2 AUTH", r._v2_auth),
            ("v2 other opcode", r._v2_other),
        ]
        self._v3_makers: list[tuple[str, Callable[[], bytes]]] = [
            ("v3 ADD_ENTRY", r._v3_add),
            ("v3 READ_ENTRY", r._v3_read),
            ("v3 AUTH", lambda: r._v3(AuthRequest(AuthMessage(r._text(), r._bytes(64))))),
            ("v3 WRITE_LAC", r._v3_write_lac),
            ("v3 READ_LAC", lambda: r._v3(ReadLacRequest(r._any_id()))),
            ("v3 GET_BOOKIE_INFO", lambda: r._v3(GetBookieInfoRequest(r._any_id()))),
            ("v3 START_TLS", lambda: r._v3(StartTlsRequest())),
            ("v3 FORCE_LEDGER", lambda: r._v3(ForceLedgerRequest(r._ledger()))),
            ("v3 GET_LIST_OF_ENTRIES", lambda: r._v3(GetListOfEntriesRequest(r._any_id()))),
            ("v3 unserved operation", r._v3_unserved),
            ("v3 unknown operation", r._v3_unknown_op),
            ("v3 unknown enum value", r._v3_unknown_enum),
            ("v3 body lacking fields", r._v3_bad_body),
        ]
        self._fatal_makers: list[tuple[str, Callable[[], bytes]]] = [
            ("random bytes", lambda: r._bytes(1, 4096)),
            ("oversized length", r._oversized),
            ("zero or negative length", r._nonpositive),
            ("first byte neither v2 nor v3", r._undetectable),
            ("undecodable v3", r._v3_undecodable),
            ("v2 packet too short", r._v2_short),
        ]

    @property
    def families(self) -> dict[str, tuple[str, ...]]:
        """The kinds of frames of each family ("v2", "v3", "fatal")."""
        return {
            "v2": tuple(kind for kind, _ in self._v2_makers),
            "v3": tuple(kind for kind, _ in self._v3_makers),
            "fatal": tuple(kind for kind, _ in self._fatal_makers),
        }

    # -- pools ---------------------------------------------------------------------------
    def kind_id(self, kind: str) -> int:
        if kind not in self._kind_ids:
            self._kind_ids[kind] = len(self.kinds)
            self.kinds.append(kind)
        return self._kind_ids[kind]

    def pool(self, family: str, size: int) -> Pool:
        """``size`` frames of ``family`` ("v2", "v3" or "fatal") and the kind id of each."""
        makers = {"v2": self._v2_makers, "v3": self._v3_makers, "fatal": self._fatal_makers}[family]
        frames: list[bytes] = []
        kinds: list[int] = []
        for _ in range(size):
            kind, make = self.rng.choice(makers)
            frames.append(make())
            kinds.append(self.kind_id(kind))
        return frames, kinds

    def truncated(self, frame: bytes) -> bytes:
        """A cut of ``frame``: at least one byte, not all of it."""
        return frame[: self.rng.randrange(1, len(frame))] if len(frame) > 1 else b""

    # -- values --------------------------------------------------------------------------
    def _any_id(self) -> int:
        if self.rng.random() < 0.5:
            return self.rng.choice(WEIRD_IDS)
        return self.rng.randint(_I64_MIN, _I64_MAX)

    def _entry_id(self) -> int:
        """An entry id to add: a weird one or a small one. Few distinct ids per ledger, so
        the bookie's index of entry locations stays bounded however long the run."""
        if self.rng.random() < 0.3:
            return self.rng.choice(WEIRD_IDS)
        return self.rng.randrange(ENTRY_IDS)

    def _ledger(self) -> int:
        return self.rng.choice(self.ledgers)

    def _key(self) -> bytes:
        return FUZZ_KEY if self.rng.random() < 0.6 else self.rng.randbytes(MASTER_KEY_BYTES)

    def _bytes(self, low: int, high: int | None = None) -> bytes:
        if high is None:
            low, high = 0, low
        return self.rng.randbytes(self.rng.randint(low, high))

    def _text(self) -> str:
        return "".join(chr(self.rng.randint(32, 0x2FF)) for _ in range(self.rng.randint(0, 24)))

    def _entry_body(self, ledger_id: int, entry_id: int) -> bytes:
        """An entry body naming ``ledger_id``/``entry_id`` (the digest is garbage), or junk."""
        if self.rng.random() < 0.2:  # at least an entry id's worth, or v2 cannot parse it
            return self._bytes(16, 64)
        lac = self._any_id()
        head = _ENTRY_HEAD.pack(ledger_id, entry_id, lac, self.rng.randint(0, 1 << 40))
        return head + self._bytes(0, 256)

    # -- v2 ------------------------------------------------------------------------------
    def _v2_flags(self) -> int:
        return self.rng.choice((0, 0, int(V2Flag.RECOVERY_ADD), int(V2Flag.HIGH_PRIORITY), 0xFFFF))

    def _v2_add(self) -> bytes:
        ledger_id = self._ledger()
        entry_id = self._entry_id()
        payload = self._key() + self._entry_body(ledger_id, entry_id)
        head = v2.header(int(V2OpCode.ADD_ENTRY), self._v2_flags() & ~int(V2Flag.DO_FENCING))
        return _frame(_LEN.pack(head) + payload)

    def _v2_read(self) -> bytes:
        fence = self.rng.random() < 0.1
        ledger_id = self._ledger() if fence else self._any_id()
        key = self._key() if fence else None
        request = ReadRequest(ledger_id, self._any_id(), fence, key, high_priority=fence)
        return v2.encode_request_frame(request)

    def _v2_batch(self) -> bytes:
        request = BatchReadRequest(
            self._any_id(),
            self._any_id(),
            self.rng.randint(-(1 << 31), (1 << 31) - 1),
            self._any_id(),
            self._any_id(),
        )
        return v2.encode_request_frame(request)

    def _v2_auth(self) -> bytes:
        return v2.encode_request_frame(AuthRequest(AuthMessage(self._text(), self._bytes(64))))

    def _v2_other(self) -> bytes:
        opcode = self.rng.choice([op for op in range(256) if op not in _SERVED_V2])
        version = self.rng.choice((1, 2))
        return _frame(_LEN.pack(v2.header(opcode, self._v2_flags(), version)) + self._bytes(128))

    # -- v3 ------------------------------------------------------------------------------
    def _txn(self) -> int:
        return self.rng.randint(0, (1 << 64) - 1)

    def _v3(self, request: Request) -> bytes:
        return v3.encode_request_frame(dataclasses.replace(request, txn_id=self._txn()))

    def _v3_add(self) -> bytes:
        ledger_id = self._ledger()
        entry_id = self._entry_id()
        body = self._entry_body(ledger_id, entry_id)
        recovery = self.rng.random() < 0.1
        return self._v3(AddRequest(ledger_id, entry_id, self._key(), body, recovery))

    def _v3_read(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.1:
            request = ReadRequest(self._ledger(), self._any_id(), True, self._key())
        elif roll < 0.2:  # a long poll, answered within a second at most
            request = ReadRequest(
                self._ledger(),
                self._any_id(),
                piggyback=rng.random() < 0.5,
                previous_lac=self._any_id(),
                timeout_ms=rng.randint(0, 1000),
            )
        else:
            request = ReadRequest(self._any_id(), self._any_id(), piggyback=rng.random() < 0.1)
        return self._v3(request)

    def _v3_write_lac(self) -> bytes:
        ledger_id = self._ledger()
        return self._v3(WriteLacRequest(ledger_id, self._any_id(), self._key(), self._bytes(64)))

    def _v3_unserved(self) -> bytes:
        operation = self.rng.choice(
            (
                int(OperationType.RANGE_READ_ENTRY),
                int(OperationType.RANGE_ADD_ENTRY),
                int(OperationType.BATCH_READ_ENTRY),
            )
        )
        return self._v3(UnknownRequest(operation))

    def _v3_unknown_op(self) -> bytes:
        operation = self.rng.choice((0, 13, 99, 1 << 20, (1 << 31) - 1, -1, -(1 << 31)))
        header = _pv(1, 3) + _pv(2, operation) + _pv(3, self._txn())
        return _frame(_pb(1, header) + _pb(101, _pv(1, self._any_id())))

    def _v3_unknown_enum(self) -> bytes:
        rng = self.rng
        txn = self._txn()
        which = rng.randrange(4)
        ledger_id = self._ledger()
        if which == 0:  # protocol version unknown, or missing
            version = b"" if rng.random() < 0.3 else _pv(1, rng.choice((0, 4, 99, -1)))
            header = version + _pv(2, int(OperationType.READ_ENTRY)) + _pv(3, txn)
            return _frame(_pb(1, header) + _pb(100, _pv(1, ledger_id) + _pv(2, 0)))
        header = _pb(1, _pv(1, 3) + _pv(2, 2 if which == 1 else 1) + _pv(3, txn))
        flag = _pv(100, rng.choice((0, 3, 7, 1 << 20, -1)))
        if which == 1:  # an ADD with an unknown flag
            body = self._entry_body(ledger_id, 0)
            add = _pv(1, ledger_id) + _pv(2, 0) + _pb(3, FUZZ_KEY) + _pb(4, body) + flag
            return _frame(header + _pb(101, add))
        return _frame(header + _pb(100, _pv(1, ledger_id) + _pv(2, 0) + flag))

    def _v3_bad_body(self) -> bytes:
        operation = self.rng.choice([int(op) for op in OperationType])
        header = _pb(1, _pv(1, 3) + _pv(2, operation) + _pv(3, self._txn()))
        field = self.rng.randint(100, 108)
        return _frame(header + _pb(field, _pv(self.rng.randint(1, 5), self._any_id())))

    # -- fatal ---------------------------------------------------------------------------
    def _oversized(self) -> bytes:
        length = self.rng.randint(MAX_FRAME_BYTES_DEFAULT + 1, (1 << 31) - 1)
        # 0xFF first: no request the bookie could answer from the frame's head (a v2 ADD,
        # a v3 header) starts so; it must close the connection rather than drop the body.
        return _LEN.pack(length) + b"\xff" + self._bytes(64)[1:]

    def _nonpositive(self) -> bytes:
        return _LEN.pack(self.rng.randint(-(1 << 31), 0)) + self._bytes(64)

    def _undetectable(self) -> bytes:
        first = self.rng.choice([b for b in range(256) if b not in (0, 1, 2, 0x0A)])
        return _frame(bytes([first]) + self._bytes(128))

    def _v3_undecodable(self) -> bytes:
        return _frame(b"\x0a" + self._bytes(1, 128))

    def _v2_short(self) -> bytes:
        opcode = self.rng.choice((int(V2OpCode.READ_ENTRY), int(V2OpCode.BATCH_READ_ENTRY)))
        return _frame(_LEN.pack(v2.header(opcode)) + self._bytes(0, 15))
