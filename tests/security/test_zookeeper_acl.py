"""ZooKeeper digest authentication and ACLs (``?digest-file=``): every node bkeeper creates
(formatting, ledgers, ids, a real bookie's registration and cookie) admits only the cluster's
identity; sessions without it, or with another one, are refused reads, writes and deletes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import make_digest_acl_credential

from bkeeper.client import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError, MetadataAuthError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.uri import MetadataUri
from bkeeper.testing.zookeeper import ZooKeeperServer
from tests.security.conftest import BookieProcess

Start = Callable[..., BookieProcess]


def digest_file(where: Path, name: str, credentials: str, mode: int = 0o600) -> str:
    path = where / name
    path.write_text(credentials + "\n")
    path.chmod(mode)
    return str(path)


@pytest.fixture(scope="module")
def secure(
    zookeeper: ZooKeeperServer, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, str, str]:
    """(secured URI, the same root without credentials, the same with another identity)."""
    where = tmp_path_factory.mktemp("zkauth")
    plain = zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    mine = digest_file(where, "cluster.digest", "bkeeper:cluster-password")
    other = digest_file(where, "other.digest", "bkeeper:guessed-password")
    return f"{plain}?digest-file={mine}", plain, f"{plain}?digest-file={other}"


@pytest.fixture(scope="module")
async def cluster_with_ledger(
    secure: tuple[str, str, str], bookie_factory: Start
) -> AsyncIterator[int]:
    uri = secure[0]
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
    bookie_factory("--metadata", uri)
    async with BookKeeper(uri, ClientConfig(add_timeout_ms=20_000)) as bk:
        handle = await bk.create_ledger(1, 1, 1, password=b"pw")
        await handle.append(b"entry")
        await handle.close()
        yield handle.ledger_id


def _walk(zk: KazooClient, path: str) -> list[str]:
    found = [path]
    for child in zk.get_children(path):
        found.extend(_walk(zk, f"{path.rstrip('/')}/{child}"))
    return found


async def test_every_node_created_has_the_cluster_identity_acl_only(
    secure: tuple[str, str, str], cluster_with_ledger: int, zookeeper: ZooKeeperServer
) -> None:
    parsed = MetadataUri.parse(secure[0])
    zk = KazooClient(zookeeper.connect_string, auth_data=[("digest", "bkeeper:cluster-password")])
    zk.start(30)
    try:
        top = "/" + parsed.root.split("/")[1]
        nodes = _walk(zk, top)
        expected = make_digest_acl_credential("bkeeper", "cluster-password")
        assert len(nodes) > 10  # layout, ids, the ledger, the bookie's registration and cookie
        assert any("/available/" in node for node in nodes)
        assert any("/cookies/" in node for node in nodes)
        for node in nodes:
            acls, _ = zk.get_acls(node)
            assert [(a.id.scheme, a.id.id, a.perms) for a in acls] == [("digest", expected, 31)], (
                node
            )
    finally:
        zk.stop()
        zk.close()


@pytest.mark.parametrize("who", ["anonymous", "other identity"])
async def test_sessions_without_the_identity_can_neither_read_nor_change_metadata(
    secure: tuple[str, str, str], cluster_with_ledger: int, who: str
) -> None:
    uri = secure[1] if who == "anonymous" else secure[2]
    ledger_id = cluster_with_ledger
    async with await ClusterMetadata.open(uri) as cluster:
        with pytest.raises(MetadataAuthError, match="not authorized for") as refused:
            await cluster.ledgers.read(ledger_id)
        assert "not authorized for /" in str(refused.value)
        assert "?digest-file=FILE" in str(refused.value)
        with pytest.raises(MetadataAuthError, match="not authorized for"):
            await cluster.ledgers.delete(ledger_id)
        with pytest.raises(MetadataAuthError, match="not authorized for"):
            await cluster.store.set(cluster.root, b"x")
        with pytest.raises(MetadataAuthError, match="not authorized for"):
            await cluster.store.create(f"{cluster.root}/intruder", b"")
    # ...and the ledger is still there, readable by the cluster's identity.
    async with BookKeeper(secure[0]) as bk:
        handle = await bk.open_ledger(ledger_id, b"pw")
        assert [e.data async for e in handle.read(0, 0)] == [b"entry"]


def test_digest_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = digest_file(tmp_path, "open.digest", "u:p", mode=0o644)
    with pytest.raises(ConfigError, match=r"readable by others \(mode 644\); chmod 600 it"):
        MetadataUri.parse(f"zk://127.0.0.1:2181/ledgers?digest-file={path}").digest()


def test_uri_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="unknown option 'acl'"):
        MetadataUri.parse("zk://127.0.0.1:2181/ledgers?acl=open")
    with pytest.raises(ConfigError, match="memory:// takes no options"):
        MetadataUri.parse("memory://x/ledgers?digest-file=/f")
    uri = "zk://127.0.0.1:2181/ledgers?digest-file=/etc/zk.digest"
    assert str(MetadataUri.parse(uri)) == uri
    _ = NoAuthError
