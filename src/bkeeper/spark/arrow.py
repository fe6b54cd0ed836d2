"""Records of named logs as Arrow record batches, and rows to write back (no pyspark).

The read schema (``source_schema``) is fixed; ``properties`` is added on request. Arrow
types match what Spark converts the Spark schema to exactly (Spark refuses a batch whose
schema differs): ``timestamp`` is microseconds in UTC, ids are int64.

Decoding avoids per-record Python objects where it can: record envelopes without key or
properties (the common case) are parsed with one ``struct`` call each, and payloads are
joined into one buffer that becomes the Arrow binary column directly.
"""

from __future__ import annotations

import itertools
import struct
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from bkeeper.common.errors import ConfigError
from bkeeper.namedlog.records import FORMAT_VERSION, Position, decode_record
from bkeeper.wire.digest import Entry

__all__ = ["arrow_schema", "record_batch", "sink_rows", "spark_schema"]

_HEAD = struct.Struct(">BBq")
_HEAD_BYTES = _HEAD.size
_TIMESTAMP = pa.timestamp("us", tz="UTC")
#: Bytes of payload one Arrow binary column holds at most (its offsets are int32).
_BINARY_BYTES_MAX = 2**31 - 1


def spark_schema(include_properties: bool) -> str:
    """The read schema as Spark DDL."""
    ddl = "log string, ledger bigint, entry bigint, timestamp timestamp, key binary, payload binary"
    return ddl + (", properties map<string,binary>" if include_properties else "")


def arrow_schema(include_properties: bool) -> pa.Schema:
    fields = [
        pa.field("log", pa.string()),
        pa.field("ledger", pa.int64()),
        pa.field("entry", pa.int64()),
        pa.field("timestamp", _TIMESTAMP),
        pa.field("key", pa.binary()),
        pa.field("payload", pa.binary()),
    ]
    if include_properties:
        fields.append(pa.field("properties", pa.map_(pa.string(), pa.binary())))
    return pa.schema(fields)


def _binary(views: Sequence[Any]) -> pa.Array:
    """A binary array of ``views`` (bytes-like), built from one joined buffer."""
    data = b"".join(views)
    if len(data) > _BINARY_BYTES_MAX:
        return pa.array([bytes(v) for v in views], pa.binary())
    offsets = array("i", itertools.accumulate(map(len, views), initial=0))
    return pa.Array.from_buffers(
        pa.binary(), len(views), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def record_batch(
    log: str, ledger_id: int, entries: Sequence[Entry], include_properties: bool
) -> pa.RecordBatch:
    """One Arrow batch of the records in ``entries`` (consecutive entries of one ledger)."""
    unpack = _HEAD.unpack_from
    times: list[int] = []
    payloads: list[Any] = []
    keys: list[bytes | None] | None = None
    properties: list[list[tuple[str, bytes]]] | None = None
    for index, entry in enumerate(entries):
        view = entry.payload
        version, flags, timestamp = unpack(view)
        if flags == 0 and version == FORMAT_VERSION:
            times.append(timestamp)
            payloads.append(view[_HEAD_BYTES:])
            if keys is not None:
                keys.append(None)
            if properties is not None:
                properties.append([])
            continue
        record = decode_record(view, Position(ledger_id, entry.entry_id))
        if keys is None:
            keys = [None] * index
        if properties is None:
            properties = [[] for _ in range(index)]
        times.append(record.timestamp_ms)
        payloads.append(record.payload)
        keys.append(record.key)
        properties.append(list(record.properties.items()))
    count = len(entries)
    first = entries[0].entry_id if entries else 0
    columns = [
        pa.repeat(pa.scalar(log, pa.string()), count),
        pa.repeat(pa.scalar(ledger_id, pa.int64()), count),
        pa.array(range(first, first + count), pa.int64()),
        pc.multiply(pa.array(times, pa.int64()), 1000).cast(_TIMESTAMP),
        pa.array(keys, pa.binary()) if keys is not None else pa.nulls(count, pa.binary()),
        _binary(payloads),
    ]
    if include_properties:
        props = properties if properties is not None else [[] for _ in range(count)]
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
