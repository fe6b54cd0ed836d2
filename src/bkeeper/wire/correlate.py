"""Which request an answer belongs to: the pending table of one pipelined connection, sans-IO.

A connection to a bookie carries many requests at once. :class:`Correlator` owns the table of
those awaiting an answer and matches each answer to one of them; what a pending request stands
for (a future, a test's record) is the caller's value ``T``, never looked at here.

* **v3**: keyed by txn id. The correlator hands out txn ids (:meth:`Correlator.next_txn_id`,
  from 1) and fills one into a request that has none; the bookie echoes it.
* **v2**: the protocol has no txn id. Answers are keyed by (operation, ledger id, entry id),
  or (BATCH_READ, request id, 0) and (AUTH, 0, 0), first in first out per key.
* **Listened adds**: the writer's adds, whose answers go to a per-ledger listener (the
  caller's) instead of a value per request. Over v3 each takes a txn id like any request, with
  the value :data:`LISTENED`; over v2 they are only counted, and an ADD answer that no keyed
  request waits for is theirs (keying them would cost a dict entry per add per bookie on the
  hottest path, and their listener tells entries apart itself).

Bound: at most ``pending_max`` requests await an answer (:data:`PENDING_REQUESTS_MAX` unless the
caller names another); one more raises :class:`TooManyRequestsError`. :meth:`Correlator.drain`
empties the table when the connection is lost.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Final, Generic, TypeVar

from bkeeper.common.errors import ProtocolError, TooManyRequestsError
from bkeeper.wire.codes import Protocol, StatusCode, V2OpCode
from bkeeper.wire.messages import (
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    BatchReadRequest,
    BatchReadResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
)

__all__ = ["LISTENED", "PENDING_REQUESTS_MAX", "Correlator", "Listened", "V2Key"]

#: Default bound of the requests awaiting an answer on one connection.
PENDING_REQUESTS_MAX: Final = 100_000

#: (operation, ledger id or request id, entry id): what identifies a v2 answer.
V2Key = tuple[int, int, int]

T = TypeVar("T")


class Listened:
    """The value of a listened add: its answer goes to the ledger's listener. Over v3 it names
    the add (an answer may carry only a status); over v2 every one is :data:`LISTENED` and the
    answer names the add."""

    __slots__ = ("entry_id", "ledger_id")

    def __init__(self, ledger_id: int, entry_id: int) -> None:
        self.ledger_id = ledger_id
        self.entry_id = entry_id

    def __repr__(self) -> str:
        return f"Listened({self.ledger_id}, {self.entry_id})"


LISTENED: Final = Listened(-1, -1)
_ADD: Final = int(V2OpCode.ADD_ENTRY)


def v2_request_key(request: Request) -> V2Key:
    if isinstance(request, AddRequest):
        return (_ADD, request.ledger_id, request.entry_id)
    if isinstance(request, ReadRequest):
        return (V2OpCode.READ_ENTRY, request.ledger_id, request.entry_id)
    if isinstance(request, BatchReadRequest):
        return (V2OpCode.BATCH_READ_ENTRY, request.request_id, 0)
    if isinstance(request, AuthRequest):
        return (V2OpCode.AUTH, 0, 0)
    raise ProtocolError(f"{type(request).__name__} is not available over the v2 protocol")


def v2_response_key(response: Response) -> V2Key:
    if isinstance(response, AddResponse):
        return (_ADD, response.ledger_id, response.entry_id)
    if isinstance(response, ReadResponse):
        return (V2OpCode.READ_ENTRY, response.ledger_id, response.entry_id)
    if isinstance(response, BatchReadResponse):
        return (V2OpCode.BATCH_READ_ENTRY, response.request_id, 0)
    if isinstance(response, AuthResponse):
        return (V2OpCode.AUTH, 0, 0)
    raise ProtocolError(f"unexpected v2 response {type(response).__name__}")


class Correlator(Generic[T]):
    """The requests of one connection awaiting an answer (see the module doc)."""

    __slots__ = ("_by_key", "_by_txn", "_listened", "_next_txn", "_v3", "pending", "pending_max")

    def __init__(self, protocol: Protocol, pending_max: int = PENDING_REQUESTS_MAX) -> None:
        if pending_max < 1:
            raise ValueError(f"pending_max must be at least 1, not {pending_max}")
        self._v3 = protocol is Protocol.V3
        self.pending_max = pending_max
        #: requests awaiting an answer, listened adds included
        self.pending = 0
        self._next_txn = 1
        self._by_txn: dict[int, T | Listened] = {}
        self._by_key: dict[V2Key, collections.deque[T]] = {}
        self._listened = 0  # v2 listened adds awaiting an answer

    @property
    def full(self) -> bool:
        return self.pending >= self.pending_max

    def next_txn_id(self) -> int:
        """A fresh v3 txn id."""
        txn = self._next_txn
        self._next_txn = txn + 1
        return txn

    def _reserve(self, address: str) -> None:
        if self.pending >= self.pending_max:
            raise TooManyRequestsError(
                f"{self.pending} requests pending to {address} (pending_max {self.pending_max})"
            )
        self.pending += 1

    def expect(self, request: Request, value: T, address: str = "?") -> Request:
        """Record that ``request`` awaits an answer, for ``value``; returns the request to
        send (over v3 with a txn id filled in if it had none)."""
        self._reserve(address)
        if self._v3:
            txn = request.txn_id
            if txn == 0:
                txn = self.next_txn_id()
                request = dataclasses.replace(request, txn_id=txn)
            self._by_txn[txn] = value
            return request
        key = v2_request_key(request)
        queue = self._by_key.get(key)
        if queue is None:
            self._by_key[key] = queue = collections.deque()
        queue.append(value)
        return request

    def expect_listened_add(self, ledger_id: int, entry_id: int, address: str = "?") -> int:
        """Record a listened add; its txn id over v3 (build the request with it), else 0."""
        if self.pending >= self.pending_max:  # _reserve, inline: once per add per bookie
            self._reserve(address)
        self.pending += 1
        if self._v3:
            txn = self.next_txn_id()
            self._by_txn[txn] = Listened(ledger_id, entry_id)
            return txn
        self._listened += 1
        return 0

    def expect_listened_adds(self, count: int, address: str = "?") -> None:
        """:meth:`expect_listened_add` for ``count`` v2 adds at once."""
        if self._v3:
            raise AssertionError("expect_listened_adds is for v2 (v3 adds need a txn id each)")
        if self.pending + count > self.pending_max:
            raise TooManyRequestsError(
                f"{self.pending} requests pending to {address}, {count} more would pass "
                f"pending_max {self.pending_max}"
            )
        self.pending += count
        self._listened += count

    def match(self, response: Response) -> T | Listened | None:
        """The value the answer ``response`` is for; None for an answer nobody waits for (a
        request given up on). A listened add's answer gives a :class:`Listened`: over v2 an
        ADD answer no keyed request waits for (:data:`LISTENED`)."""
        if self._v3:
            value = self._by_txn.pop(response.txn_id, None)
            if value is not None:
                self.pending -= 1
            return value
        key = v2_response_key(response)
        if key[0] == _ADD:
            return self.match_v2_add(key[1], key[2])
        return self._pop_key(key)

    def match_v2_add(self, ledger_id: int, entry_id: int) -> T | Listened | None:
        """:meth:`match` for one v2 ADD answer, without building a response object."""
        listened, keyed = self.match_v2_adds([(StatusCode.EOK, ledger_id, entry_id)])
        if keyed:
            return keyed[0][0]
        return LISTENED if listened else None

    def match_v2_adds(
        self, answers: list[tuple[StatusCode, int, int]]
    ) -> tuple[dict[int, list[tuple[StatusCode, int, int]]], list[tuple[T, StatusCode, int, int]]]:
        """:meth:`match_v2_add` for every ADD answer ``(status, ledger id, entry id)`` of a
        chunk read, in one call: the listened ones as ``{ledger id: [answer, ...]}`` (the
        same tuples, in arrival order within a ledger), and the keyed ones as ``(value,
        status, ledger id, entry id)``."""
        listened: dict[int, list[tuple[StatusCode, int, int]]] = {}
        keyed: list[tuple[T, StatusCode, int, int]] = []
        unanswered = self._listened
        if not answers:
            return listened, keyed
        if not self._by_key and len(answers) <= unanswered:
            # Every answer is a listened add's (no keyed add waits): only group by ledger.
            ledger = answers[0][1]
            self.pending -= len(answers)
            self._listened = unanswered - len(answers)
            if answers[-1][1] == ledger and all(a[1] == ledger for a in answers):
                listened[ledger] = answers  # one writer per connection: the usual case
                return listened, keyed
            for answer in answers:
                mine = listened.get(answer[1])
                if mine is None:
                    listened[answer[1]] = [answer]
                else:
                    mine.append(answer)
            return listened, keyed
        batch_ledger = -1
        batch: list[tuple[StatusCode, int, int]] = []
        for answer in answers:
            status, ledger_id, entry_id = answer
            if self._by_key:
                value = self._pop_key((_ADD, ledger_id, entry_id))
                if value is not None:
                    keyed.append((value, status, ledger_id, entry_id))
                    continue
            if not unanswered:
                continue  # an answer nobody waits for (a request given up on)
            unanswered -= 1
            if ledger_id != batch_ledger:  # one writer per connection is the usual case
                batch = listened.setdefault(ledger_id, [])
                batch_ledger = ledger_id
            batch.append(answer)
        self.pending -= self._listened - unanswered
        self._listened = unanswered
        return listened, keyed

    def match_v2_run(self, count: int) -> bool:
        """Whether ``count`` v2 ADD answers (a run of one ledger) all go to listeners, with
        no keyed add waiting; if so they are matched (as :meth:`match_v2_adds` would)."""
        if self._by_key or count > self._listened:
            return False
        self._listened -= count
        self.pending -= count
        return True

    def _pop_key(self, key: V2Key) -> T | None:
        queue = self._by_key.get(key)
        if not queue:
            return None
        value = queue.popleft()
        if not queue:
            del self._by_key[key]
        self.pending -= 1
        return value

    def drain(self) -> list[T]:
        """Forget every pending request (the connection is gone); their values."""
        values = [v for v in self._by_txn.values() if not isinstance(v, Listened)]
        for queue in self._by_key.values():
            values.extend(queue)
        self._by_txn.clear()
        self._by_key.clear()
        self._listened = 0
        self.pending = 0
        return values
