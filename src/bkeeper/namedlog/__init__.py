"""Named logs on ledgers (as in the BookKeeper tutorial and DistributedLog).

A named log is an ordered list of ledgers kept in the metadata store under compare-and-set;
one writer at a time appends records to its last ledger, readers read and tail it without
fencing. This package and :mod:`bkeeper.namedlog.core` are the faces other packages import.

Layers, top down (each imports only those below it):

- :mod:`~bkeeper.namedlog.logs`: ``NamedLogs`` and ``NamedLog``, which only compose;
- :mod:`~bkeeper.namedlog.subscriptions`: subscriptions and their consumers;
- :mod:`~bkeeper.namedlog.writer` (with :mod:`~bkeeper.namedlog.batching`) and
  :mod:`~bkeeper.namedlog.reader`;
- :mod:`~bkeeper.namedlog.handle`: one log of a context (metadata, ends, truncation,
  retention, sealing);
- :mod:`~bkeeper.namedlog.context`: what the parts share, built once by ``NamedLogs``;
- :mod:`~bkeeper.namedlog.walk` (the one walk over a log's ledger list),
  :mod:`~bkeeper.namedlog.stores` (every stored node and cursor ledger, every write a
  compare-and-set) and :mod:`~bkeeper.namedlog.ledgers` (making, discarding and sealing a
  log's ledgers);
- :mod:`~bkeeper.namedlog.core`: pure records, metadata, subscription state, retention and
  roll decisions, span arithmetic.
"""

from bkeeper.namedlog.core.config import EARLIEST, LATEST, LogConfig, LogSettings
from bkeeper.namedlog.core.log_metadata import LogLedger, LogMetadata, logs_root
from bkeeper.namedlog.core.records import (
    Position,
    Record,
    decode_entry,
    decode_record,
    encode_batch,
    encode_record,
    entry_envelopes,
)
from bkeeper.namedlog.core.spans import EntrySpan, LostRange, earliest, locate
from bkeeper.namedlog.ledgers import create_ledger, discard_ledger
from bkeeper.namedlog.logs import NamedLog, NamedLogs
from bkeeper.namedlog.reader import LogReader
from bkeeper.namedlog.stores import LogStore, PendingLedgers, SubscriptionStore, WatchedLogs
from bkeeper.namedlog.subscriptions import (
    Backlog,
    Consumer,
    SharedConsumer,
    SubscribeOptions,
    backlog,
    commit_before,
    ensure_subscription,
)
from bkeeper.namedlog.walk import LogWalk
from bkeeper.namedlog.writer import LogWriter

__all__ = [
    "EARLIEST",
    "LATEST",
    "Backlog",
    "Consumer",
    "EntrySpan",
    "LogConfig",
    "LogLedger",
    "LogMetadata",
    "LogReader",
    "LogSettings",
    "LogStore",
    "LogWalk",
    "LogWriter",
    "LostRange",
    "NamedLog",
    "NamedLogs",
    "PendingLedgers",
    "Position",
    "Record",
    "SharedConsumer",
    "SubscribeOptions",
    "SubscriptionStore",
    "WatchedLogs",
    "backlog",
    "commit_before",
    "create_ledger",
    "decode_entry",
    "decode_record",
    "discard_ledger",
    "earliest",
    "encode_batch",
    "encode_record",
    "ensure_subscription",
    "entry_envelopes",
    "locate",
    "logs_root",
]
