"""The dashboard of ``bkeeper sandbox --secure`` in headless Chromium, both ways: ZooKeeper
with ACLs, bookies with TLS (their admin HTTP too) and token authentication, a ledger
written, and the sandbox's dashboard started with the sandbox's client token.

(a) A browser without the token gets the login page and nothing of the cluster: no bookie
id, no ledger, no metadata URI in the DOM, and the API answers 401 to its ``fetch``; a
wrong token is refused on the page ("token refused").
(b) The same browser, logging in with the token (typed into the form), sees the bookies and
the ledger, the bookies probed over HTTPS with the dashboard's token (no problem shown), and
neither the token nor the ZooKeeper digest in the page or any API answer; its
session cookie is out of the page's reach (HttpOnly); logging out brings the login page back
and the API refuses again.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bkeeper.testing.benchmarks import free_port, free_port_range
from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from tests.dashboard.browser import Browser, Page, chromium
from tests.e2e.helpers import processes_mentioning

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

BOOKIES = 2


def write_ledger(uri: str, env: dict[str, str]) -> None:
    """A ledger of 5 entries on both bookies, as a client of the secure sandbox."""
    done = subprocess.run(
        [sys.executable, "-m", "bkeeper", "shell", "simpletest", "--metadata", uri,
         "--ensemble", "2", "--write-quorum", "2", "--ack-quorum", "2", "--entries", "5",
         "--keep"],
        env={**{k: v for k, v in os.environ.items() if not k.startswith("BKEEPER_")}, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_the_secure_sandbox_dashboard_asks_a_browser_for_the_token(tmp_path: Path) -> None:
    chromium()
    zk_port, bookie_port = free_port(), free_port_range(BOOKIES)
    config = SandboxConfig(
        data_dir=tmp_path / "sb",
        bookies=BOOKIES,
        zookeeper_port=zk_port,
        bookie_port_base=bookie_port,
        http_port_base=free_port_range(BOOKIES),
        dashboard_port=free_port(),
        autorecovery=False,
        secure=True,
    )
    with Sandbox(config) as box:
        assert box.dashboard_url is not None
        env = box.client_env
        write_ledger(box.metadata_uri, env)
        token = Path(env["BKEEPER_AUTH_TOKEN_FILE"]).read_text().strip()
        bookies = [f"127.0.0.1:{bookie_port + i}" for i in range(BOOKIES)]
        forbidden = [*bookies, box.metadata_uri.split("?")[0], "CLOSED", token]
        digest = (config.data_dir / "security" / "zk.digest").read_text().strip()
        never_shown = [token, digest.partition(":")[2]]  # never shown, logged in or not
        asyncio.run(both_ways(box.dashboard_url, tmp_path / "profile", token, bookies,
                              forbidden, never_shown))  # fmt: skip
        dashboard_log = (config.data_dir / "dashboard.log").read_text()
        assert "dashboard: login from 127.0.0.1 refused: token refused" in dashboard_log
        assert token not in dashboard_log
    assert processes_mentioning(f"127.0.0.1:{zk_port}/") == [], "the dashboard was left behind"


async def both_ways(
    url: str,
    profile: Path,
    token: str,
    bookies: list[str],
    forbidden: list[str],
    never_shown: list[str],
) -> None:
    async with Browser(profile) as browser:
        # (a) without the token
        await browser.navigate(url)
        login_page = await browser.dom()
        page = Page.of(login_page)
        assert "login-form" in page.text and "bookies" not in page.text, login_page
        for text in forbidden:
            assert text not in login_page, text
        for api in ("overview", "ledgers", "series", "logs", "recovery"):
            status, body = await browser.fetch(f"/api/{api}")
            assert status == 401, (api, body)
            assert json.loads(body)["error"].startswith("login required"), body
            for text in forbidden:
                assert text not in body
        await browser.type_into("#token", "v1.not-the-token.at-all")
        await browser.click("#login-button")
        await browser.wait_for("document.getElementById('login-message')?.textContent")
        refused = await browser.dom()
        assert Page.of(refused).text["login-message"] == "token refused"
        for text in forbidden:
            assert text not in refused, text

        # (b) with the token
        await browser.type_into("#token", token)
        await browser.click("#login-button")
        shown = await browser.wait_for(
            "document.body.dataset.loaded === 'true'"
            " && document.getElementById('ledger-counts').textContent === '1 in all'"
            " && document.documentElement.outerHTML"
        )
        page = Page.of(shown)
        for bookie in bookies:
            assert bookie in page.text["bookies"]
        assert page.text["bookie-counts"] == f"{BOOKIES} writable, 0 read-only, 0 down"
        ledger_row = re.search(r"0CLOSED(\S+, \S+)2/2/24", page.text["ledgers"])
        assert ledger_row is not None, page.text["ledgers"]
        assert sorted(ledger_row.group(1).split(", ")) == bookies
        for api in ("overview", "ledgers", "series", "logs", "recovery"):
            status, body = await browser.fetch(f"/api/{api}")
            assert status == 200, (api, body)
            shown += body
        for secret in never_shown:
            assert secret not in shown
        assert await browser.evaluate("document.cookie") == ""  # HttpOnly: not the page's
        status, body = await browser.fetch("/api/overview")
        assert status == 200
        for bookie in json.loads(body)["bookies"]:  # probed over HTTPS with the token
            assert bookie["http_url"].startswith("https://127.0.0.1:"), bookie
            assert (bookie["http_error"], bookie["metrics_error"]) == (None, None), bookie
            assert bookie["total_bytes"] > 0, bookie

        # logging out
        await browser.click("#logout-form button")
        await browser.wait_for("document.getElementById('login-form') !== null")
        status, _body = await browser.fetch("/api/ledgers")
        assert status == 401
