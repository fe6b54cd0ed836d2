"""Hypothesis strategies for every wire message."""

from __future__ import annotations

from hypothesis import strategies as st

from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import (
    AddRequest,
    AddResponse,
    AuthMessage,
    AuthRequest,
    AuthResponse,
    BatchReadRequest,
    BatchReadResponse,
    ErrorResponse,
    ForceLedgerRequest,
    ForceLedgerResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    GetListOfEntriesRequest,
    GetListOfEntriesResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    StartTlsRequest,
    StartTlsResponse,
    WriteLacRequest,
    WriteLacResponse,
)

i64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)
ids = st.integers(min_value=-1, max_value=(1 << 63) - 1)
u64 = st.integers(min_value=1, max_value=(1 << 64) - 1)
key = st.binary(min_size=20, max_size=20)
blob = st.binary(max_size=300)
statuses = st.sampled_from(list(StatusCode))
auth = st.builds(AuthMessage, st.text(max_size=20), st.binary(max_size=40))

# A body is at least the 16 bytes of ledger id and entry id, which v2 reads from it.
body = st.binary(min_size=16, max_size=300)


@st.composite
def add_request_v2(draw: st.DrawFn) -> AddRequest:
    b = draw(body)
    ledger, entry = (
        int.from_bytes(b[:8], "big", signed=True),
        int.from_bytes(b[8:16], "big", signed=True),
    )
    recovery = draw(st.booleans())
    return AddRequest(ledger, entry, draw(key), b, recovery, recovery or draw(st.booleans()))


V2_REQUESTS = st.one_of(
    add_request_v2(),
    st.builds(
        lambda lid, eid, fence, k, high: ReadRequest(
            lid, eid, fence, k if fence else None, high_priority=high
        ),
        i64,
        ids,
        st.booleans(),
        key,
        st.booleans(),
    ),
    st.builds(
        lambda lid, start, count, size, rid, fence, k: BatchReadRequest(
            lid, start, count, size, rid, fence, k if fence else None
        ),
        i64,
        ids,
        st.integers(0, 1 << 31 - 1),
        i64,
        i64,
        st.booleans(),
        key,
    ),
    st.builds(AuthRequest, auth),
)

V2_RESPONSES = st.one_of(
    st.builds(AddResponse, statuses, i64, ids),
    st.builds(
        lambda s, lid, eid, b: ReadResponse(s, lid, eid, b if s is StatusCode.EOK else None),
        statuses,
        i64,
        ids,
        blob,
    ),
    st.builds(
        lambda s, lid, start, rid, bodies: BatchReadResponse(
            s, lid, start, rid, tuple(bodies) if s is StatusCode.EOK else ()
        ),
        statuses,
        i64,
        ids,
        i64,
        st.lists(blob, max_size=5),
    ),
    st.builds(lambda a: AuthResponse(StatusCode.EOK, a), auth),
)

V3_REQUESTS = st.one_of(
    st.builds(
        lambda lid, eid, k, b, rec, flags, txn: AddRequest(lid, eid, k, b, rec, rec, flags, txn),
        i64,
        ids,
        key,
        blob,
        st.booleans(),
        st.integers(0, 1),
        u64,
    ),
    st.builds(
        lambda lid, eid, mode, k, prev, timeout, high, txn: ReadRequest(
            lid,
            eid,
            fence=mode == 1,
            master_key=k if mode == 1 else None,
            piggyback=mode == 2,
            previous_lac=prev if mode != 1 else None,
            timeout_ms=timeout if mode != 1 else None,
            high_priority=high,
            txn_id=txn,
        ),
        i64,
        ids,
        st.integers(0, 2),
        key,
        ids,
        st.integers(0, 1 << 40),
        st.booleans(),
        u64,
    ),
    st.builds(WriteLacRequest, i64, ids, key, blob, u64),
    st.builds(ReadLacRequest, i64, u64),
    st.builds(GetBookieInfoRequest, st.integers(0, 3), u64),
    st.builds(StartTlsRequest, u64),
    st.builds(ForceLedgerRequest, i64, u64),
    st.builds(GetListOfEntriesRequest, i64, u64),
    st.builds(AuthRequest, auth, u64),
)

opt = st.none() | i64
V3_RESPONSES = st.one_of(
    st.builds(AddResponse, statuses, i64, ids, u64),
    st.builds(ReadResponse, statuses, i64, ids, st.none() | blob, opt, opt, u64),
    st.builds(WriteLacResponse, statuses, i64, u64),
    st.builds(ReadLacResponse, statuses, i64, st.none() | blob, st.none() | blob, u64),
    st.builds(GetBookieInfoResponse, statuses, opt, opt, u64),
    st.builds(StartTlsResponse, statuses, u64),
    st.builds(ForceLedgerResponse, statuses, i64, u64),
    st.builds(GetListOfEntriesResponse, statuses, i64, st.none() | blob, u64),
    st.builds(AuthResponse, statuses, st.none() | auth, u64),
    st.builds(ErrorResponse, st.sampled_from([3, 4, 12]), statuses, u64),
)
