"""Deleting a ledger or a log under a live writer fences the writer first (issue 11, item 2).

Before the fix the writer went on acknowledging appends into a ledger whose metadata was
gone (positions acknowledged after ``log delete --force``, then lost)."""

from __future__ import annotations

import pytest

from bkeeper.client import BookKeeper
from bkeeper.common.errors import (
    LedgerDeletedError,
    LedgerFencedError,
    LedgerNotFoundError,
    LogNotFoundError,
)
from bkeeper.namedlog import NamedLogs
from tests.e2e.helpers import bkeeper


async def test_deleting_an_open_ledger_fences_its_writer(real_cluster) -> None:
    async with BookKeeper(real_cluster.uri) as writer, BookKeeper(real_cluster.uri) as admin:
        wh = await writer.create_ledger(3, 3, 2, password=b"pw")
        for i in range(5):
            assert await wh.append(b"%d" % i) == i
        await admin.delete_ledger(wh.ledger_id)
        with pytest.raises(LedgerNotFoundError):
            await admin.ledger_metadata(wh.ledger_id)
        # Fenced, then deleted: the writer's add meets the fence, or its watch saw the
        # delete first (issue 36).
        with pytest.raises((LedgerFencedError, LedgerDeletedError)):
            await wh.append(b"after the delete")
        assert wh.last_add_confirmed == 4


async def test_deleting_a_log_under_its_writer_fails_the_next_append(real_cluster) -> None:
    uri = real_cluster.uri
    async with BookKeeper(uri) as bk:
        logs = NamedLogs(bk)
        writer = await (await logs.create("doomed")).open_writer()
        positions = [await writer.append(b"%d" % i) for i in range(3)]
        deleted = bkeeper(uri, "log", "delete", "doomed", "--force")
        assert deleted.returncode == 0, deleted.stderr
        assert deleted.stdout.strip() == "deleted log doomed (1 ledger)"
        with pytest.raises(LogNotFoundError, match="'doomed' was deleted while this writer"):
            await writer.append(b"after the delete")
        with pytest.raises(LogNotFoundError):
            await writer.close()
        assert positions[-1].entry_id == 2
        with pytest.raises(LedgerNotFoundError):
            await bk.ledger_metadata(positions[0].ledger_id)
