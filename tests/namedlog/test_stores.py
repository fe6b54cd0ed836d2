"""The namedlog stores' compare-and-set rounds: an outcome of their own only when every round
lost, any other error as it came."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.common.errors import ConnectionLossError, MetadataVersionError
from bkeeper.namedlog.stores import cas_update_or


def test_every_round_lost_gives_the_callers_outcome() -> None:
    reads: list[int] = []

    async def read() -> int:
        reads.append(len(reads))
        return len(reads)

    async def attempt(snapshot: int) -> str:
        raise MetadataVersionError(f"lost at {snapshot}")

    async def run() -> str:
        return await cas_update_or(
            read, attempt, lost_every_round=lambda: "gave up", what="x", attempts_max=3
        )

    assert asyncio.run(run()) == "gave up"
    assert reads == [0, 1, 2]  # one read per round, none after the last


def test_a_failed_read_after_a_lost_round_is_not_taken_for_a_lost_update() -> None:
    rounds = iter([1, None])

    async def read() -> int:
        value = next(rounds)
        if value is None:
            raise ConnectionLossError("away")
        return value

    async def attempt(snapshot: int) -> str:
        raise MetadataVersionError("lost")

    async def run() -> str:
        return await cas_update_or(
            read, attempt, lost_every_round=lambda: "gave up", what="x", attempts_max=3
        )

    with pytest.raises(ConnectionLossError):
        asyncio.run(run())


def test_a_won_round_returns_its_result() -> None:
    async def read() -> int:
        return 7

    async def attempt(snapshot: int) -> int:
        return snapshot * 2

    async def run() -> int:
        return await cas_update_or(
            read, attempt, lost_every_round=lambda: -1, what="x", attempts_max=2
        )

    assert asyncio.run(run()) == 14
