"""Cluster metadata with Apache BookKeeper's ZooKeeper layout: ledger metadata, bookie
registration, cookies, id generation, under-replication, leader election and locks.

Everything is built once on one port, the :class:`~bkeeper.meta.store.NodeStore` (a
ZooKeeper-like tree), with two drivers chosen by URI: ``zk://`` (kazoo) and ``memory://``.
"""

from bkeeper.meta.bookie_info import BookieServiceInfo, Endpoint
from bkeeper.meta.cluster import ClusterMetadata, MetadataConfig, format_cluster
from bkeeper.meta.cookie import Cookie
from bkeeper.meta.election import LeaderElection
from bkeeper.meta.layout import ledger_path
from bkeeper.meta.ledger_metadata import DigestType, LedgerMetadata, LedgerState
from bkeeper.meta.lock import Lock
from bkeeper.meta.metadata_format import decode_ledger_metadata, encode_ledger_metadata
from bkeeper.meta.registry import BookieRegistration, BookieRegistry, BookieSet, RegistryConfig
from bkeeper.meta.store import NodeStore, Versioned
from bkeeper.meta.underreplication import auditor_election
from bkeeper.meta.uri import MetadataUri, open_node_store

__all__ = [
    "BookieRegistration",
    "BookieRegistry",
    "BookieServiceInfo",
    "BookieSet",
    "ClusterMetadata",
    "Cookie",
    "DigestType",
    "Endpoint",
    "LeaderElection",
    "LedgerMetadata",
    "LedgerState",
    "Lock",
    "MetadataConfig",
    "MetadataUri",
    "NodeStore",
    "RegistryConfig",
    "Versioned",
    "auditor_election",
    "decode_ledger_metadata",
    "encode_ledger_metadata",
    "format_cluster",
    "ledger_path",
    "open_node_store",
]
