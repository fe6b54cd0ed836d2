"""Exactly-once writes to named logs from Spark (batch and streaming).

Each write task appends its rows to ledgers of its own (one per log it writes to, rolled at
``rollBytes``) and seals them; its commit message names them. The driver's commit appends
each log's task ledgers to the log in one compare-and-set
(:meth:`bkeeper.namedlog.NamedLog.append_ledgers`), so a reader sees a batch whole or not at
all. A streaming commit records ``(writer id, batch id)`` in that same compare-and-set: when
Spark replays a batch after a failure between the sink commit and its checkpoint commit, the
log already holds the batch, the commit appends nothing and the replay's ledgers are deleted.
The writer id is the ``writerId`` option or, by default, derived from the query's checkpoint
location, so it survives restarts. Every task ledger is registered as pending for its job
(:mod:`bkeeper.namedlog.pending`) before anything is written to it, and unregistered once
appended: ``abort`` deletes every pending ledger of the job that no log holds (including
those of tasks whose commit message Spark dropped), a failed task deletes its own, and a
commit also deletes what an earlier, killed run of the same streaming query left, and what
attempts it does not commit left (a failed attempt, a speculative copy that lost); an attempt
of a batch write that ends after the commit deletes its own.

A log deleted while the write runs (it existed, or was created, when the write started):
the commit fails with :class:`~bkeeper.common.errors.LogDeletedError` naming it, before it
appends to any log, and Spark's abort deletes the write's ledgers. A log named by the ``log``
column is created again at the commit unless ``createLog=false`` (a new name and a deleted
one look alike there).

Order: the rows of one task stay in order; tasks follow each other in the order their first
ledgers were made (Spark does not order rows across tasks).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from bkeeper.common.errors import (
    BKeeperError,
    ConfigError,
    LogDeletedError,
    LogError,
    LogNotFoundError,
)
from bkeeper.spark.errors import explained, plainly
from bkeeper.spark.options import SinkOptions, sink_options
from bkeeper.spark.runtime import Runtime, runtime
from bkeeper.spark.task_ledgers import TaskLedgers

if TYPE_CHECKING:  # imported by write tasks only (see bkeeper.spark.source's docstring)
    import pyarrow as pa

__all__ = ["BatchWriter", "LedgersMessage", "StreamWriter", "sink_for"]

_COLUMN_TYPES = {
    "payload": ("binary", "string"),
    "key": ("binary", "string"),
    "log": ("string",),
    "properties": ("map<string,binary>", "map<string,string>"),
}
_COLUMNS = set(_COLUMN_TYPES)


@dataclass
class LedgersMessage(WriterCommitMessage):
    """What one task wrote: sealed ledger ids per log, in order, and the row count."""

    ledgers: dict[str, list[int]] = field(default_factory=dict)
    records: int = 0


def sink_for(options: Mapping[str, str], *, streaming: bool, schema: Any) -> Any:
    """The writer for these options, after checking the DataFrame's columns (driver)."""
    parsed = sink_options(options)
    names = [f.name for f in schema.fields]
    unknown = sorted(set(names) - _COLUMNS)
    if unknown or "payload" not in names:
        raise ConfigError(
            f"cannot write columns {names}: a bkeeper log takes payload (required), key, log "
            "and properties"
        )
    if parsed.log is None and "log" not in names:
        raise ConfigError("set the log option or give the DataFrame a log column")
    for field_ in schema.fields:
        wanted = _COLUMN_TYPES[field_.name]
        if field_.dataType.simpleString() not in wanted:
            raise ConfigError(
                f"cannot write column {field_.name} of type {field_.dataType.simpleString()}: "
                f"use {' or '.join(wanted)}"
            )
    if parsed.create_log is None:
        restarted = streaming and _restarted(options)
        parsed = replace(parsed, create_log=not restarted)
        refusal = RESTARTED if restarted else None
    else:
        refusal = None
    rt = _runtime(parsed)
    if parsed.log is not None:
        rt.ensure_log(parsed.log, bool(parsed.create_log), refusal)
    if streaming:
        if parsed.writer_id is None:
            raise ConfigError(
                "a streaming write to bkeeper needs the checkpointLocation option (or writerId): "
                "it identifies the query across restarts, for exactly-once commits"
            )
        # Spark makes this writer again in the process that commits: nothing is done here.
        return StreamWriter(parsed, parsed.writer_id)
    return BatchWriter(parsed, f"batch:{uuid.uuid4()}")


#: Why a missing log is not created by default (see :func:`_restarted`).
RESTARTED = (
    "this stream restarts from its checkpoint, and a restarted stream creates no log by "
    "default (a typo in the log name would silently start a new one): check the name, or "
    "set createLog=true"
)


