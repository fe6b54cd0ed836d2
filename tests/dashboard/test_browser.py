"""The dashboard in a real browser: ``bkeeper sandbox`` with its defaults (so its dashboard
too) but 3 bookies (each holds the ledger of ensemble 3 then), a ledger written, and headless Chromium loading the page; the test reads what the page
shows once its script ran: every bookie, the ledger, the auditor, and the charts plotly.js
drew (disk, the under-replicated queue, and adds/s, reads/s and add p99 from the bookies'
``/metrics``). Chromium: tests/dashboard/browser.py."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from bkeeper.testing.benchmarks import free_port, free_port_range
from tests.dashboard.browser import Page, browse, chromium
from tests.e2e.helpers import bkeeper, processes_mentioning

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def test_the_sandbox_dashboard_in_chromium(tmp_path: Path) -> None:
    chromium()
    zk_port, bookie_port, http_port = free_port(), free_port_range(3), free_port_range(3)
    dashboard_port = free_port()
    err_path = tmp_path / "sandbox.err"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [
                sys.executable, "-m", "bkeeper", "sandbox", "--bookies", "3",
                "--data-dir", str(tmp_path / "sb"),
                "--zookeeper-port", str(zk_port), "--bookie-port", str(bookie_port),
                "--http-port", str(http_port), "--dashboard-port", str(dashboard_port),
            ],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # once the sandbox is ready
        assert line.startswith("metadata URI: "), err_path.read_text()
        uri = line.removeprefix("metadata URI: ").strip()
        url = f"http://127.0.0.1:{dashboard_port}/"
        assert f"dashboard: {url}" in err_path.read_text().splitlines()
        wrote = bkeeper(uri, "shell", "simpletest", "--entries", "20", "--keep")
        assert wrote.returncode == 0, wrote.stderr
        auditor = wait_for(url, lambda o: o["recovery"].get("auditor"))
        wait_for(url, lambda o: len(get_json(url + "api/ledgers").get("ledgers", [])) == 1)
        wait_for(url, lambda o: adds_seen(get_json(url + "api/series")) == 3)

        shown = browse(url, tmp_path / "profile", "--dump-dom")
        assert shown.returncode == 0, shown.stderr[-2000:]
        page = Page()
        page.feed(shown.stdout)
        bookies = [f"127.0.0.1:{bookie_port + i}" for i in range(3)]
        rows = page.text["bookies"]
        for bookie in bookies:
            assert bookie in rows
        assert page.text["bookie-counts"] == "3 writable, 0 read-only, 0 down"
        assert page.text["auditor"] == auditor and auditor in bookies
        assert page.text["ledger-counts"] == "1 in all"
        ledger_row = re.search(r"0CLOSED(\S+, \S+, \S+)3/3/219", page.text["ledgers"])
        assert ledger_row is not None, page.text["ledgers"]
        assert sorted(ledger_row.group(1).split(", ")) == bookies
        # Charts drawn by plotly.js: disk per bookie (bars) and the under-replicated queue.
        for chart in ("chart-disk", "chart-under-replicated"):
            assert {"js-plotly-plot", "main-svg"} <= page.classes[chart], chart
        assert "bars" in page.classes["chart-disk"]
        assert page.text["chart-disk"].count("127.0.0.1:") == 3  # the bookies on its axis
        assert "disk per bookie" in page.text["chart-disk"]
        # ... and the bookies' adds/s, reads/s and add p99 from their /metrics, one line each
        for chart, title in (("chart-adds", "adds/s"), ("chart-reads", "read requests/s"),
                             ("chart-p99", "add latency p99")):  # fmt: skip
            assert {"js-plotly-plot", "main-svg", "js-line"} <= page.classes[chart], chart
            assert title in page.text[chart]
            for bookie in bookies:
                assert bookie in page.text[chart]  # its legend
            assert "no metrics" not in page.text[chart]
        assert page.text["errors"] == ""
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    assert processes_mentioning(f"127.0.0.1:{zk_port}/") == [], "the dashboard was left behind"


def adds_seen(series: Any) -> int:
    """Bookies with at least two points, adds in one of them."""
    return sum(
        len(points["time_ms"]) >= 2 and max(points["adds_per_s"]) > 0
        for points in series["bookies"].values()
    )


def wait_for(url: str, condition: Any, timeout_s: float = 90.0) -> Any:
    """Poll the dashboard's overview until ``condition(overview)`` is truthy; its value."""
    deadline = time.monotonic() + timeout_s
    while True:
        overview = get_json(url + "api/overview")
        value = condition(overview)
        if value:
            return value
        if time.monotonic() > deadline:
            series = get_json(url + "api/series")
            raise AssertionError(f"the dashboard never showed it: {overview} {series}")
        time.sleep(0.5)
