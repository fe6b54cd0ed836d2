"""Named logs on ledgers (as in the BookKeeper tutorial and DistributedLog).

A named log is an ordered list of ledgers kept in the metadata store under compare-and-set;
one writer at a time appends records to its last ledger, readers read and tail it without
fencing. See :mod:`bkeeper.namedlog.log` for the rules and :mod:`bkeeper.namedlog.records`
for the record bytes.
"""

from bkeeper.namedlog.log import (
    EARLIEST,
    LATEST,
    LogConfig,
    LogReader,
    LogWriter,
    NamedLog,
    NamedLogs,
)
from bkeeper.namedlog.metadata import LogLedger, LogMetadata, LogStore, logs_root
from bkeeper.namedlog.records import Position, Record, decode_record, encode_record

__all__ = [
    "EARLIEST",
    "LATEST",
    "LogConfig",
    "LogLedger",
    "LogMetadata",
    "LogReader",
    "LogStore",
    "LogWriter",
    "NamedLog",
    "NamedLogs",
    "Position",
    "Record",
    "decode_record",
    "encode_record",
    "logs_root",
]
