"""Every configuration holding a secret hides it from ``repr()`` and ``str()`` (what a log
line, a traceback's locals or an error message shows): the token secret, a token, a ledger
password. A key is a file path in every configuration; its content is never held there."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.auth import ClientAuthConfig, ServerAuthConfig
from bkeeper.common.tls import TlsClientConfig, TlsServerConfig
from bkeeper.namedlog.core import LogConfig
from bkeeper.server import BookieConfig
from bkeeper.spark.options import SinkOptions, SourceOptions
from bkeeper.testing.certs import make_ca, make_cert

#: One sentinel per kind of secret, each long enough for the checks the configs make.
SECRET = b"token-secret-SENTINEL-" + b"x" * 32
TOKEN = "v1.token-SENTINEL.signature-SENTINEL"
PASSWORD = b"ledger-password-SENTINEL"
SENTINELS = (b"SENTINEL", SECRET, TOKEN.encode(), PASSWORD)


def shown(value: object) -> list[str]:
    return [repr(value), str(value), f"{value}", f"{value!r}"]


def assert_hidden(value: object) -> None:
    for text in shown(value):
        data = text.encode()
        for sentinel in SENTINELS:
            assert sentinel not in data, text
            # bytes show as b'...' with escapes: the readable part is enough to leak.
            assert repr(sentinel)[2:-1].encode() not in data, text


CONFIGS: dict[str, Callable[[], object]] = {
    "ServerAuthConfig": lambda: ServerAuthConfig(token_secret=SECRET),
    "ClientAuthConfig": lambda: ClientAuthConfig(token=TOKEN),
    "ClientConfig": lambda: ClientConfig(auth=ClientAuthConfig(token=TOKEN)),
    "BookieConfig": lambda: BookieConfig(
        data_dir="/tmp/x", auth=ServerAuthConfig(token_secret=SECRET)
    ),
    "LogConfig": lambda: LogConfig(password=PASSWORD),
    "SourceOptions": lambda: SourceOptions(metadata="memory://x/ledgers", password=PASSWORD),
    "SinkOptions": lambda: SinkOptions(
        metadata="memory://x/ledgers", log_config=LogConfig(password=PASSWORD)
    ),
}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_config_hides_its_secret(name: str) -> None:
    assert_hidden(CONFIGS[name]())


def test_the_check_sees_a_secret_shown() -> None:
    """The check itself catches a field that shows the secret (bytes and text)."""

    @dataclasses.dataclass(frozen=True)
    class Leaky:
        password: bytes
        token: str

    with pytest.raises(AssertionError):
        assert_hidden(Leaky(PASSWORD, ""))
    with pytest.raises(AssertionError):
        assert_hidden(Leaky(b"", TOKEN))


def test_tls_configs_hold_key_paths_not_keys(subprocesses: None, tmp_path: Path) -> None:
    ca = make_ca(tmp_path, "ca")
    bookie = make_cert(tmp_path, ca, "bookie")
    body = "".join(
        line
        for line in Path(bookie.key).read_text().splitlines()
        if line and not line.startswith("-----")
    )
    server = TlsServerConfig(cert_file=bookie.cert, key_file=bookie.key, ca_file=ca.cert)
    client = TlsClientConfig(ca_file=ca.cert, cert_file=bookie.cert, key_file=bookie.key)
    server.context()
    client.context()
    for config in (server, client):
        for text in shown(config):
            assert body[:40] not in text and body[-40:] not in text
