"""Auto-recovery metrics from a real ``bkeeper autorecovery --metrics-port`` process."""

from __future__ import annotations

import asyncio
import re

import pytest

from bkeeper.client import BookKeeper
from tests.common.test_metrics import samples
from tests.e2e.test_autorecovery_cli import PASSWORD, start_autorecovery, until  # noqa: F401
from tests.e2e.test_metrics_process import get

METRICS_URL = re.compile(r"metrics (http://\S+/metrics)\)")


@pytest.mark.parametrize("real_cluster", [1], indirect=True)
async def test_the_auditor_process_serves_the_queue_it_counts(
    real_cluster,
    start_autorecovery,  # noqa: F811 (the fixture imported above)
):
    async with BookKeeper(real_cluster.uri) as bk:
        urm = bk.cluster.underreplication
        await urm.ensure_layout()
        await urm.disable()  # nobody repairs: the marks stay
        handles = [await bk.create_ledger(1, 1, 1, password=PASSWORD) for _ in range(2)]
        for handle in handles:
            await handle.append(b"x")
            await handle.close()
            await urm.mark_underreplicated(handle.ledger_id, ["gone-bookie:3181"])
        _proc, log_path = start_autorecovery("--metrics-port", "0")
        found = METRICS_URL.search(log_path.read_text())
        assert found, log_path.read_text()

        async def counted() -> bool:
            status, content_type, text = await asyncio.to_thread(get, found.group(1))
            assert status == 200
            assert content_type.startswith("text/plain; version=0.0.4")
            got = samples(text)
            return (
                got[("bkeeper_autorecovery_auditor", ())] == 1
                and got[("bkeeper_autorecovery_under_replicated_ledgers", ())] == 2
            )

        await until(counted, "the auditor's count of the queue")
        await urm.enable()


ADMIN_URL = re.compile(r"\(admin (http://[^)\s]+)\)")


@pytest.mark.parametrize(
    "real_cluster", [(1, ("--http-port", "0", "--autorecovery"))], indirect=True
)
async def test_a_bookie_running_autorecovery_serves_its_metrics_too(real_cluster):
    log_text = (real_cluster.data_dir / "bookie-0.log").read_text()
    found = ADMIN_URL.search(log_text)
    assert found, log_text

    async def both() -> bool:
        status, _, text = await asyncio.to_thread(get, found.group(1) + "/metrics")
        assert status == 200
        got = samples(text)
        return (
            got.get(("bkeeper_autorecovery_auditor", ())) == 1
            and got[("bkeeper_bookie_read_only", ())] == 0
        )

    await until(both, "the bookie's /metrics with its auto-recovery's")
