"""The handshake's refusals against a real bookie process that published no requirements
(no metadata store: the client learns them only from the answers), v2 and v3: a token
refused by the bookie names the subject and both causes; a token offered in the clear to a
TLS-only bookie names TLS and its option."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bkeeper.client.bookie_client import BookieClient
from bkeeper.client.config import ClientConfig
from bkeeper.client.handshake import ClientSecurity, client_security
from bkeeper.common.auth import ClientAuthConfig, make_token
from bkeeper.common.errors import AuthenticationError
from bkeeper.common.tls import TlsClientConfig
from bkeeper.wire.codes import Protocol
from tests.security.conftest import SECRET, BookieProcess, Pki

Start = Callable[..., BookieProcess]
SECRET_TEXT = SECRET.hex().encode()


def security(token: str, pki: Pki | None = None) -> ClientSecurity:
    tls = None if pki is None else TlsClientConfig(pki.ca.cert)
    found = client_security(ClientConfig(tls=tls, auth=ClientAuthConfig(token=token)))
    assert found is not None
    return found


async def connect(bookie: BookieProcess, protocol: Protocol, sec: ClientSecurity) -> None:
    client = await BookieClient.connect("127.0.0.1", bookie.port, protocol, security=sec)
    await client.aclose()


@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3])
async def test_refused_tokens_and_tokens_in_the_clear_say_so(
    bookie_factory: Start, pki: Pki, protocol: Protocol
) -> None:
    bookie = bookie_factory(
        "--tls-cert", pki.bookie.cert, "--tls-key", pki.bookie.key, "--tls-required",
        "--auth-token-secret-file", pki.secret_file,
    )  # fmt: skip
    address = f"127.0.0.1:{bookie.port}"
    foreign = make_token(b"f" * 40, "writer", 600)
    with pytest.raises(AuthenticationError) as refused:
        await connect(bookie, protocol, security(foreign, pki))
    assert str(refused.value) == (
        f"bookie {address} refused the token (subject writer): signed with another secret, or "
        "the subject is not admitted (the bookie's log says which)"
    )
    good = make_token(SECRET_TEXT, "writer", 600)
    with pytest.raises(AuthenticationError) as clear:
        await connect(bookie, protocol, security(good))
    requires_tls = (
        "requires TLS before it takes a token: give it with --client-tls-ca (BKEEPER_TLS_CA) "
        "(docs/security.md)"
    )
    if protocol is Protocol.V3:
        assert str(clear.value) == f"bookie {address} {requires_tls}"
    else:  # a v2 answer has no status: it names the disabled plugin, as auth-off bookies do
        assert str(clear.value).startswith(f"bookie {address} has authentication off")
        assert str(clear.value).endswith(f"; or it {requires_tls}")
    await connect(bookie, protocol, security(good, pki))  # with both: admitted
