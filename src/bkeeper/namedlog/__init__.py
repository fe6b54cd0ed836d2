"""Named logs on ledgers (as in the BookKeeper tutorial and DistributedLog).

A named log is an ordered list of ledgers kept in the metadata store under compare-and-set;
one writer at a time appends records to its last ledger, readers read and tail it without
fencing. Modules: :mod:`~bkeeper.namedlog.logs` (the logs and their rules),
:mod:`~bkeeper.namedlog.writer`, :mod:`~bkeeper.namedlog.reader`, :mod:`~bkeeper.namedlog.walk`
(the one walk over a log's ledger list: ends, position at a time, spans of confirmed entries),
:mod:`~bkeeper.namedlog.records` (the record bytes) and :mod:`~bkeeper.namedlog.metadata`.
"""

from bkeeper.namedlog.config import EARLIEST, LATEST, LogConfig, LogSettings
from bkeeper.namedlog.logs import NamedLog, NamedLogs
from bkeeper.namedlog.metadata import LogLedger, LogMetadata, logs_root
from bkeeper.namedlog.reader import LogReader
from bkeeper.namedlog.records import (
    Position,
    Record,
    decode_entry,
    decode_record,
    encode_batch,
    encode_record,
    entry_envelopes,
)
from bkeeper.namedlog.stores import LogStore, PendingLedgers, SubscriptionStore
from bkeeper.namedlog.walk import EntrySpan, LogWalk
from bkeeper.namedlog.writer import LogWriter

__all__ = [
    "EARLIEST",
    "LATEST",
    "EntrySpan",
    "LogConfig",
    "LogLedger",
    "LogMetadata",
    "LogReader",
    "LogSettings",
    "LogStore",
    "LogWalk",
    "LogWriter",
    "NamedLog",
    "NamedLogs",
    "PendingLedgers",
    "Position",
    "Record",
    "SubscriptionStore",
    "decode_entry",
    "decode_record",
    "encode_batch",
    "encode_record",
    "entry_envelopes",
    "logs_root",
]