def _restarted(options: Mapping[str, str]) -> bool:
    """Whether the streaming query restarts from a checkpoint that has committed batches
    (its ``commits/`` directory holds one). Only a local checkpoint directory can be
    checked; any other location counts as a new query."""
    location = next((v for k, v in options.items() if k.lower() == "checkpointlocation"), None)
    if not location:
        return False
    path = str(location)
    if path.startswith("file:"):
        path = "/" + path[len("file:") :].lstrip("/")
    elif "://" in path:
        return False
    commits = Path(path) / "commits"
    try:
        return any(child.name.isdigit() for child in commits.iterdir())
    except OSError:
        return False


def _runtime(options: SinkOptions) -> Runtime:
    return runtime(options.metadata, options.client, options.log_config)


def _write_task(
    options: SinkOptions, job_id: str, batches: Iterator[pa.RecordBatch], *, one_off: bool
) -> LedgersMessage:
    from bkeeper.spark.arrow import sink_rows

    config = options.log_config
    task = TaskLedgers(_runtime(options), config.roll_bytes, job_id, config)
    try:
        for batch in batches:
            task.write(sink_rows(batch, options.log))
        ledgers = task.seal()
    except (ConfigError, LogError):
        task.discard()
        raise  # names the option, value or log already
    except BKeeperError as exc:
        task.discard()
        raise explained(exc, f"{task.where()}: cannot write") from exc
    except BaseException:
        task.discard()
        raise
    if one_off and ledgers and task.runtime.job_ended(job_id):
        task.discard()  # a straggler of a job that failed, or committed without it, and was cleaned
        return LedgersMessage()
    return LedgersMessage(ledgers, task.records)


def _commit(
    options: SinkOptions,
    messages: Sequence[WriterCommitMessage | None],
    job_id: str,
    batch_id: int | None,
) -> None:
    """Append each log's task ledgers in one CAS (recording ``batch_id`` when given)."""
    writer_id = job_id if batch_id is not None else None
    rt = _runtime(options)
    by_log: dict[str, list[int]] = {}
    for message in _ours(messages):
        for name, ids in message.ledgers.items():
            by_log.setdefault(name, []).extend(ids)
    for name in sorted(by_log):  # every log first: a missing one fails before any changes
        if name != options.log:
            rt.ensure_log(name, options.create_log is not False)
        elif not rt.log_exists(name):  # it was there when the write started
            raise _deleted(name)
    for name, ids in sorted(by_log.items()):
        ids.sort()  # ledger ids grow in the order ledgers were made; a log's must grow
        try:
            appended = rt.append_ledgers(name, ids, writer_id, batch_id)
        except LogNotFoundError as exc:
            raise _deleted(name) from exc
        if not appended:
            rt.delete_ledgers(ids)  # a replayed batch: the log holds it already
        rt.unregister(job_id, ids)
    # Batches commit one after another, so anything still registered now was left by an
    # earlier batch of this job that died before its commit or abort, or (a one-off job) by
    # an attempt Spark did not commit: a failed one, or a speculative copy that lost. One
    # still writing finds the job marked committed when it ends and deletes its own.
    if batch_id is None:
        rt.commit_job(job_id)
    else:
        rt.clean(job_id)


def _deleted(name: str) -> LogDeletedError:
    return LogDeletedError(
        f"log {name!r} was deleted while this write ran: none of the write's records were "
        "appended to it (Spark's abort deletes the ledgers they were written to)"
    )


def _ours(messages: Sequence[WriterCommitMessage | None]) -> list[LedgersMessage]:
    return [m for m in messages if isinstance(m, LedgersMessage)]


def _abort(options: SinkOptions, job_id: str, *, one_off: bool) -> None:
    """Delete every ledger of the job that no log holds: those of the tasks that reported
    and those of tasks whose report Spark dropped (all are registered as pending)."""
    if one_off:
        _runtime(options).abort_job(job_id)
    else:
        _runtime(options).clean(job_id)


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, options: SinkOptions, job_id: str) -> None:
        self.options = options
        self.job_id = job_id

    @plainly  # a write task: its worker exits after reporting it (bkeeper.spark.errors)
    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgersMessage:
        return _write_task(self.options, self.job_id, iterator, one_off=True)

    @plainly  # on the driver, in a worker Spark does not reuse after a failure
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _commit(self.options, messages, self.job_id, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _abort(self.options, self.job_id, one_off=True)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, options: SinkOptions, writer_id: str) -> None:
        self.options = options
        self.writer_id = writer_id

    @plainly  # a write task: its worker exits after reporting it (bkeeper.spark.errors)
    def write(self, iterator: Iterator[pa.RecordBatch]) -> LedgersMessage:
        return _write_task(self.options, self.writer_id, iterator, one_off=False)

    @plainly  # on the driver, in a worker Spark does not reuse after a failure
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        _commit(self.options, messages, self.writer_id, batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        _abort(self.options, self.writer_id, one_off=False)
