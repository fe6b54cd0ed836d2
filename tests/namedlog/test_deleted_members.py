"""Replicated state machine members whose named log is deleted under them (issue 36): they
stop with ``LogDeletedError`` (one error line, role ``failed``), leader and follower alike.
Before the fix they looped for ever, a warning every retry pause ("could not take over the
log: no log named ..."), and ``run`` never returned."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bkeeper.common.errors import LogDeletedError, NotLeaderError
from bkeeper.namedlog import NamedLogs
from bkeeper.testing.cluster import MemoryCluster
from bkeeper.testing.virtual_time import on_virtual_time
from tests.statemachine.test_machine import CLIENT, member, wait_for


@on_virtual_time
async def test_members_stop_when_their_log_is_deleted(caplog: pytest.LogCaptureFixture) -> None:
    async with MemoryCluster(3) as cluster:
        leader, _journal_a, stop_a, task_a, _ = await member(cluster, "a")
        await leader.wait_leading(20)
        follower, journal_b, stop_b, task_b, _ = await member(cluster, "b")
        for i in range(5):
            await leader.submit(b"c%d" % i)
        await wait_for(lambda: len(journal_b.commands) == 5)
        caplog.set_level(logging.WARNING, logger="bkeeper.statemachine")
        await NamedLogs(await cluster.client(CLIENT)).delete("journal")
        with pytest.raises(NotLeaderError, match="log 'journal' was deleted"):
            await leader.submit(b"after the delete")
        try:
            async with asyncio.timeout(20):
                for task in (task_a, task_b):
                    with pytest.raises(LogDeletedError, match="the member's log 'journal' was"):
                        await task
        finally:
            stop_a.set()
            stop_b.set()
            await asyncio.gather(task_a, task_b, return_exceptions=True)
        for rsm in (leader, follower):
            assert rsm.role == "failed"
            assert isinstance(rsm.failure, LogDeletedError)
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 2, [r.getMessage() for r in errors]  # one line per member
        retries = [r for r in caplog.records if "could not take over" in r.getMessage()]
        assert len(retries) <= 1, [r.getMessage() for r in retries]
