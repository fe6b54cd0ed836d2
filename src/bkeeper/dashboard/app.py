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

Everything is served from :class:`ClusterMonitor`'s snapshots. Nothing the dashboard does
changes the cluster: the API is GET only (aiohttp answers 405 to the rest).

With a token (``DashboardConfig.login_token``: a secured cluster) the page and the API are
for holders of that token only (:mod:`bkeeper.dashboard.login`)::

    GET /                   without a session: the login page (no cluster data at all)
    POST /login             form field ``token``: right, a session cookie and 303 to /;
                            wrong: 403 and the login page saying "token refused"; too many
                            refused from this address: 429 (one log line per refusal, never
                            the token)
    POST /logout            ends the session, 303 to /
    GET /api/*              a session cookie, or ``Authorization: Bearer <token>``; else 401
                            JSON (403 for a wrong bearer token, 429 when limited)

The static files (script, style, plotly.js) carry no data and stay open.
"""

from __future__ import annotations

import html
import importlib.util
import logging
from collections.abc import Awaitable, Callable
from importlib import resources
from pathlib import Path

from aiohttp import web

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import ConfigError
from bkeeper.dashboard.config import DashboardConfig
from bkeeper.dashboard.login import LoginGate, LoginOutcome
from bkeeper.dashboard.monitor import ClusterMonitor

__all__ = ["SESSION_COOKIE", "Dashboard", "plotly_js_path"]

log = logging.getLogger(__name__)

#: The cookie holding a browser's session id.
SESSION_COOKIE = "bkeeper_session"
#: Largest request body read (a login form); the API takes none.
_REQUEST_BYTES_MAX = 16 * 1024
#: The page's log-out button, shown when there is a login.
_LOGOUT_HIDDEN = b'<form id="logout-form" method="post" action="/logout" hidden>'
_LOGOUT_SHOWN = _LOGOUT_HIDDEN.replace(b" hidden>", b">")
_LOGIN_MESSAGES = {
    LoginOutcome.REFUSED: "token refused",
    LoginOutcome.LIMITED: "too many refused attempts: wait a minute and try again",
    LoginOutcome.TOKEN_EXPIRED: "the dashboard's own token has expired: restart it with a new one",
}
_LOGIN_STATUS = {
    LoginOutcome.REFUSED: 403,
    LoginOutcome.LIMITED: 429,
    LoginOutcome.TOKEN_EXPIRED: 403,
}

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

    def __init__(
        self,
        config: DashboardConfig,
        monitor: ClusterMonitor | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.monitor = monitor or ClusterMonitor(config)
        token = config.login_token
        #: None: an open cluster, the page is open too.
        self.gate = None if token is None else LoginGate(token, clock or default_clock())
        self._plotly = plotly_js_path()
        self._runner: web.AppRunner | None = None
        self.url = ""

    def app(self) -> web.Application:
        middlewares = [] if self.gate is None else [self._guard]
        app = web.Application(middlewares=middlewares, client_max_size=_REQUEST_BYTES_MAX)
        app.router.add_get("/", self._index)
        if self.gate is not None:
            app.router.add_post("/login", self._login)
            app.router.add_post("/logout", self._logout)
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
        if self.gate is None:
            return _html(_static("index.html"))
        if not self.gate.session_valid(request.cookies.get(SESSION_COOKIE)):
            return _login_page("")
        return _html(_static("index.html").replace(_LOGOUT_HIDDEN, _LOGOUT_SHOWN))

    # -- login (a token configured) ------------------------------------------------------
    @web.middleware
    async def _guard(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        """Every /api/* request needs a session or the bearer token (module doc)."""
        assert self.gate is not None
        if not request.path.startswith("/api/"):
            return await handler(request)  # the page checks itself; static files are open
        if self.gate.session_valid(request.cookies.get(SESSION_COOKIE)):
            return await handler(request)
        scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not presented:
            return _refusal(
                401, "login required: a session (log in at /) or 'Authorization: Bearer <token>'"
            )
        outcome = self.gate.check(_address(request), presented.strip())
        if outcome is LoginOutcome.OK:
            return await handler(request)
        self._log_refusal(request, outcome, "bearer token")
        return _refusal(_LOGIN_STATUS[outcome], _LOGIN_MESSAGES[outcome])

    async def _login(self, request: web.Request) -> web.StreamResponse:
        assert self.gate is not None
        form = await request.post()
        presented = form.get("token")
        presented = presented.strip() if isinstance(presented, str) else ""
        result = self.gate.login(_address(request), presented)
        if result.session_id is None:
            self._log_refusal(request, result.outcome, "login")
            page = _login_page(_LOGIN_MESSAGES[result.outcome])
            page.set_status(_LOGIN_STATUS[result.outcome])
            if result.retry_after_s:
                page.headers["Retry-After"] = str(result.retry_after_s)
            return page
        response = _see_root()
        response.set_cookie(
            SESSION_COOKIE,
            result.session_id,
            max_age=result.lifetime_s,
            path="/",
            httponly=True,
            samesite="Strict",
        )
        return response

    async def _logout(self, request: web.Request) -> web.StreamResponse:
        assert self.gate is not None
        self.gate.logout(request.cookies.get(SESSION_COOKIE))
        response = _see_root()
        response.del_cookie(SESSION_COOKIE, path="/")
        return response

    def _log_refusal(self, request: web.Request, outcome: LoginOutcome, what: str) -> None:
        if outcome is LoginOutcome.LIMITED:
            return  # counted already: no log line per attempt past the limit
        log.warning(
            "dashboard: %s from %s refused: %s", what, _address(request), _LOGIN_MESSAGES[outcome]
        )

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


def _html(body: bytes) -> web.Response:
    return web.Response(
        body=body, content_type="text/html", charset="utf-8", headers={"Cache-Control": "no-store"}
    )


def _login_page(message: str) -> web.Response:
    """The login page, saying ``message`` (a fixed text of ours, never the request's)."""
    page = _static("login.html").replace(b"<!--message-->", html.escape(message).encode())
    return _html(page)


def _refusal(status: int, message: str) -> web.Response:
    return web.json_response(
        {"error": message}, status=status, headers={"Cache-Control": "no-store"}
    )


def _address(request: web.Request) -> str:
    return request.remote or "unknown"


def _see_root() -> web.Response:
    return web.Response(status=303, headers={"Location": "/", "Cache-Control": "no-store"})
