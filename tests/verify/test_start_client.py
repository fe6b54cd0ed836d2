"""The harness's client start outlasts a ZooKeeper fault: a schedule's zk-pause holds up to
16 s, far more than a fixed handful of tries a second apart covered (seed 30097 of the long
campaign could not be made: ``ConnectionLoss (at /ledgers/LAYOUT)``)."""

from __future__ import annotations

import pytest

from bkeeper.client import BookKeeper
from bkeeper.common.errors import ConfigError, ConnectionLossError
from bkeeper.verify import workload
from bkeeper.verify.workload import start_client


@pytest.fixture
def failing_starts(monkeypatch: pytest.MonkeyPatch):
    """``BookKeeper.start`` fails with a connection loss while ``left[0]`` > 0."""
    left = [0]
    started = BookKeeper.start

    async def start(self: BookKeeper) -> BookKeeper:
        if left[0] > 0:
            left[0] -= 1
            raise ConnectionLossError("ConnectionLoss (at /ledgers/LAYOUT)")
        return await started(self)

    monkeypatch.setattr(BookKeeper, "start", start)
    monkeypatch.setattr(workload, "CLIENT_START_RETRY_S", 0.01, raising=False)
    return left


async def test_a_start_is_tried_again_until_zookeeper_answers(failing_starts) -> None:
    from bkeeper.testing.cluster import MemoryCluster

    async with MemoryCluster(1) as cluster:
        failing_starts[0] = 30  # an outage of many tries
        bk = await start_client(cluster.uri)
        await bk.close()
        assert failing_starts[0] == 0


async def test_an_outage_past_the_limit_fails_with_the_last_error(
    failing_starts, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(workload, "CLIENT_START_TIMEOUT_S", 0.3)
    failing_starts[0] = 10**9
    with pytest.raises(ConnectionLossError, match="LAYOUT"):
        await start_client("memory://nowhere/ledgers")
    assert failing_starts[0] > 10**9 - 100  # tried a bounded number of times


async def test_a_bad_uri_is_not_tried_again(failing_starts) -> None:
    with pytest.raises(ConfigError):
        await start_client("nosuchscheme://x/ledgers")
