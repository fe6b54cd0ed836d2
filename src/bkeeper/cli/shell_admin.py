"""``bkeeper shell gc|gcstatus|suspendcompaction|resumecompaction``: a bookie's garbage
collection, through its admin HTTP server (docs/admin.md).

The bookie is named by its id (``--bookie host:port``, as ``bkeeper shell listbookies``
shows it); its admin address is the ``httpserver`` endpoint of its registration in the
metadata store (a bookie started with ``--http-port``), ``https`` when the bookie has TLS.
Requests carry the client security options of the ``bkeeper`` command (docs/security.md):
``Authorization: Bearer`` with the token of ``--auth-token-file`` (``BKEEPER_AUTH_TOKEN_FILE``),
and over HTTPS the CA of ``--client-tls-ca`` (``BKEEPER_TLS_CA``; else the system's), the
client certificate for mutual TLS, the hostname check unless turned off. A bookie not
registered, one registered without an admin endpoint, one that does not answer within the
timeout, a failed TLS handshake, or an answer other than 200, is one line on stderr and exit
status 1.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, TypeVar

import click
from rich.console import Console

from bkeeper.cli._errors import CommandError
from bkeeper.cli._options import metadata_option
from bkeeper.cli._tables import console, titled_table
from bkeeper.client.config import ClientConfig
from bkeeper.common.auth import TOKEN_PLUGIN
from bkeeper.common.errors import NoNodeError
from bkeeper.common.tls import TlsClientConfig, describe_tls_error
from bkeeper.meta.bookie_info import HTTP_ENDPOINT_ID
from bkeeper.meta.cluster import ClusterMetadata

__all__ = ["AdminClient", "admin_url", "commands", "endpoint_url"]

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

#: How long ``shell gc`` waits for the pass by default: a major compaction of a large bookie,
#: throttled, takes a while.
GC_TIMEOUT_S = 3600.0
#: How long the other commands wait for an answer by default.
TIMEOUT_S = 30.0
#: Answers larger than this are refused (they are a few KiB of JSON).
ANSWER_BYTES_MAX = 4 * 1024 * 1024

_bookie_option = click.option(
    "--bookie",
    "bookie_id",
    required=True,
    metavar="ID",
    help="The bookie's id (host:port unless it has a --bookie-id), as listbookies shows it.",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")


def _timeout_option(default: float) -> Callable[[F], F]:
    return click.option(
        "--timeout",
        "timeout_s",
        default=default,
        show_default=True,
        type=click.FloatRange(min=0, min_open=True),
        help="Seconds to wait for the bookie's answer.",
    )


def _run(coro: Coroutine[Any, Any, T]) -> T:
    from bkeeper.common.loop import run_event_loop

    return run_event_loop(coro)


def endpoint_url(protocol: str, host: str, port: int) -> str:
    """The URL of an admin endpoint as registered: ``https://`` when its protocol says so
    (a bookie with TLS), else ``http://``."""
    scheme = "https" if protocol.lower() == "https" else "http"
    return f"{scheme}://{host}:{port}"


async def admin_url(metadata_uri: str, bookie_id: str) -> str:
    """``http(s)://host:port`` of the admin server ``bookie_id`` registered; ``CommandError``
    when it is not registered or registered no admin endpoint."""
    async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
        try:
            info = await cluster.registry.service_info(bookie_id)
        except NoNodeError:
            raise CommandError(
                f"bookie {bookie_id} is not registered at {metadata_uri} "
                "(bkeeper shell listbookies --all shows those that are)"
            ) from None
    endpoint = info.endpoint(HTTP_ENDPOINT_ID)
    if endpoint is None:
        raise CommandError(
            f"bookie {bookie_id} registered no admin endpoint: start it with --http-port"
        )
    return endpoint_url(endpoint.protocol, endpoint.host, endpoint.port)


