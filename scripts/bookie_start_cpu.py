"""CPU seconds a ``bkeeper bookie`` process has used 3 s after it was started (its start-up:
imports, storage, ZooKeeper session, registration), without and with ``--http-port``, and
whether it loaded aiohttp. Starts a ZooKeeper of its own (from the jars in pyspark).

    python scripts/bookie_start_cpu.py [RUNS]

Figures: docs/benchmarks.md, "Bookie start-up".
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.zookeeper import ZooKeeperConfig, ZooKeeperServer, free_port

SETTLE_S = 3.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _format(uri: str) -> None:
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    with (
        tempfile.TemporaryDirectory(prefix="bookie-start-") as temp,
        ZooKeeperServer(ZooKeeperConfig(data_dir=Path(temp) / "zk", port=free_port())) as zk,
    ):
        scratch = Path(temp)
        uri = zk.uri("/probe/ledgers")
        asyncio.run(_format(uri))
        for run in range(runs):
            for extra in ([], ["--http-port", "0"]):
                data = scratch / f"bookie-{run}-{len(extra)}"
                proc = subprocess.Popen(
                    [sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(data),
                     "--port", "0", "--metadata", uri, *extra],
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
                try:
                    time.sleep(SETTLE_S)
                    loaded = "aiohttp" in Path(f"/proc/{proc.pid}/maps").read_text()
                    used = cpu_s(proc.pid)
                finally:
                    proc.terminate()
                    proc.wait()
                what = " ".join(extra) or "(no HTTP)"
                print(f"run {run + 1} {what:16} CPU {used:.2f} s, aiohttp loaded: {loaded}")


if __name__ == "__main__":
    main()
