"""HTTP between simulated nodes (aiohttp's server and client on the simulated network): what
the kv store's members and clients run on in the simulator."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from bkeeper.sim.http import sim_connector
from bkeeper.sim.loop import SimLoop
from bkeeper.sim.net import SimNetwork
from tests.sim.simnet import as_node, run_on_net


async def _serve(loop: SimLoop) -> web.AppRunner:
    async def hello(request: web.Request) -> web.Response:
        await asyncio.sleep(0.25)
        return web.json_response({"to": request.query.get("who"), "at": loop.time()})

    app = web.Application()
    app.add_routes([web.get("/hello", hello)])
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "srv", 80).start()
    return runner


async def _get(url: str) -> dict[str, object]:
    async with (
        aiohttp.ClientSession(connector=sim_connector()) as session,
        session.get(url) as response,
    ):
        doc: dict[str, object] = await response.json()
        return doc


def test_a_client_node_calls_a_server_node_over_http_in_virtual_time() -> None:
    async def main(loop: SimLoop, net: SimNetwork) -> tuple[dict[str, object], float]:
        runner = await as_node(loop, "srv", _serve(loop))
        start = loop.time()
        try:
            doc = await as_node(loop, "cli", _get("http://srv:80/hello?who=cli"))
        finally:
            await as_node(loop, "srv", runner.cleanup())
        return doc, loop.time() - start

    (doc, took), digest = run_on_net(main)
    assert doc["to"] == "cli"
    assert 0.25 < took < 1.0  # the handler's sleep and a few network latencies, all virtual
    assert run_on_net(main)[1] == digest  # the same bytes at the same times: the same trace


def test_a_node_that_listens_on_nothing_refuses_the_connection() -> None:
    async def main(loop: SimLoop, net: SimNetwork) -> None:
        await as_node(loop, "cli", _get("http://nobody:80/hello"))

    with pytest.raises(aiohttp.ClientConnectorError, match="nobody"):
        run_on_net(main)