class AdminClient:
    """Requests to one bookie's admin server; every failure is a ``CommandError`` line.
    ``token``: sent as ``Authorization: Bearer``; ``tls``: how an ``https`` URL is checked
    (None: the system's CA certificates, hostname checked)."""

    def __init__(
        self,
        bookie_id: str,
        url: str,
        timeout_s: float,
        *,
        token: str | None = None,
        tls: TlsClientConfig | None = None,
    ) -> None:
        self.bookie_id = bookie_id
        self.url = url
        self.timeout_s = timeout_s
        self._token = token
        # The environment's proxies are not for a bookie's admin port.
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if url.startswith("https:"):
            context = (TlsClientConfig() if tls is None else tls).context()
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    @classmethod
    def of_process(cls, bookie_id: str, url: str, timeout_s: float) -> AdminClient:
        """A client with this process's client security (the ``bkeeper`` command's
        ``--auth-token-file``, ``--client-tls-*`` options and their variables)."""
        defaults = ClientConfig()
        auth = defaults.auth
        token = auth.token if auth is not None and auth.plugin == TOKEN_PLUGIN else None
        return cls(bookie_id, url, timeout_s, token=token, tls=defaults.tls)

    def request(self, method: str, path: str, body: Mapping[str, object] | None = None) -> Any:
        """The JSON answer of ``method path``."""
        url = self.url + path
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)
        if self._token is not None:
            request.add_unredirected_header("Authorization", f"Bearer {self._token}")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        where = f"bookie {self.bookie_id} ({method} {url})"
        try:
            with self._opener.open(request, timeout=self.timeout_s) as answer:
                raw = answer.read(ANSWER_BYTES_MAX + 1)
        except urllib.error.HTTPError as exc:
            hint = ""
            if exc.code == 401 and self._token is None:
                hint = " (no token given: --auth-token-file or BKEEPER_AUTH_TOKEN_FILE)"
            raise CommandError(f"{where} answered {exc.code}: {_error_of(exc)}{hint}") from None
        except TimeoutError:
            raise CommandError(f"{where}: no answer within {self.timeout_s:g} s") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise CommandError(f"{where}: no answer within {self.timeout_s:g} s") from None
            if isinstance(exc.reason, ssl.SSLError):
                raise CommandError(
                    f"{where}: TLS handshake failed: {describe_tls_error(exc.reason)} (the CA "
                    "is --client-tls-ca / BKEEPER_TLS_CA; a client certificate "
                    "--client-tls-cert / BKEEPER_TLS_CERT)"
                ) from None
            raise CommandError(f"{where}: its admin server does not answer: {exc.reason}") from None
        except (OSError, ValueError) as exc:  # reset mid-answer, malformed status line, ...
            raise CommandError(f"{where}: {type(exc).__name__}: {exc}") from None
        if len(raw) > ANSWER_BYTES_MAX:
            raise CommandError(f"{where}: an answer over {ANSWER_BYTES_MAX} bytes")
        try:
            return json.loads(raw)
        except ValueError:
            raise CommandError(f"{where}: the answer is not JSON: {raw[:80]!r}") from None


def _error_of(exc: urllib.error.HTTPError) -> str:
    """The ``error`` of an error answer's JSON body, else its first line."""
    try:
        raw = exc.read(ANSWER_BYTES_MAX)
    except OSError:
        return exc.reason or "no body"
    try:
        message = json.loads(raw)["error"]
    except (ValueError, TypeError, KeyError):
        text = raw.decode(errors="replace").strip()
        return text.splitlines()[0] if text else str(exc.reason)
    return str(message)


def _client(metadata_uri: str, bookie_id: str, timeout_s: float) -> AdminClient:
    url = _run(admin_url(metadata_uri, bookie_id))
    return AdminClient.of_process(bookie_id, url, timeout_s)


def _console() -> Console:
    return console()


def _size(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 1024:
        for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
            if abs(value) >= scale:
                return f"{value:,} ({value / scale:,.1f} {unit})"
    return str(value)


def _rows(values: Mapping[str, object], prefix: str = "") -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for key, value in sorted(values.items()):
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            rows += _rows(value, f"{name}.")
        elif key.endswith("bytes") or "bytes_" in key:
            rows.append((name, _size(value)))
        elif key.endswith("_wall_ms") and isinstance(value, int) and value > 0:
            when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value / 1000))
            rows.append((name, f"{value} ({when})"))
        elif isinstance(value, float):
            rows.append((name, f"{value:,.3f}"))
        else:
            rows.append((name, "-" if value is None else str(value)))
    return rows


