"""The sans-IO request/response correlator (wire.correlate) a bookie connection uses."""

from __future__ import annotations

import pytest

from bkeeper.common.errors import TooManyRequestsError
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.correlate import LISTENED, Correlator, Listened
from bkeeper.wire.messages import AddRequest, AddResponse, ReadRequest, ReadResponse

KEY = b"k" * 20


def test_v3_matches_by_txn_id_in_any_order() -> None:
    c: Correlator[str] = Correlator(Protocol.V3)
    first = c.expect(ReadRequest(1, 0), "first")
    second = c.expect(ReadRequest(1, 0), "second")
    assert (first.txn_id, second.txn_id) == (1, 2)
    txn = c.expect_listened_add(1, 5)
    assert c.pending == 3
    assert c.match(ReadResponse(StatusCode.EOK, 1, 0, None, txn_id=2)) == "second"
    listened = c.match(AddResponse(StatusCode.EOK, 0, 0, txn_id=txn))
    assert isinstance(listened, Listened) and (listened.ledger_id, listened.entry_id) == (1, 5)
    assert c.match(ReadResponse(StatusCode.EOK, 1, 0, None, txn_id=9)) is None
    assert c.pending == 1 and c.drain() == ["first"] and c.pending == 0


def test_v2_matches_by_key_first_in_first_out() -> None:
    c: Correlator[str] = Correlator(Protocol.V2)
    c.expect(ReadRequest(1, 3), "a")
    c.expect(ReadRequest(1, 3), "b")
    c.expect(AddRequest(1, 4, KEY, b""), "keyed add")
    assert c.expect_listened_add(1, 5) == 0
    assert c.match(ReadResponse(StatusCode.EOK, 1, 3, None)) == "a"
    assert c.match_v2_add(1, 4) == "keyed add"
    assert c.match_v2_add(1, 5) is LISTENED
    assert c.match_v2_add(1, 6) is None  # nothing waits for it
    assert c.match(ReadResponse(StatusCode.EOK, 1, 3, None)) == "b"
    assert c.pending == 0


def test_the_bound_is_enforced_for_requests_and_listened_adds() -> None:
    c: Correlator[str] = Correlator(Protocol.V2, pending_max=2)
    c.expect(ReadRequest(1, 0), "a")
    c.expect_listened_add(1, 0)
    assert c.full
    with pytest.raises(TooManyRequestsError, match="pending_max 2"):
        c.expect_listened_add(1, 1)
    with pytest.raises(TooManyRequestsError):
        c.expect(ReadRequest(1, 1), "b")
    assert c.pending == 2


def test_v2_add_answers_of_a_chunk_are_matched_at_once() -> None:
    c: Correlator[str] = Correlator(Protocol.V2)
    c.expect(AddRequest(1, 4, KEY, b""), "keyed add")
    for ledger_id, entry_id in ((1, 5), (2, 0), (1, 6)):
        c.expect_listened_add(ledger_id, entry_id)
    assert c.pending == 4
    eok, eio = StatusCode.EOK, StatusCode.EIO
    answers = [(eok, 1, 5), (eok, 1, 4), (eio, 2, 0), (eok, 1, 6), (eok, 1, 7)]
    listened, keyed = c.match_v2_adds(answers)
    assert keyed == [("keyed add", eok, 1, 4)]
    # the last answer has nothing waiting for it: dropped, as match_v2_add drops it
    assert listened == {1: [(eok, 1, 5), (eok, 1, 6)], 2: [(eio, 2, 0)]}
    assert c.pending == 0
    assert c.match_v2_adds([(eok, 1, 8)]) == ({}, [])


def test_v2_listened_adds_in_bulk_are_grouped_by_ledger() -> None:
    c: Correlator[str] = Correlator(Protocol.V2, pending_max=6)
    c.expect_listened_adds(3)
    c.expect_listened_add(2, 0)
    with pytest.raises(TooManyRequestsError):
        c.expect_listened_adds(3)  # 4 + 3 would pass pending_max 6
    assert c.pending == 4
    eok = StatusCode.EOK
    one_ledger = [(eok, 1, 0), (eok, 1, 1)]
    listened, keyed = c.match_v2_adds(one_ledger)
    assert listened == {1: one_ledger} and keyed == []
    assert c.pending == 2
    listened, _ = c.match_v2_adds([(eok, 2, 0), (eok, 1, 2), (eok, 1, 3)])
    # only two were awaited: the third answer has nobody waiting (dropped)
    assert listened == {2: [(eok, 2, 0)], 1: [(eok, 1, 2)]}
    assert c.pending == 0
