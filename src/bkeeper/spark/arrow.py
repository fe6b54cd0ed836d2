"""Records of named logs as Arrow record batches, and rows to write back (no pyspark).

The read schema (``source_schema``) is fixed; ``properties`` is added on request. Arrow
types match what Spark converts the Spark schema to exactly (Spark refuses a batch whose
schema differs): ``timestamp`` is microseconds in UTC, ids are int64.

Decoding avoids per-record Python work where it can: when no record of a batch has a key or
properties (the common case), namedlog's core gives the records as columns at once
(:func:`bkeeper.namedlog.core.plain_columns`: timestamps, the payloads back to back and their
offsets) and those become the Arrow columns directly. Other batches are decoded record by
record (:func:`bkeeper.namedlog.core.decode_entry`). The envelope is parsed only there.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from bkeeper.client.entry import Entry
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog.core import batch_record_count, decode_entry, plain_columns
from bkeeper.spark.options import spark_schema

__all__ = ["arrow_schema", "record_batch", "sink_rows", "spark_schema"]

_TIMESTAMP = pa.timestamp("us", tz="UTC")


def arrow_schema(include_properties: bool) -> pa.Schema:
    fields = [
        pa.field("log", pa.string()),
        pa.field("ledger", pa.int64()),
        pa.field("entry", pa.int64()),
        pa.field("batch_index", pa.int32()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("key", pa.binary()),
        pa.field("payload", pa.binary()),
    ]
    if include_properties:
        fields.append(pa.field("properties", pa.map_(pa.string(), pa.binary())))
    return pa.schema(fields)


def record_batch(
    log: str,
    ledger_id: int,
    entries: Sequence[Entry],
    include_properties: bool,
    *,
    first_index: int = 0,
    end_index: int = 0,
) -> pa.RecordBatch:
    """One Arrow batch of the records in ``entries`` (consecutive entries of one ledger,
    each a single record or a record batch), in log order. Of the first entry, only records
    from ``first_index`` on; of the last, only those before ``end_index`` (0: all)."""
    ids = [e.entry_id for e in entries]
    found = plain_columns([e.payload for e in entries], ledger_id, ids)
    if found is None:
        batch = _decoded_batch(log, ledger_id, entries, include_properties)
        # _trimmed reads only the first and the last entry's count
        counts: Any = (
            (batch_record_count(entries[0].payload), batch_record_count(entries[-1].payload))
            if entries
            else None
        )
    else:
        counts = found.counts
        entry_ids = np.array(ids, np.int64)
        count = len(found.times_ms)
        if counts is None:
            indexes = np.zeros(len(entries), np.int32)
        else:
            firsts = np.zeros(len(counts), np.int64)
            np.cumsum(counts[:-1], out=firsts[1:])
            indexes = (np.arange(count) - np.repeat(firsts, counts)).astype(np.int32)
            entry_ids = np.repeat(entry_ids, counts)
        payloads = pa.Array.from_buffers(
            pa.binary(), count, [None, pa.py_buffer(found.offsets), pa.py_buffer(found.body)]
        )
        times_ms = found.times_ms
        columns = [
            pa.repeat(pa.scalar(log, pa.string()), count),
            pa.repeat(pa.scalar(ledger_id, pa.int64()), count),
            pa.array(entry_ids),
            pa.array(indexes),
            pa.array(times_ms * 1000, _TIMESTAMP),
            pa.nulls(count, pa.binary()),
            payloads,
        ]
        if include_properties:
            columns.append(pa.array([[]] * count, pa.map_(pa.string(), pa.binary())))
        batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_properties))
    return _trimmed(batch, counts, first_index, end_index)


def _trimmed(
    batch: pa.RecordBatch, counts: Any, first_index: int, end_index: int
) -> pa.RecordBatch:
    """``batch`` less the first entry's records before ``first_index`` and the last entry's
    from ``end_index`` on (a zero-copy slice: they are the first and the last rows).
    ``counts``: records per entry (None: one each)."""
    if batch.num_rows == 0 or (first_index == 0 and end_index == 0):
        return batch
    first_count = 1 if counts is None else int(counts[0])
    last_count = 1 if counts is None else int(counts[-1])
    low = min(first_index, first_count)
    high = batch.num_rows
    if end_index:
        high -= last_count - min(end_index, last_count)
    return batch.slice(low, max(0, high - low))


def _decoded_batch(
    log: str, ledger_id: int, entries: Sequence[Entry], include_properties: bool
) -> pa.RecordBatch:
    """``record_batch`` for records with keys or properties: one decode per record."""
    records = [r for e in entries for r in decode_entry(e.payload, ledger_id, e.entry_id)]
    count = len(records)
    columns = [
        pa.repeat(pa.scalar(log, pa.string()), count),
        pa.repeat(pa.scalar(ledger_id, pa.int64()), count),
        pa.array([r.position.entry_id for r in records], pa.int64()),
        pa.array([r.position.index for r in records], pa.int32()),
        pa.array(np.array([r.timestamp_ms for r in records], np.int64) * 1000, _TIMESTAMP),
        pa.array([r.key for r in records], pa.binary()),
        pa.array([r.payload for r in records], pa.binary()),
    ]
    if include_properties:
        props = [list(r.properties.items()) for r in records]
        columns.append(pa.array(props, pa.map_(pa.string(), pa.binary())))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_properties))


def _column(batch: pa.RecordBatch, name: str) -> pa.Array | None:
    index = batch.schema.get_field_index(name)
    return None if index < 0 else batch.column(index)


def _as_bytes(values: list[Any]) -> list[bytes | None]:
    return [v.encode() if isinstance(v, str) else v for v in values]


def sink_rows(
    batch: pa.RecordBatch, default_log: str | None
) -> Iterator[tuple[str, bytes, bytes | None, dict[str, bytes] | None]]:
    """``(log, payload, key, properties)`` for each row of an input batch.

    Columns: ``payload`` (binary or string, required, not null), ``key`` (binary or string),
    ``log`` (string; the ``log`` option wins over it), ``properties`` (map of string to
    binary or string).
    """
    payload = _column(batch, "payload")
    if payload is None:
        raise ConfigError("cannot write: the DataFrame has no payload column")
    if payload.null_count:
        raise ConfigError("cannot write: the payload column has nulls")
    payloads = _as_bytes(payload.to_pylist())
    rows = len(payloads)
    key = _column(batch, "key")
    keys = _as_bytes(key.to_pylist()) if key is not None else [None] * rows
    if default_log is not None:
        logs: list[Any] = [default_log] * rows
    else:
        log_column = _column(batch, "log")
        if log_column is None:
            raise ConfigError("cannot write: set the log option or give a log column")
        if log_column.null_count:
            raise ConfigError("cannot write: the log column has nulls")
        logs = log_column.to_pylist()
    props_column = _column(batch, "properties")
    props: list[Any] = props_column.to_pylist() if props_column is not None else [None] * rows
    for log, data, k, p in zip(logs, payloads, keys, props, strict=True):
        properties = {name: v.encode() if isinstance(v, str) else v for name, v in p} if p else None
        yield log, data, k, properties  # type: ignore[misc]
