"""``bkeeper bench write`` when the ledger fails mid-run: the error is what it reports, and
no append's failure is left for asyncio to log ("Future exception was never retrieved", once
per entry in flight, as a run against overloaded Java bookies showed)."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

import bkeeper.client
from bkeeper.common.errors import NotEnoughBookiesError
from bkeeper.testing.benchmarks.client import bench_client_writes


class _FailingHandle:
    """Acknowledges nothing; after ``fail_after`` appends every pending one fails."""

    ledger_id = 7
    ensemble = ("b1", "b2", "b3")  # not on this machine: no server CPU measured

    def __init__(self, fail_after: int) -> None:
        self._pending: list[asyncio.Future[int]] = []
        self._fail_after = fail_after
        self._failed = False

    def _future(self) -> asyncio.Future[int]:
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        if self._failed or len(self._pending) >= self._fail_after:  # then every later one
            self._failed = True
            for pending in self._pending:
                pending.set_exception(NotEnoughBookiesError("no bookie can replace b1"))
            # As a failed handle: it keeps no reference, so a failure nobody took is logged
            # when the future is collected.
            self._pending.clear()
        return future

    async def append_async(self, payload: bytes) -> asyncio.Future[int]:
        await asyncio.sleep(0)
        return self._future()

    async def append_many_async(self, payloads: list[bytes]) -> asyncio.Future[int]:
        await asyncio.sleep(0)
        return self._future()

    async def close(self) -> None:
        pass


class _FakeBookKeeper:
    def __init__(self, uri: str, config: object) -> None:
        pass

    async def __aenter__(self) -> _FakeBookKeeper:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pass

    async def create_ledger(self, *args: object, **kwargs: object) -> _FailingHandle:
        return _FailingHandle(fail_after=50)


@pytest.mark.parametrize("batch", [1, 10])
async def test_a_failed_ledger_ends_the_run_with_its_error(monkeypatch, caplog, batch):
    monkeypatch.setattr(bkeeper.client, "BookKeeper", _FakeBookKeeper)
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        with pytest.raises(NotEnoughBookiesError, match="no bookie can replace b1"):
            await bench_client_writes(
                "zk://unused/ledgers", ensemble=3, write_quorum=3, ack_quorum=2,
                entry_bytes=10, duration_s=30, in_flight=1000, batch=batch,
            )  # fmt: skip
        gc.collect()  # a failed future nobody looked at is logged when it is collected
        await asyncio.sleep(0)
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]
