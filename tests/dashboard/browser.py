"""Headless Chromium for the dashboard's browser tests: a one-shot page dump
(:func:`browse`), a parser of what it shows (:class:`Page`), and :class:`Browser`, one page
driven over the DevTools protocol (type into a form, click, read the DOM, run ``fetch``) for
what a dump cannot do (logging in). Chromium comes from Debian's ``chromium`` package
(scripts/test.sh installs it); without it the tests are skipped, which under CI is a failure
(tests/conftest.py)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bkeeper.testing.benchmarks import free_port

__all__ = ["PAGE_BUDGET_MS", "Browser", "Page", "browse", "chromium"]

CHROMIUM = "/usr/bin/chromium"
#: Virtual time the page gets to load, fetch the API and draw (Chromium's own clock).
PAGE_BUDGET_MS = 10_000
#: Chromium's own flags for a quiet, headless, throw-away browser.
_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1400,1900",
)  # fmt: skip


def chromium() -> str:
    path = shutil.which("chromium") or (CHROMIUM if os.path.exists(CHROMIUM) else None)
    if path is None:
        pytest.skip("no Chromium (Debian package chromium; scripts/test.sh installs it)")
    return path


def browse(url: str, profile: Path, *output: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium on ``url``: ``--dump-dom`` (the page after its scripts) or
    ``--screenshot=...``."""
    return subprocess.run(
        [chromium(), *_FLAGS, f"--user-data-dir={profile}",
         f"--virtual-time-budget={PAGE_BUDGET_MS}", *output, url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip


class Page(HTMLParser):
    """The text of each element with an id, and the classes seen inside each id'd element."""

    def __init__(self) -> None:
        super().__init__()
        self.text: dict[str, str] = {}
        self.classes: dict[str, set[str]] = {}
        self._open: list[str | None] = []

    @classmethod
    def of(cls, html: str) -> Page:
        page = cls()
        page.feed(html)
        return page

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        classes = set((found.get("class") or "").split())
        for element_id in filter(None, self._open):
            self.classes[element_id] |= classes
        element_id = found.get("id")
        if element_id is not None:
            self.text.setdefault(element_id, "")
            self.classes.setdefault(element_id, set()).update(classes)
        if tag not in VOID:
            self._open.append(element_id)

    def handle_endtag(self, tag: str) -> None:
        if tag not in VOID and self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for element_id in filter(None, self._open):
            self.text[element_id] += data


VOID = {"br", "hr", "img", "input", "link", "meta", "path", "rect", "line", "circle", "use",
        "stop", "col", "area", "base", "source", "wbr"}  # fmt: skip


class Browser:
    """``async with Browser(profile) as browser``: one headless Chromium page over the
    DevTools protocol (its port picked with ``free_port``; the process ends on exit)."""

    def __init__(self, profile: Path, start_timeout_s: float = 60.0) -> None:
        self.profile = profile
        self.start_timeout_s = start_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._http: aiohttp.ClientSession | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._ids = itertools.count(1)
        self._scratch: Path | None = None

    async def __aenter__(self) -> Browser:
        port = free_port()
        log = (self.profile.parent / f"{self.profile.name}.chromium.log").open("wb")
        # Its shared memory files (--disable-dev-shm-usage) and its singleton socket in a
        # directory of its own, removed on exit: a terminated Chromium leaves them behind. A
        # short path under /tmp: a socket's path has at most 107 bytes, and one under the
        # test's directory (pytest's basetemp, the test's name) was longer, so Chromium died
        # at start ("Socket path too long") in a full run.
        scratch = self._scratch = Path(tempfile.mkdtemp(prefix="bkchr-"))
        with log:
            self._proc = subprocess.Popen(
                [chromium(), *_FLAGS, f"--user-data-dir={self.profile}",
                 f"--remote-debugging-port={port}", "--remote-allow-origins=*", "about:blank"],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "TMPDIR": str(scratch)},
            )  # fmt: skip
        try:
            self._http = aiohttp.ClientSession()
            self._ws = await self._http.ws_connect(await self._page_socket(port), max_msg_size=0)
        except BaseException:
            await self.__aexit__()
            raise
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._http is not None:
            await self._http.close()
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)

    async def _page_socket(self, port: int) -> str:
        """The DevTools socket of the page Chromium opened."""
        assert self._http is not None and self._proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            try:
                async with self._http.get(f"http://127.0.0.1:{port}/json/list") as response:
                    targets = await response.json(content_type=None)
                pages = [t for t in targets if t.get("type") == "page"]
                if pages:
                    return str(pages[0]["webSocketDebuggerUrl"])
            except aiohttp.ClientError:
                pass
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"Chromium's DevTools never answered on port {port}")
            await asyncio.sleep(0.2)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """One DevTools command; its result (events in between are dropped)."""
        assert self._ws is not None
        message_id = next(self._ids)
        await self._ws.send_json({"id": message_id, "method": method, "params": params})
        while True:
            message = json.loads(await asyncio.wait_for(self._ws.receive_str(), 60))
            if message.get("id") != message_id:
                continue
            if "error" in message:
                raise AssertionError(f"DevTools {method}: {message['error']}")
            result: dict[str, Any] = message["result"]
            return result

    async def evaluate(self, expression: str) -> Any:
        """The value of ``expression`` in the page (a promise awaited)."""
        result = await self.call(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 60.0) -> Any:
        """Poll ``expression`` until truthy (a page being replaced counts as not yet)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                value = await self.evaluate(expression)
            except AssertionError:  # the page navigated away mid-evaluation
                value = None
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"never true: {expression}\n{await self.dom()}")
            await asyncio.sleep(0.25)

    async def navigate(self, url: str) -> None:
        await self.call("Page.navigate", url=url)
        await self.wait_for(
            f"document.readyState === 'complete' && location.href === {json.dumps(url)}"
        )

    async def type_into(self, selector: str, text: str) -> None:
        """Focus ``selector`` and type ``text`` as a user would."""
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).focus()")
        await self.call("Input.insertText", text=text)

    async def click(self, selector: str) -> None:
        await self.evaluate(f"document.querySelector({json.dumps(selector)}).click()")

    async def fetch(self, path: str) -> tuple[int, str]:
        """``fetch(path)`` from the page (its cookies): status and body."""
        status, body = await self.evaluate(
            f"fetch({json.dumps(path)}).then(async r => [r.status, await r.text()])"
        )
        return int(status), str(body)

    async def dom(self) -> str:
        return str(await self.evaluate("document.documentElement.outerHTML"))
