"""``bkeeper bench codec``: encode+decode rates of ADD requests (with digest) and responses."""

from __future__ import annotations

import os
import time

from bkeeper.testing.benchmarks.results import BenchResult
from bkeeper.wire import v2, v3
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest, AddResponse

__all__ = ["bench_codec"]


def bench_codec(
    protocol: Protocol, count: int, entry_bytes: int, digest: DigestType
) -> list[BenchResult]:
    """Encode+decode ``count`` ADD requests (with digest) and ADD responses."""
    codec = v2 if protocol is Protocol.V2 else v3
    manager = DigestManager(1, digest, b"secret")
    key = master_key(b"secret")
    payload = os.urandom(entry_bytes)
    start = time.perf_counter()
    for entry_id in range(count):
        body = manager.encode_entry(entry_id, entry_id - 1, (entry_id + 1) * entry_bytes, payload)
        frame = codec.encode_request(AddRequest(1, entry_id, key, body, txn_id=entry_id))
        request = codec.decode_request(frame)
        assert isinstance(request, AddRequest)
        manager.verify_entry(request.body, entry_id)
    requests = BenchResult(
        f"{protocol.name} add request (+digest {digest.name})",
        count,
        time.perf_counter() - start,
        count * entry_bytes,
    )
    start = time.perf_counter()
    for entry_id in range(count):
        frame = codec.encode_response(AddResponse(StatusCode.EOK, 1, entry_id, entry_id))
        codec.decode_response(frame)
    responses = BenchResult(f"{protocol.name} add response", count, time.perf_counter() - start)
    return [requests, responses]
