"""The admin HTTP API of a real bookie process with TLS (required) and token authentication,
on a real ZooKeeper: without a token (or over plain HTTP) nothing of ledger data, ledger
metadata, the cluster, the configuration or the metrics is answered; over HTTPS with a token
everything is; ``bkeeper shell gcstatus`` works with the environment the sandbox prints; the
sanity check is a POST, refused without --http-admin-writes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bkeeper.cli.shell_admin import admin_url
from bkeeper.client import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.common.auth import ClientAuthConfig, make_token
from bkeeper.common.tls import TlsClientConfig
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.testing.zookeeper import ZooKeeperServer
from tests.security.conftest import SECRET, Pki

SECRET_TEXT = SECRET.hex().encode()
ENTRIES = [b"secret entry %d" % i for i in range(3)]
PASSWORD = b"ledger-password"
#: Every door the issue found open, with what its answer would give away.
GUARDED = [
    "/api/v1/ledger/read?ledger_id={ledger}",
    "/api/v1/ledger/list?print_metadata=true",
    "/api/v1/ledger/metadata?ledger_id={ledger}",
    "/api/v1/bookie/cluster_info",
    "/api/v1/bookie/list_bookie_info",
    "/api/v1/bookie/list_bookies",
    "/api/v1/config/server_config",
    "/api/v1/bookie/state",
    "/metrics",
]


@dataclass
class SecureBookie:
    uri: str
    bookie_id: str
    url: str
    env: dict[str, str]
    token: str
    ledger_id: int
    log_path: Path
    ca_file: str


def _env(pki: Pki, token_file: Path | None) -> dict[str, str]:
    """The client environment `bkeeper sandbox --secure` prints (CA, token file)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BKEEPER_")}
    env["BKEEPER_TLS_CA"] = pki.ca.cert
    if token_file is not None:
        env["BKEEPER_AUTH_TOKEN_FILE"] = str(token_file)
    return env


@pytest.fixture(scope="module")
def bookie_process(
    zookeeper: ZooKeeperServer, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path, dict[str, str], str, Path]]:
    where = tmp_path_factory.mktemp("secure-admin")
    uri = zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")

    async def format_cluster() -> None:
        async with await ClusterMetadata.open(uri) as cluster:
            await cluster.format()

    asyncio.run(format_cluster())
    token = make_token(SECRET_TEXT, "operator", 3600)
    token_file = where / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    env = _env(pki, token_file)
    log_path = where / "bookie.log"
    command = [
        sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(where / "data"),
        "--port", "0", "--metadata", uri, "--http-port", "0",
        "--tls-cert", pki.bookie.cert, "--tls-key", pki.bookie.key, "--tls-required",
        "--auth-token-secret-file", pki.secret_file,
    ]  # fmt: skip
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        port = wait_ready(proc, log_path, 0)
        yield uri, log_path, env, f"127.0.0.1:{port}", token_file
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
async def secure(
    bookie_process: tuple[str, Path, dict[str, str], str, Path], pki: Pki
) -> AsyncIterator[SecureBookie]:
    uri, log_path, env, bookie_id, token_file = bookie_process
    token = token_file.read_text()
    config = ClientConfig(tls=TlsClientConfig(pki.ca.cert), auth=ClientAuthConfig(token=token))
    async with BookKeeper(uri, config) as bk:
        handle = await bk.create_ledger(1, 1, 1, password=PASSWORD)
        for entry in ENTRIES:
            await handle.append(entry)
        await handle.close()
    url = await admin_url(uri, bookie_id)
    yield SecureBookie(uri, bookie_id, url, env, token, handle.ledger_id, log_path, pki.ca.cert)


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
        yield session


async def call(
    http: aiohttp.ClientSession,
    secure: SecureBookie,
    method: str,
    path: str,
    *,
    token: str | None = None,
) -> tuple[int, Any]:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    context = TlsClientConfig(secure.ca_file).context()
    url = secure.url + path.format(ledger=secure.ledger_id)
    async with http.request(method, url, headers=headers, ssl=context) as answer:
        text = await answer.text()
        try:
            return answer.status, json.loads(text)
        except ValueError:
            return answer.status, text


async def test_the_registration_says_https(secure: SecureBookie) -> None:
    assert secure.url.startswith("https://127.0.0.1:"), secure.url
    assert f"(admin {secure.url})" in secure.log_path.read_text()