def _print(title: str, values: object, as_json: bool) -> None:
    if as_json or not isinstance(values, Mapping):
        click.echo(json.dumps(values, indent=2, sort_keys=True))
        return
    table = titled_table(title, show_header=False)
    table.add_column("field")
    table.add_column("value", justify="right")
    for name, text in _rows(values):
        table.add_row(name, text)
    _console().print(table)


@click.command()
@metadata_option
@_bookie_option
@click.option("--major", is_flag=True, help="Run major compaction in this pass.")
@click.option("--minor", is_flag=True, help="Run minor compaction in this pass.")
@_json_option
@_timeout_option(GC_TIMEOUT_S)
def gc(
    metadata_uri: str, bookie_id: str, major: bool, minor: bool, as_json: bool, timeout_s: float
) -> None:
    """Run a garbage collection pass on a bookie now, wait for it and print its report."""
    client = _client(metadata_uri, bookie_id, timeout_s)
    kinds = " and ".join(k for k, on in (("major", major), ("minor", minor)) if on)
    what = f"a GC pass ({kinds} compaction)" if kinds else "a GC pass"
    with Console(stderr=True).status(f"bookie {bookie_id}: waiting for {what} ..."):
        report = client.request(
            "PUT", "/api/v1/bookie/gc", {"forceMajor": major, "forceMinor": minor}
        )
    _print(f"GC pass on bookie {bookie_id}", report, as_json)


@click.command()
@metadata_option
@_bookie_option
@_json_option
@_timeout_option(TIMEOUT_S)
def gcstatus(metadata_uri: str, bookie_id: str, as_json: bool, timeout_s: float) -> None:
    """A bookie's garbage collector: running, suspended, totals, the last pass."""
    status = _client(metadata_uri, bookie_id, timeout_s).request("GET", "/api/v1/bookie/gc")
    _print(f"garbage collection on bookie {bookie_id}", status, as_json)


def _compaction(
    verb: str, metadata_uri: str, bookie_id: str, kinds: dict[str, bool], timeout_s: float
) -> None:
    if not any(kinds.values()):
        kinds = {kind: True for kind in kinds}  # neither flag: both kinds
    body = {f"{verb}{kind.capitalize()}": on for kind, on in kinds.items()}
    client = _client(metadata_uri, bookie_id, timeout_s)
    answer = client.request("PUT", f"/api/v1/bookie/gc/{verb}_compaction", body)
    if not isinstance(answer, dict):
        raise CommandError(f"bookie {bookie_id}: unexpected answer {answer!r:.80}")
    states = [
        f"{kind} compaction {'suspended' if answer.get(key) else 'running'}"
        for kind, key in (("major", "isMajorGcSuspended"), ("minor", "isMinorGcSuspended"))
    ]
    click.echo(f"bookie {bookie_id}: {', '.join(states)}")


@click.command()
@metadata_option
@_bookie_option
@click.option("--major", is_flag=True, help="Suspend major compaction.")
@click.option("--minor", is_flag=True, help="Suspend minor compaction.")
@_timeout_option(TIMEOUT_S)
def suspendcompaction(
    metadata_uri: str, bookie_id: str, major: bool, minor: bool, timeout_s: float
) -> None:
    """Suspend a bookie's compaction (neither flag: both kinds); GC of deleted ledgers and
    empty entry logs goes on."""
    _compaction("suspend", metadata_uri, bookie_id, {"major": major, "minor": minor}, timeout_s)


@click.command()
@metadata_option
@_bookie_option
@click.option("--major", is_flag=True, help="Resume major compaction.")
@click.option("--minor", is_flag=True, help="Resume minor compaction.")
@_timeout_option(TIMEOUT_S)
def resumecompaction(
    metadata_uri: str, bookie_id: str, major: bool, minor: bool, timeout_s: float
) -> None:
    """Resume a bookie's suspended compaction (neither flag: both kinds)."""
    _compaction("resume", metadata_uri, bookie_id, {"major": major, "minor": minor}, timeout_s)


#: Added to the ``shell`` group by :mod:`bkeeper.cli.shell`.
commands: tuple[click.Command, ...] = (gc, gcstatus, suspendcompaction, resumecompaction)
