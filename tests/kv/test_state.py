"""The key-value state machine alone: operations, atomic batches, request ids, snapshots."""

from __future__ import annotations

import io
import json

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.kv.state import KvState, encode_command, validate_ops
from bkeeper.namedlog import Position

AT = Position(1, 0)


def apply(state: KvState, ops, request_id=None):
    return state.apply(encode_command(request_id, ops), AT)


def test_operations_and_versions():
    state = KvState()
    assert apply(state, [{"op": "put", "key": "k", "value": "a"}])["results"] == [{"version": 1}]
    assert apply(state, [{"op": "cas", "key": "k", "expected_version": 1, "value": "b"}])[
        "results"
    ] == [{"applied": True, "version": 2}]
    assert state.get("k") == ("b", 2)
    assert apply(state, [{"op": "delete", "key": "k"}])["results"] == [{"existed": True}]
    assert state.get("k") == (None, 0)


def test_a_batch_is_all_or_nothing():
    state = KvState()
    result = apply(
        state,
        [
            {"op": "put", "key": "a", "value": "1"},
            {"op": "cas", "key": "b", "expected_version": 3, "value": "2"},
        ],
    )
    assert result["applied"] is False
    assert len(state) == 0
    result = apply(
        state,
        [
            {"op": "put", "key": "a", "value": "1"},
            {"op": "put", "key": "a", "value": "2"},
            {"op": "cas", "key": "a", "expected_version": 2, "value": "3"},
        ],
    )
    assert result == {
        "applied": True,
        "results": [{"version": 1}, {"version": 2}, {"applied": True, "version": 3}],
    }
    assert state.get("a") == ("3", 3)


def test_a_request_id_is_applied_once_and_forgotten_oldest_first():
    state = KvState(requests_kept_max=2)
    put = [{"op": "put", "key": "k", "value": "v"}]
    assert apply(state, put, "r1")["results"] == [{"version": 1}]
    assert apply(state, put, "r1")["results"] == [{"version": 1}]
    apply(state, put, "r2")
    apply(state, put, "r3")  # r1 forgotten
    assert apply(state, put, "r1")["results"] == [{"version": 4}]


def test_snapshots_round_trip_and_bad_ones_are_refused():
    state = KvState()
    for i in range(25_000):
        apply(state, [{"op": "put", "key": f"k{i}", "value": str(i)}], f"r{i % 30_000}")
    out = io.BytesIO()
    state.write_snapshot(out)
    copy = KvState()
    copy.restore_snapshot(io.BytesIO(out.getvalue()))
    assert list(copy.items()) == list(state.items())
    assert apply(copy, [{"op": "put", "key": "x", "value": "y"}], "r7")["results"] == [
        {"version": 1}
    ], "the request ids came with the snapshot"
    lines = out.getvalue().split(b"\n")
    with pytest.raises(ConfigError, match="header says"):
        KvState().restore_snapshot(io.BytesIO(b"\n".join(lines[:2])))
    with pytest.raises(ConfigError, match="format"):
        KvState().restore_snapshot(io.BytesIO(json.dumps({"format": 1}).encode()))


def test_validation_names_the_bad_operation():
    with pytest.raises(ConfigError, match=r"ops\[1\]: cas needs"):
        validate_ops([{"op": "put", "key": "a", "value": "1"}, {"op": "cas", "key": "b"}])
    with pytest.raises(ConfigError, match="non-empty list"):
        validate_ops([])
