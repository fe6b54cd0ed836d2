"""The shared plumbing at the bottom: compare-and-set retry, owned tasks, config validators,
the fake clock."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import pytest

from bkeeper.common.cas import cas_update
from bkeeper.common.errors import (
    BKeeperError,
    ConfigError,
    ConnectionLossError,
    MetadataError,
    MetadataVersionError,
)
from bkeeper.common.tasks import TaskOwner
from bkeeper.common.validate import (
    check_int_in_range,
    check_non_negative_ints,
    check_number_in_range,
    check_port,
    check_positive_ints,
    check_quorum,
)
from bkeeper.testing.clock import FakeClock


class VersionedCell:
    """A value with a version; writes at a stale version lose, like a znode."""

    def __init__(self) -> None:
        self.value, self.version, self.reads = 0, 0, 0
        self.interfere = 0  # how many of the next writes another client wins first

    async def read(self) -> tuple[int, int]:
        self.reads += 1
        return self.value, self.version

    async def write(self, value: int, version: int) -> int:
        if self.interfere:
            self.interfere -= 1
            self.value, self.version = self.value + 100, self.version + 1
        if version != self.version:
            raise MetadataVersionError(f"version {version} is stale ({self.version})")
        self.value, self.version = value, version + 1
        return self.version


async def test_cas_update_decides_again_on_a_fresh_read_after_losing() -> None:
    cell = VersionedCell()
    cell.interfere = 2
    seen: list[int] = []

    async def attempt(snapshot: tuple[int, int]) -> int:
        value, version = snapshot
        seen.append(value)
        return await cell.write(value + 1, version)

    assert await cas_update(cell.read, attempt, what="cell") == 3
    assert seen == [0, 100, 200]
    assert cell.value == 201
    assert cell.reads == 3


async def test_cas_update_uses_the_snapshot_it_is_given_first() -> None:
    cell = VersionedCell()

    async def attempt(snapshot: tuple[int, int]) -> int:
        return await cell.write(snapshot[0] + 5, snapshot[1])

    assert await cas_update(cell.read, attempt, what="cell", current=(0, 0)) == 1
    assert cell.reads == 0


async def test_cas_update_gives_up_after_its_bound_naming_the_update() -> None:
    cell = VersionedCell()
    cell.interfere = 10**6

    async def attempt(snapshot: tuple[int, int]) -> int:
        return await cell.write(1, snapshot[1])

    with pytest.raises(MetadataError) as caught:
        await cas_update(cell.read, attempt, what="ledger 7: could not close", attempts_max=3)
    assert str(caught.value) == (
        "ledger 7: could not close: its metadata kept changing (3 compare-and-set attempts)"
    )
    assert cell.reads == 3


async def test_cas_update_lets_other_errors_through() -> None:
    async def attempt(snapshot: tuple[int, int]) -> int:
        raise ConfigError("no")

    with pytest.raises(ConfigError, match="no"):
        await cas_update(VersionedCell().read, attempt, what="cell")


async def test_cas_update_on_exhausted_gives_the_callers_outcome_when_every_round_lost() -> None:
    cell = VersionedCell()
    cell.interfere = 10**6

    async def attempt(snapshot: tuple[int, int]) -> int:
        return await cell.write(1, snapshot[1])

    outcome = await cas_update(
        cell.read, attempt, what="cell", attempts_max=3, on_exhausted=lambda: -1
    )
    assert (outcome, cell.reads) == (-1, 3)  # one read per round, none after the last


async def test_cas_update_on_exhausted_is_not_for_a_read_failing_after_a_lost_round() -> None:
    reads = iter([(0, 0), None])

    async def read() -> tuple[int, int]:
        snapshot = next(reads)
        if snapshot is None:
            raise ConnectionLossError("away")
        return snapshot

    async def attempt(snapshot: tuple[int, int]) -> int:
        raise MetadataVersionError("lost")

    with pytest.raises(ConnectionLossError):
        await cas_update(read, attempt, what="cell", attempts_max=3, on_exhausted=lambda: -1)


async def test_cas_update_on_exhausted_leaves_a_won_round_alone() -> None:
    async def attempt(snapshot: tuple[int, int]) -> int:
        return snapshot[0] + 7

    outcome = await cas_update(VersionedCell().read, attempt, what="cell", on_exhausted=lambda: -1)
    assert outcome == 7


async def test_task_owner_cancels_and_awaits_its_tasks() -> None:
    owner = TaskOwner("test")
    ended: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    owner.spawn(forever("a"), "a")
    owner.spawn(forever("b"), "b")
    await asyncio.sleep(0)
    assert len(owner) == 2
    await owner.aclose()
    assert sorted(ended) == ["a", "b"]
    assert len(owner) == 0
    coro = forever("c")
    with pytest.raises(BKeeperError, match="test: closed, cannot start c"):
        owner.spawn(coro, "c")
    assert coro.cr_frame is None  # closed, never left un-awaited


async def test_task_owner_bounds_its_tasks_and_logs_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    owner = TaskOwner("bounded", tasks_max=1, error=MetadataError)

    async def fail() -> None:
        raise RuntimeError("boom")

    task = owner.spawn(fail(), "failing")
    with pytest.raises(MetadataError, match="1 tasks running"):
        owner.spawn(fail(), "second")
    with caplog.at_level(logging.ERROR, logger="bkeeper.common.tasks"):
        with pytest.raises(RuntimeError):
            await task
        await asyncio.sleep(0)
    assert [r.getMessage() for r in caplog.records] == ["bounded: failing failed"]
    await owner.aclose()


@dataclass(frozen=True)
class Sample:
    size_bytes: int = 1
    delay_ms: int = 0


def test_validators_name_the_field_and_the_value() -> None:
    check_positive_ints(Sample(), "size_bytes")
    with pytest.raises(ConfigError) as caught:
        check_positive_ints(Sample(size_bytes=0), "size_bytes")
    assert str(caught.value) == "size_bytes: must be a positive integer, got 0"
    with pytest.raises(ConfigError, match="size_bytes: must be a positive integer, got True"):
        check_positive_ints(Sample(size_bytes=True), "size_bytes")
    check_non_negative_ints(Sample(), "delay_ms")
    with pytest.raises(ConfigError, match=r"delay_ms: must be an integer >= 0, got -1"):
        check_non_negative_ints(Sample(delay_ms=-1), "delay_ms")
    with pytest.raises(ConfigError, match=r"pause_ms: must be an integer in 0\.\.10, got 11"):
        check_int_in_range("pause_ms", 11, 0, 10)
    with pytest.raises(ConfigError, match=r"wait_ms: must be 0\.\.1000, got '5'"):
        check_number_in_range("wait_ms", "5", 0, 1000)
    check_number_in_range("wait_ms", 0.5, 0, 1000)
    with pytest.raises(ConfigError, match=r"port: 65536 is not a TCP port \(0\.\.65535\)"):
        check_port("port", 65536)
    with pytest.raises(ConfigError, match=r"port: 0 is not a TCP port \(1\.\.65535\)"):
        check_port("port", 0, zero_allowed=False)
    check_quorum(3, 3, 2)
    with pytest.raises(ConfigError, match="got 3/2/3"):
        check_quorum(3, 2, 3)


def test_fake_clock_moves_only_forward_when_told() -> None:
    clock = FakeClock(monotonic_s=5.0, wall_ms=1000)
    assert (clock.monotonic(), clock.wall_ms()) == (5.0, 1000)
    clock.advance(1.5)
    assert (clock.monotonic(), clock.wall_ms()) == (6.5, 2500)
    with pytest.raises(ValueError, match="never goes back"):
        clock.advance(-1)
