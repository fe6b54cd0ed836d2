"""Pure tests of the ZooKeeper layout and metadata URIs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bkeeper.common.errors import ConfigError, ProtocolError
from bkeeper.common.ids import MAX_LEDGER_ID
from bkeeper.meta.layout import (
    HIERARCHICAL_LAYOUT,
    SHORT_LEDGER_ID_LIMIT,
    LedgerLayout,
    ledger_id_from_parts,
    ledger_path,
    ur_ledger_path,
    ur_lock_path,
)
from bkeeper.meta.uri import MetadataUri


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (0, "/ledgers/00/0000/L0000"),
        (1, "/ledgers/00/0000/L0001"),
        (1234567890, "/ledgers/12/3456/L7890"),
        (SHORT_LEDGER_ID_LIMIT - 1, "/ledgers/21/4748/L3646"),
        (SHORT_LEDGER_ID_LIMIT, "/ledgers/000/0000/0021/4748/L3647"),
        (21234, "/ledgers/00/0002/L1234"),
        (MAX_LEDGER_ID, "/ledgers/922/3372/0368/5477/L5807"),
    ],
)
def test_hierarchical_ledger_paths(ledger_id: int, path: str) -> None:
    assert ledger_path("/ledgers", ledger_id) == path


@given(st.integers(min_value=0, max_value=MAX_LEDGER_ID))
def test_ledger_path_round_trips(ledger_id: int) -> None:
    parts = ledger_path("/r", ledger_id).split("/")[2:]
    assert ledger_id_from_parts(parts) == ledger_id


def test_not_ledger_paths() -> None:
    assert ledger_id_from_parts(["idgen", "ID-0000000001"]) is None
    assert ledger_id_from_parts(["00", "0000", "X0001"]) is None
    assert ledger_id_from_parts(["00", "000", "L0001"]) is None
    with pytest.raises(ValueError):
        ledger_path("/ledgers", -1)


def test_layout_text_is_bookkeepers() -> None:
    assert HIERARCHICAL_LAYOUT.encode() == (
        b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
    )
    assert LedgerLayout.decode(HIERARCHICAL_LAYOUT.encode() + b"\n") == HIERARCHICAL_LAYOUT
    with pytest.raises(ProtocolError):
        LedgerLayout.decode(b"garbage")


def test_under_replication_paths() -> None:
    ledger_id = 0x0AFEBEEF0000FEED
    assert ur_ledger_path("/ledgers", ledger_id) == (
        f"/ledgers/underreplication/ledgers/0afe/beef/0000/feed/urL{ledger_id}"
    )
    assert ur_ledger_path("/ledgers", 1) == (
        "/ledgers/underreplication/ledgers/0000/0000/0000/0001/urL0000000001"
    )
    assert ur_lock_path("/ledgers", 7) == "/ledgers/underreplication/locks/urL0000000007"


@pytest.mark.parametrize(
    ("uri", "scheme", "hosts", "root"),
    [
        ("zk://127.0.0.1:2181/ledgers", "zk", ("127.0.0.1:2181",), "/ledgers"),
        ("zk+hierarchical://h1:2181;h2:2182/ledgers", "zk", ("h1:2181", "h2:2182"), "/ledgers"),
        ("zk://h1:2181,h2:2181/pulsar/ledgers/", "zk", ("h1:2181", "h2:2181"), "/pulsar/ledgers"),
        ("zk://h1", "zk", ("h1",), "/ledgers"),
        ("memory://test", "memory", (), "/ledgers"),
        ("memory://test/other", "memory", (), "/other"),
    ],
)
def test_metadata_uris(uri: str, scheme: str, hosts: tuple[str, ...], root: str) -> None:
    parsed = MetadataUri.parse(uri)
    assert (parsed.scheme, parsed.hosts, parsed.root) == (scheme, hosts, root)


@pytest.mark.parametrize(
    "uri", ["127.0.0.1:2181", "etcd://h:2379/x", "zk+flat://h:1/l", "zk:///ledgers", "memory://"]
)
def test_bad_metadata_uris(uri: str) -> None:
    with pytest.raises(ConfigError):
        MetadataUri.parse(uri)
