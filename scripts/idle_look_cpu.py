"""CPU of one look at an idle log by a Spark stream's driver (docs/benchmarks.md, "An idle
stream"): the planner's ``move`` from the log's head, as ``latestOffset`` runs it ~100 times a
second while no record comes, with the log's metadata read each time (``--no-watch``, as
before WatchedLogs) or kept behind a watch (now).

    bkeeper sandbox &                        # or any cluster
    python scripts/idle_look_cpu.py --metadata zk://127.0.0.1:2181/ledgers [--no-watch] [--open]

Writes 10 records to a log of its own (its ledger sealed, or with ``--open`` left open: an
idle writer), looks 2,000 times, prints the process's CPU (all threads: the client's loop
and kazoo's) per look, then deletes the log. ``--no-watch`` also opens the last ledger
afresh at each look (``open_kept_max=0``), as before the walk kept open ledgers' handles.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import time
import uuid

from bkeeper.client import BookKeeper
from bkeeper.namedlog import LogWalk, NamedLogs, Position, WatchedLogs
from bkeeper.spark.log_view import LogView
from bkeeper.spark.options import source_options
from bkeeper.spark.planner import move

LOOKS = 2_000


async def main(metadata: str, watch: bool, keep_open: bool) -> None:
    name = f"idle-look-{uuid.uuid4().hex[:8]}"
    async with BookKeeper(metadata) as bk:
        logs = NamedLogs(bk)
        if not watch:  # the walk before it kept open ledgers' handles
            walk = LogWalk(bk, logs.config.password, open_kept_max=0)
            logs.context = dataclasses.replace(logs.context, walk=walk)
        writer = await (await logs.create(name)).open_writer()
        for i in range(10):
            await writer.append(b"record-%d" % i)
        if not keep_open:
            await writer.close()
        watched = WatchedLogs(logs.store) if watch else None
        view = LogView(logs, watched)
        options = source_options({"metadata": metadata, "log": name}, streaming=True)
        head = (await move(view, options, {name: Position(0, 0)})).ends
        for _ in range(100):  # warm up
            await move(view, options, head)
        cpu, wall = time.process_time(), time.monotonic()
        for _ in range(LOOKS):
            found = await move(view, options, head)
            assert found.covered == 0
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
        reads = "" if watched is None else f", {watched.reads} metadata reads in all"
        print(
            f"{'open' if keep_open else 'sealed'} ledger, "
            f"{'watched' if watch else 'read each time'}: {cpu / LOOKS * 1e3:.3f} ms CPU, "
            f"{wall / LOOKS * 1e3:.3f} ms wall per look ({LOOKS} looks{reads})"
        )
        if watched is not None:
            await watched.aclose()
        if keep_open:
            await writer.close()
        await logs.delete(name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metadata", required=True, help="the cluster's metadata URI")
    parser.add_argument("--no-watch", action="store_true", help="read the metadata each look")
    parser.add_argument("--open", action="store_true", help="leave the log's ledger open")
    args = parser.parse_args()
    asyncio.run(main(args.metadata, not args.no_watch, args.open))
