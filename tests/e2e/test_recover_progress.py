"""``bkeeper shell recover`` shows its progress into a pipe (issue 39): plain lines
``recovering ledgers: K of N, T s`` while it copies, the table on stdout at the end. Before,
rich drew nothing off a terminal and stderr stayed empty however long it took."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys

import pytest

from bkeeper.client import BookKeeper

LEDGERS = 24


async def _write_ledgers(uri: str) -> list[int]:
    ids = []
    async with BookKeeper(uri) as bk:
        for _ in range(LEDGERS):
            handle = await bk.create_ledger(4, 4, 2, password=b"pw")
            await handle.append_many([b"entry-%d" % i for i in range(50)])
            await handle.close()
            ids.append(handle.ledger_id)
    return ids


def _recover(uri: str, bookie: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BKEEPER_PROGRESS_INTERVAL_S": "0.05"}
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "shell", "recover", bookie, "--metadata", uri],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip


@pytest.mark.parametrize("real_cluster", [5], indirect=True)
async def test_recover_prints_progress_lines_into_a_pipe(real_cluster) -> None:  # type: ignore[no-untyped-def]
    uri = real_cluster.uri
    await _write_ledgers(uri)
    lost = real_cluster.bookie_id(0)
    await asyncio.to_thread(real_cluster.stop, 0, signal.SIGKILL)
    done = await asyncio.to_thread(_recover, uri, lost)
    assert done.returncode == 0, done.stderr
    assert "recovered" in done.stdout
    lines = done.stderr.splitlines()
    assert lines, "no progress line"
    counts, totals = [], set()
    for line in lines:  # the ledgers with entries on the lost bookie (E4 of 5: most)
        found = re.fullmatch(r"recovering ledgers: (\d+)(?: of (\d+))?, \d+ s", line)
        assert found, lines
        counts.append(int(found.group(1)))
        if found.group(2) is not None:  # (none while it looks for the ledgers)
            totals.add(int(found.group(2)))
    (total,) = totals
    assert 0 < total <= LEDGERS
    assert counts == sorted(counts) and counts[-1] <= total
