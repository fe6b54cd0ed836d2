"""Changing a named log's write quorum from 2 to 3 online (issue 42): a writer keeps
appending while ``bkeeper log config NAME --write-quorum 3 --existing`` runs as a process of
its own against real bookies; afterwards every entry the log ever held is on three bookies
(each bookie asked for its list of entries) and every record reads back."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.autorecovery.replicas import lacking_bookies
from bkeeper.client import BookKeeper
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.namedlog import NamedLogs
from tests.e2e.helpers import run_process
from tests.e2e.test_shell_ops import ok

NAME = "relaid"


@pytest.mark.parametrize("real_cluster", [4], indirect=True)
async def test_write_quorum_two_to_three_online_under_a_writer(real_cluster) -> None:
    uri = real_cluster.uri
    ok(await run_process(uri, "log", "create", NAME, "-e", "3", "--write-quorum", "2",
                         "--ack-quorum", "2", "--roll-age", "2s"))  # fmt: skip
    async with BookKeeper(uri) as bk:
        logs = NamedLogs(bk)
        writer = await logs.log(NAME).open_writer()
        appended: list[bytes] = []
        stop = asyncio.Event()

        async def write() -> None:
            while not stop.is_set():
                record = b"record-%05d" % len(appended)
                await writer.append(record)
                appended.append(record)
                await asyncio.sleep(0.01)

        task = asyncio.create_task(write())
        while len(appended) < 100:
            await asyncio.sleep(0.05)
        changed = await run_process(uri, "log", "config", NAME, "-e", "3", "--write-quorum", "3",
                                    "--ack-quorum", "2", "--existing", "--wait", "60")  # fmt: skip
        assert changed.returncode == 0, (changed.stdout, changed.stderr)
        assert "every ledger has replication 3/3/2" in changed.stderr
        stop.set()
        await task  # the writer never failed meanwhile
        await writer.close()

        meta, _version = await logs.store.read(NAME)
        bookies = await bk.cluster.registry.bookies()
        for ledger in meta.ledgers:
            ledger_meta = await bk.ledger_metadata(ledger.ledger_id)
            assert ledger_meta.state is LedgerState.CLOSED
            assert ledger_meta.write_quorum == 3, ledger.ledger_id
            lacking = await lacking_bookies(bk, ledger.ledger_id, ledger_meta, bookies.writable)
            assert lacking == frozenset(), (ledger.ledger_id, lacking)
        reader = await logs.log(NAME).open_reader()
        got = []
        while len(got) < len(appended):
            record = await reader.next(timeout_s=30)
            assert record is not None, f"record {len(got)} did not come"
            got.append(bytes(record.payload))
        assert got == appended
        await reader.close()
