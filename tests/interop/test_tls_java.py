"""TLS between Java BookKeeper and bkeeper: Java's client (its ``OpenSSL`` provider, from
netty-tcnative, and its ``JDK`` one; v2 and v3) with a client certificate against bkeeper
bookies that require TLS and a client certificate of the cluster's CA (mutual TLS); the same
client refused without TLS or without a certificate; and bkeeper's TLS client against a Java
bookie with TLS, in one ensemble with bkeeper bookies."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Iterator

import pytest

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.common.tls import TlsClientConfig
from bkeeper.testing.certs import CertFiles, make_ca, make_cert
from bkeeper.testing.zookeeper import ZooKeeperServer
from bkeeper.wire.codes import Protocol
from tests.client.conftest import RealCluster, _started
from tests.interop.conftest import wait_registered
from tests.interop.javabk import JavaBookie, JavaBookKeeper, JavaClient, JavaError, payload
from tests.interop.ledgers import (
    ENTRIES,
    PASSWORD,
    PROTOCOLS,
    SIZE,
    ask,
    closed_read,
    java_read,
    read_all,
    written,
)

pytestmark = pytest.mark.interop

PROVIDERS = ["OpenSSL", "JDK"]


@dataclasses.dataclass(frozen=True)
class Pki:
    ca: CertFiles
    bookie: CertFiles
    client: CertFiles


@dataclasses.dataclass
class TlsCluster:
    ours: RealCluster
    java: JavaBookie
    pki: Pki

    @property
    def uri(self) -> str:
        return self.ours.uri


@pytest.fixture(scope="module")
def pki(java_tls: JavaBookKeeper, tmp_path_factory: pytest.TempPathFactory) -> Pki:
    where = tmp_path_factory.mktemp("pki")
    ca = make_ca(where, "ca")
    return Pki(ca, make_cert(where, ca, "bookie"), make_cert(where, ca, "client"))


@pytest.fixture(scope="module")
async def tls_cluster(
    javabk: JavaBookKeeper, pki: Pki, zookeeper: ZooKeeperServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[TlsCluster]:  # fmt: skip
    """Three bkeeper bookies requiring TLS and a client certificate, and one Java bookie
    with TLS (and mutual TLS), in one cluster."""
    data_dir = tmp_path_factory.mktemp("tls")
    ours_args = (
        "--tls-cert", pki.bookie.cert, "--tls-key", pki.bookie.key, "--tls-ca", pki.ca.cert,
        "--tls-client-auth", "--tls-required",
    )  # fmt: skip
    async with _started(zookeeper, data_dir, (3, ours_args)) as ours:
        java = javabk.bookie(
            ours.uri, data_dir / "java-bookie",
            tlsProviderFactoryClass="org.apache.bookkeeper.tls.TLSContextFactory",
            tlsProvider="JDK", tlsKeyStoreType="PEM", tlsKeyStore=pki.bookie.key,
            tlsCertificatePath=pki.bookie.cert, tlsClientAuthentication="true",
            tlsTrustStoreType="PEM", tlsTrustStore=pki.ca.cert,
        )  # fmt: skip
        try:
            await wait_registered(ours.uri, {java.bookie_id}, [java])
            yield TlsCluster(ours, java, pki)
        finally:
            java.stop()


@pytest.fixture(scope="module")
def java(java_client: JavaClient, tls_cluster: TlsCluster) -> Iterator[JavaClient]:
    """Java clients named ``<provider>-<protocol>`` with TLS and a client certificate,
    ``plain`` without TLS and ``nocert`` with TLS and no certificate."""
    pki = tls_cluster.pki
    for provider in PROVIDERS:
        for protocol in PROTOCOLS:
            java_client.ask(
                "client", f"{provider}-{protocol}", protocol, tls_cluster.uri,
                "tls", provider, "true", pki.ca.cert, pki.client.cert, pki.client.key,
            )  # fmt: skip
    java_client.ask("client", "plain", "v3", tls_cluster.uri)
    java_client.ask("client", "nocert", "v3", tls_cluster.uri, "tls", "JDK", "true", pki.ca.cert)
    yield java_client


@pytest.fixture(scope="module")
async def ours(tls_cluster: TlsCluster) -> AsyncIterator[dict[str, BookKeeper]]:
    pki = tls_cluster.pki
    tls = TlsClientConfig(ca_file=pki.ca.cert, cert_file=pki.client.cert, key_file=pki.client.key)
    clients = {
        name: await BookKeeper(
            tls_cluster.uri, ClientConfig(protocol=Protocol[name.upper()], tls=tls)
        ).start()
        for name in PROTOCOLS
    }
    yield clients
    for client in clients.values():
        await client.close()


def ours_ids(cluster: TlsCluster) -> list[str]:
    return [cluster.ours.bookie_id(i) for i in range(3)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("provider", PROVIDERS)
async def test_java_client_with_tls_to_bkeeper_bookies(
    java: JavaClient, ours: dict[str, BookKeeper], tls_cluster: TlsCluster,
    provider: str, protocol: str,
) -> None:  # fmt: skip
    name = f"{provider}-{protocol}"
    # Four of four bookies: three of ours (TLS required, mutual TLS) and the Java one.
    ledger_id = int(await ask(java, "create", name, "CRC32C", PASSWORD, 4, 3, 2))
    assert await ask(java, "append", ledger_id, 0, ENTRIES, SIZE) == str(ENTRIES - 1)
    await ask(java, "close", ledger_id)
    assert await read_all(ours[protocol], ledger_id) == written(ledger_id)
    # bkeeper writes to its TLS bookies only; Java reads over TLS.
    writer = await ours[protocol].create_ledger(
        3, 3, 3, digest="crc32", password=PASSWORD.encode(), bookies=ours_ids(tls_cluster)
    )
    for entry in range(ENTRIES):
        await writer.append(payload(writer.ledger_id, entry, SIZE))
    await writer.close()
    assert await java_read(java, name, writer.ledger_id, "CRC32", False) == closed_read(
        writer.ledger_id
    )


async def test_bkeeper_client_with_tls_to_a_java_bookie(
    java: JavaClient, ours: dict[str, BookKeeper], tls_cluster: TlsCluster
) -> None:
    """Ack quorum = ensemble: the Java bookie (mutual TLS) must take every entry."""
    bookies = [tls_cluster.java.bookie_id, *ours_ids(tls_cluster)[:2]]
    writer = await ours["v3"].create_ledger(
        3, 3, 3, digest="crc32c", password=PASSWORD.encode(), bookies=bookies
    )
    for entry in range(ENTRIES):
        await writer.append(payload(writer.ledger_id, entry, SIZE))
    await writer.close()
    handle = await ours["v2"].open_ledger(writer.ledger_id, PASSWORD.encode(), recovery=False)
    java_copy = [
        (await handle.read_entry_from(tls_cluster.java.bookie_id, entry_id)).data
        for entry_id in range(ENTRIES)
    ]
    assert java_copy == written(writer.ledger_id)
    assert await java_read(java, "JDK-v3", writer.ledger_id, "CRC32C", False) == closed_read(
        writer.ledger_id
    )


@pytest.mark.parametrize("client", ["plain", "nocert"])
async def test_java_client_without_tls_or_certificate_is_refused(
    java: JavaClient, ours: dict[str, BookKeeper], tls_cluster: TlsCluster, client: str
) -> None:
    writer = await ours["v3"].create_ledger(
        3, 3, 3, digest="crc32", password=PASSWORD.encode(), bookies=ours_ids(tls_cluster)
    )
    await writer.append(payload(writer.ledger_id, 0, SIZE))
    await writer.close()
    with pytest.raises(JavaError) as refused:
        await java_read(java, client, writer.ledger_id, "CRC32", False)
    if client == "plain":
        # The bookies answer EUA before START_TLS (--tls-required); Java's message for EUA
        # is "wrong password".
        assert (refused.value.kind, refused.value.code) == ("BKUnauthorizedAccessException", -102)
    else:
        # The handshake fails (mutual TLS): Java sees the bookie unavailable, the bookie
        # logs one line saying why.
        kind = (refused.value.kind, refused.value.code)
        assert kind == ("BKBookieHandleNotAvailableException", -8)
        logs = [(tls_cluster.ours.data_dir / f"bookie-{i}.log").read_text() for i in range(3)]
        assert any("TLS handshake failed: peer did not return a certificate" in log for log in logs)
