"""The dashboard's web server (aiohttp): one page, its static files and a JSON API.

::

    GET /                   the page (static/index.html)
    GET /static/plotly.min.js   plotly.js, from the ``plotly`` Python package
    GET /static/<file>      the page's own script and style
    GET /api/overview       cluster, bookies (state, disk, latest rates), recovery, errors
    GET /api/series         per bookie: adds/s, reads/s, add p99 (ms) over time; the
                            under-replicated count over time
    GET /api/ledgers        the newest ledgers (state, ensemble, LAC, size), "N more"
    GET /api/logs           named logs (ledgers, size), "N more"
    GET /api/recovery       auditor, under-replicated ledgers, ledgers being re-replicated

Everything is served from :class:`ClusterMonitor`'s snapshots. Only GET is served (aiohttp
answers 405 to the rest); nothing the dashboard does changes the cluster.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path

from aiohttp import web

from bkeeper.common.errors import ConfigError
from bkeeper.dashboard.config import DashboardConfig
from bkeeper.dashboard.monitor import ClusterMonitor

__all__ = ["Dashboard", "plotly_js_path"]

_STATIC_FILES = {
    "dashboard.js": "application/javascript",
    "dashboard.css": "text/css",
}
#: The browser may keep plotly.js this long (it changes only with the package).
_PLOTLY_CACHE_S = 24 * 3600


def plotly_js_path() -> Path:
    """plotly.js as the ``plotly`` package ships it."""
    spec = importlib.util.find_spec("plotly")  # found, not imported: only its file is served
    locations = [] if spec is None else list(spec.submodule_search_locations or ())
    path = Path(locations[0] if locations else "plotly") / "package_data" / "plotly.min.js"
    if not path.is_file():
        raise ConfigError(f"plotly.js is missing from the plotly package ({path}): reinstall it")
    return path


def _static(name: str) -> bytes:
    return resources.files("bkeeper.dashboard").joinpath("static", name).read_bytes()


class Dashboard:
    """``url = await start()``, then ``await aclose()``."""

    def __init__(self, config: DashboardConfig, monitor: ClusterMonitor | None = None) -> None:
        self.config = config
        self.monitor = monitor or ClusterMonitor(config)
        self._plotly = plotly_js_path()
        self._runner: web.AppRunner | None = None
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/static/plotly.min.js", self._plotly_js)
        app.router.add_get("/static/{name}", self._static_file)
        monitor = self.monitor
        views: dict[str, Callable[[], object]] = {
            "overview": monitor.overview,
            "series": monitor.series,
            "ledgers": lambda: monitor.ledgers,
            "logs": lambda: monitor.logs,
            "recovery": lambda: monitor.recovery,
        }
        for name, view in views.items():
            app.router.add_get(f"/api/{name}", _json_handler(view))
        return app

    async def start(self) -> str:
        """Open the cluster, refresh once, listen; the page's URL. ``ConfigError`` naming
        the address when it cannot listen."""
        await self.monitor.start()
        runner = web.AppRunner(self.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.config.host, self.config.port)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            await self.monitor.aclose()
            where = f"{self.config.host}:{self.config.port}"
            raise ConfigError(f"dashboard: cannot listen on {where} (--port): {exc}") from exc
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self.url = f"http://{host}:{port}/"
        return self.url

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.monitor.aclose()

    # -- handlers ------------------------------------------------------------------------
    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.Response(body=_static("index.html"), content_type="text/html", charset="utf-8")

    async def _plotly_js(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(
            self._plotly,
            headers={
                "Content-Type": "application/javascript",
                "Cache-Control": f"max-age={_PLOTLY_CACHE_S}",
            },
        )

    async def _static_file(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        content_type = _STATIC_FILES.get(name)
        if content_type is None:
            raise web.HTTPNotFound(text=f"no such file: /static/{name}")
        return web.Response(body=_static(name), content_type=content_type, charset="utf-8")


def _json_handler(
    view: Callable[[], object],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def handler(request: web.Request) -> web.StreamResponse:
        return web.json_response(view(), headers={"Cache-Control": "no-store"})

    return handler