async def test_without_a_token_nothing_is_answered(
    secure: SecureBookie, http: aiohttp.ClientSession
) -> None:
    for path in GUARDED:
        status, body = await call(http, secure, "GET", path)
        assert status == 401, (path, body)
        assert "needs an authenticated identity" in body["error"]
        assert "secret entry" not in json.dumps(body)
    status, body = await call(http, secure, "GET", GUARDED[0], token=secure.token + "x")
    assert status == 403 and "credentials refused" in body["error"], body
    # Liveness and readiness stay open, and say nothing of ledgers.
    assert await call(http, secure, "GET", "/heartbeat") == (200, "OK\n")
    assert await call(http, secure, "GET", "/api/v1/bookie/is_ready") == (200, {"ready": True})


async def test_plain_http_is_refused(secure: SecureBookie) -> None:
    host, _, port = secure.url.removeprefix("https://").rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"GET /api/v1/ledger/read?ledger_id={secure.ledger_id} HTTP/1.1\r\n"
        f"Host: b\r\nAuthorization: Bearer {secure.token}\r\n\r\n".encode()
    )
    async with asyncio.timeout(30):
        assert await reader.read() == b""
    writer.close()
    for _ in range(100):
        log = secure.log_path.read_text()
        if "plain HTTP sent to the HTTPS admin port" in log:
            break
        await asyncio.sleep(0.1)
    assert "plain HTTP sent to the HTTPS admin port" in log
    assert "Traceback" not in log


async def test_with_a_token_over_https_everything_is_served(
    secure: SecureBookie, http: aiohttp.ClientSession
) -> None:
    token = secure.token
    status, read = await call(http, secure, "GET", GUARDED[0], token=token)
    assert status == 200, read
    assert read == {str(i): entry.decode() for i, entry in enumerate(ENTRIES)}
    status, listed = await call(http, secure, "GET", GUARDED[1], token=token)
    assert status == 200 and listed[str(secure.ledger_id)]["lastEntryId"] == 2, listed
    for path in GUARDED[2:6]:
        status, body = await call(http, secure, "GET", path, token=token)
        assert status == 200, (path, body)
    status, info = await call(http, secure, "GET", "/api/v1/bookie/list_bookie_info", token=token)
    assert info[secure.bookie_id]["freeSpace"] > 0, info  # its client reached it over TLS
    status, metrics = await call(http, secure, "GET", "/metrics", token=token)
    assert status == 200 and "bkeeper_bookie_connections" in metrics


async def test_the_configuration_is_served_without_secrets(
    secure: SecureBookie, http: aiohttp.ClientSession
) -> None:
    status, config = await call(
        http, secure, "GET", "/api/v1/config/server_config", token=secure.token
    )
    assert status == 200, config
    assert config["auth"]["token_secret"] == "<redacted>"
    assert config["tls"]["required"] is True
    text = json.dumps(config)
    assert SECRET_TEXT.decode() not in text and SECRET.hex() not in text


async def test_sanity_is_a_post_refused_without_admin_writes(
    secure: SecureBookie, http: aiohttp.ClientSession
) -> None:
    status, body = await call(http, secure, "GET", "/api/v1/bookie/sanity", token=secure.token)
    assert status == 405 and body["error"].endswith("use POST"), body
    status, body = await call(http, secure, "POST", "/api/v1/bookie/sanity")
    assert status == 401, body
    status, body = await call(http, secure, "POST", "/api/v1/bookie/sanity", token=secure.token)
    assert status == 403 and "--http-admin-writes" in body["error"], body
    status, listed = await call(http, secure, "GET", "/api/v1/ledger/list", token=secure.token)
    assert sorted(listed) == [str(secure.ledger_id)]  # no ledger made


def _shell(secure: SecureBookie, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "shell", *args, "--metadata", secure.uri,
         "--bookie", secure.bookie_id],
        capture_output=True, text=True, timeout=120, env=env, check=False,
    )  # fmt: skip


async def test_shell_gcstatus_carries_the_environment_s_credentials(
    secure: SecureBookie, pki: Pki
) -> None:
    done = await asyncio.to_thread(_shell, secure, secure.env, "gcstatus", "--json")
    assert done.returncode == 0, done.stderr
    assert "running" in json.loads(done.stdout)
    without = await asyncio.to_thread(_shell, secure, _env(pki, None), "gcstatus")
    assert without.returncode == 1
    line = without.stderr.strip()
    assert "\n" not in line and "answered 401" in line, line
    assert "BKEEPER_AUTH_TOKEN_FILE" in line, line
    no_ca = {k: v for k, v in secure.env.items() if k != "BKEEPER_TLS_CA"}
    untrusted = await asyncio.to_thread(_shell, secure, no_ca, "gcstatus")
    assert untrusted.returncode == 1
    assert "TLS handshake failed: certificate verify failed" in untrusted.stderr, untrusted.stderr
    assert secure.token not in without.stderr + untrusted.stderr + done.stdout
