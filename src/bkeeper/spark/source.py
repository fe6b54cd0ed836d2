"""The ``bkeeper`` data source for PySpark: batch and streaming reads, batch and streaming
writes of named logs. docs/spark.md lists the options and guarantees.

Spark pickles the data source, the readers and the partitions and runs them in other Python
processes, so these objects hold only validated options and plans; clients live in
:mod:`bkeeper.spark.runtime`, one per process. Reads are partitioned by entry ranges
(:mod:`bkeeper.spark.plan`), read straight from the bookies and returned as Arrow batches.

Spark starts a Python process for each planning step of a query (creating the source, the
stream runner, the sink, each commit) and unpickles this module's classes in each, so
importing it must stay cheap: pyarrow and numpy (most of the import time, and not needed to
plan or commit) are imported only by the code that reads or writes records.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from bkeeper.common.clock import Clock, SystemClock
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import LogConfig, Position, commit_before, ensure_subscription
from bkeeper.spark.checks import check_logs
from bkeeper.spark.errors import check_workers_python, plainly, plainly_each
from bkeeper.spark.options import (
    SourceOptions,
    offset_from_positions,
    positions_from_offset,
    source_options,
    spark_schema,
)
from bkeeper.spark.plan import Bounds, EntrySpan, at_least, entry_caps, partition_spans
from bkeeper.spark.planner import (
    Move,
    advance,
    batch_spans,
    count_records,
    log_names,
    move,
    spans_between,
    start_positions,
)
from bkeeper.spark.runtime import Runtime, runtime
from bkeeper.spark.sink import BatchWriter, StreamWriter, sink_for

if TYPE_CHECKING:  # pyarrow is imported where records are read (see the module docstring)
    import pyarrow as pa

__all__ = ["BKeeperDataSource", "ReadPartition", "register"]

log = logging.getLogger(__name__)


def register(spark: Any) -> None:
    """Register the data source with a SparkSession (``format("bkeeper")``), refusing a
    local session whose Python workers cannot run it (:func:`check_workers_python`: a
    source registered from Python runs in ``SparkContext.pythonExec``, ``PYSPARK_PYTHON``)."""
    spark.dataSource.register(BKeeperDataSource)
    check_workers_python(spark)


@dataclass
class ReadPartition(InputPartition):
    """One Spark task: consecutive spans of entries."""

    spans: tuple[EntrySpan, ...]


def _runtime(options: SourceOptions) -> Runtime:
    return runtime(options.metadata, options.client, LogConfig(password=options.password))


def _columns(schema: StructType, options: SourceOptions) -> tuple[str, ...] | None:
    """The columns a read produces: ``None`` for the whole bkeeper schema, else those of a
    schema the user gave, which may name any of its columns, in any order, with their
    types (the Python Data Source API does no column pruning of its own: Spark turns every
    column a source returns into its rows, so fewer columns read faster)."""
    wanted = spark_schema(options.include_properties)
    known = dict(part.split(" ", 1) for part in wanted.split(", "))
    names = [f.name for f in schema.fields]
    if names == list(known):
        return None
    for found in schema.fields:
        ddl_type = known.get(found.name)
        if ddl_type is None:
            hint = "; set includeProperties=true for it" if found.name == "properties" else ""
            raise ConfigError(
                f"schema: column {found.name!r} is not a bkeeper column ({', '.join(known)}){hint}"
            )
        if found.dataType.simpleString() != ddl_type:
            raise ConfigError(
                f"schema: column {found.name!r} is {ddl_type}, not {found.dataType.simpleString()}"
            )
    if len(set(names)) != len(names):
        raise ConfigError(f"schema: a column is named twice in {names}")
    return tuple(names)


@plainly_each  # a read task: its worker exits after reporting it (bkeeper.spark.errors)
def _read(
    options: SourceOptions, partition: InputPartition, columns: tuple[str, ...] | None
) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, ReadPartition):
        return  # Spark's single empty partition, when ours planned none
    rt = _runtime(options)
    for span in partition.spans:
        batches = rt.read_span(
            span,
            include_properties=options.include_properties,
            rows_per_batch=options.rows_per_batch,
            fail_on_data_loss=options.fail_on_data_loss,
        )
        if columns is None:
            yield from batches
        else:
            for batch in batches:
                yield batch.select(columns)


class BKeeperDataSource(DataSource):
    """``spark.read.format("bkeeper").option("metadata", uri).option("log", name).load()``"""

    @classmethod
    def name(cls) -> str:
        return "bkeeper"

    @plainly
    def schema(self) -> str:
        """Called at ``load()`` of every read (unless the user gave a schema), before Spark
        says whether it is a batch or a stream: the options are checked here, so a bad one
        fails ``load()`` with its line first, and so is the cluster (a wrong metadata root is
        "no cluster at ...", never data loss), and so are the logs: a missing one is
        ``log 'ordrs' does not exist; did you mean 'orders'? ...`` at ``load()`` (one list
        of the cluster's log names: :mod:`bkeeper.spark.checks`). Spark does not call it
        when the user gives a schema: those reads find a missing log when planned."""
        options = source_options(self.options, streaming=None)
        rt = _runtime(options)  # ClusterNotFoundError names a root that holds no cluster
        check_logs(options, rt.call(rt.view.names()))
        return spark_schema(options.include_properties)

    @plainly
    def reader(self, schema: StructType) -> DataSourceReader:
        options = source_options(self.options, streaming=False)
        columns = _columns(schema, options)
        if options.filter_pushdown:
            return PushdownBatchReader(options, columns)
        return LogBatchReader(options, columns)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802
        """Never raises: PySpark's streaming runner buries an error raised here under an
        ``UnboundLocalError`` of its own (pyspark 4.3), so what only a stream refuses
        (``endingPosition``) is raised by the reader's first call instead."""
        try:
            options = source_options(self.options, streaming=True)
            columns = _columns(schema, options)
        except ConfigError as error:
            return RefusedStreamReader(error)
        return StreamReader(options, columns=columns)

    @plainly
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ConfigError("bkeeper logs are append-only: write with mode('append')")
        writer: DataSourceWriter = sink_for(self.options, streaming=False, schema=schema)
        return writer

    @plainly
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        if overwrite:
            raise ConfigError("bkeeper logs are append-only: use outputMode('append')")
        writer: DataSourceStreamWriter = sink_for(self.options, streaming=True, schema=schema)
        return writer


class LogBatchReader(DataSourceReader):
    """Plans entry-range partitions on the driver; reads them on executors."""

    def __init__(self, options: SourceOptions, columns: tuple[str, ...] | None = None) -> None:
        self.options = options
        self.columns = columns

    bounds = Bounds()

    @plainly
    def partitions(self) -> list[ReadPartition]:
        options = self.options
        rt = _runtime(options)
        spans = self.bounds.narrow(rt.call(batch_spans(rt.view, options)))
        caps = entry_caps(rt.call(rt.view.entry_bytes(spans)), options.max_bytes_per_split)
        groups = partition_spans(spans, options.max_entries_per_split, caps)
        return [ReadPartition(g) for g in at_least(groups, options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition, self.columns)


_FILTER_OPS: dict[type[Filter], str] = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
    In: "in",
}


class PushdownBatchReader(LogBatchReader):
    """A batch reader that prunes its plan with filters on ``log``, ``ledger`` and ``entry``
    (option ``filterPushdown=true``; Spark calls ``pushFilters`` only with
    ``spark.sql.python.filterPushdown.enabled=true`` and fails reads of a reader that has it
    when the setting is off, hence a separate class)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:  # noqa: N802
        for found in filters:
            op = _FILTER_OPS.get(type(found))
            path: tuple[str, ...] = tuple(getattr(found, "attribute", ()))
            if op is not None and len(path) == 1:
                self.bounds = self.bounds.restrict(path[0], op, getattr(found, "value", None))
            yield found  # Spark checks every filter again: pruning only saves reads


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets are ``{"<log>": {"ledger": L, "entry": E}}``, the next record of each log.

    One instance lives on the driver for the whole query (Spark keeps it in one Python
    process), so the head seen by the last ``latestOffset`` and the AvailableNow targets are
    kept here; ``read`` runs on executors on other instances and uses only the partition.
    """

    def __init__(
        self,
        options: SourceOptions,
        clock: Clock | None = None,
        columns: tuple[str, ...] | None = None,
    ) -> None:
        self.options = options
        self.columns = columns
        self._clock: Clock = clock or SystemClock()
        self._targets: dict[str, Position] | None = None
        self._heads: dict[str, Position] | None = None
        #: The last batch ``latestOffset`` planned: (start, end, its spans), so that
        #: ``partitions`` for that batch does not walk the logs again.
        self._planned: tuple[dict[str, Any], dict[str, Any], list[EntrySpan]] | None = None
        self._last_batch_s = self._clock.monotonic()
        #: The offset last recorded in the subscription (``subscription`` option).
        self._committed: dict[str, Any] | None = None
        #: Average bytes per entry of each log read so far (splits by ``maxBytesPerSplit``).
        self._entry_bytes: dict[str, float] = {}
        #: ``minRecordsPerTrigger``: the spans last counted and their records (up to the
        #: minimum), so that Spark polling a stream that waits reads nothing while no entry
        #: is added.
        self._counted: tuple[tuple[EntrySpan, ...], int] | None = None

    def _rt(self) -> Runtime:
        return _runtime(self.options)

    @plainly
    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        rt = self._rt()

        async def run() -> dict[str, Position]:
            names = await log_names(rt.view, self.options)
            positions = await start_positions(rt.view, self.options, names)
            subscription = self.options.subscription
            if subscription is not None:  # where the subscription stands, if it exists
                for name in names:
                    named = rt.logs.log(name)
                    state = await ensure_subscription(named, subscription, positions[name])
                    positions[name] = state.resume_from
            return positions

        return offset_from_positions(rt.call(run()))

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802
        """``maxRecordsPerTrigger`` or ``maxEntriesPerTrigger`` (one at most: the options
        refuse both) as Spark's ``ReadMaxRows``, so ``Trigger.AvailableNow`` honours it."""
        limit = self.options.max_records_per_trigger or self.options.max_entries_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        rt = self._rt()

        _, self._targets, _ = rt.call(advance(rt.view, self.options, {}))

    @plainly
    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        if self._planned is not None and self._planned[1] == start:
            self._commit_to_subscription(start)  # the batch that ended there is complete
        positions = _exact(start)
        max_entries = max_records = None
        if isinstance(limit, ReadMaxRows):  # in the unit of the option that set it
            if self.options.max_records_per_trigger is not None:
                max_records = limit.max_rows
            else:
                max_entries = limit.max_rows
        rt = self._rt()
        found = rt.call(
            move(
                rt.view,
                self.options,
                positions,
                targets=self._targets,
                max_entries=max_entries,
                max_records=max_records,
            )
        )
        self._heads = found.heads
        covered = found.covered
        if isinstance(limit, ReadMinRows) and covered < limit.min_rows:
            return start
        if covered and (self._should_wait(covered) or self._too_few_records(found, rt)):
            return start
        if covered:
            self._last_batch_s = self._clock.monotonic()
        end = offset_from_positions(found.ends)
        self._planned = (offset_from_positions(positions), end, found.spans)
        return end

    def _should_wait(self, covered: int) -> bool:
        """``minEntriesPerTrigger``: too few entries, and ``maxTriggerDelay`` not yet up
        since the last batch (AvailableNow never waits)."""
        wanted = self.options.min_entries_per_trigger
        if wanted is None or self._targets is not None or covered >= wanted:
            return False
        waited_ms = (self._clock.monotonic() - self._last_batch_s) * 1000.0
        return waited_ms < self.options.max_trigger_delay_ms

    def _too_few_records(self, found: Move, rt: Runtime) -> bool:
        """``minRecordsPerTrigger``: fewer records waiting, and ``maxTriggerDelay`` not yet
        up since the last batch (AvailableNow never waits). The records are counted only up
        to the minimum (or were, by ``maxRecordsPerTrigger``)."""
        wanted = self.options.min_records_per_trigger
        if wanted is None or self._targets is not None or self._waited_enough():
            return False
        records = found.records
        spans = tuple(found.spans)
        if records is None and self._counted is not None and self._counted[0] == spans:
            records = self._counted[1]
        if records is None:
            records = rt.call(count_records(rt.view, found.spans, wanted))
            self._counted = (spans, records)
        return records < wanted

    def _waited_enough(self) -> bool:
        waited_ms = (self._clock.monotonic() - self._last_batch_s) * 1000.0
        return waited_ms >= self.options.max_trigger_delay_ms

    def reportLatestOffset(self) -> dict[str, Any] | None:  # noqa: N802
        return None if self._heads is None else offset_from_positions(self._heads)

    @plainly
    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ReadPartition]:
        planned = self._planned
        if planned is not None and planned[0] == start and planned[1] == end:
            spans = planned[2]  # the batch latestOffset just planned (the usual case)
        else:  # a batch from the checkpoint's offset log, after a restart
            rt = self._rt()
            spans = rt.call(spans_between(rt.view, self.options, _exact(start), _exact(end)))
        rt = self._rt()
        # Each log's entry size is estimated once per query (one ledger of it).
        self._entry_bytes = rt.call(rt.view.entry_bytes(spans, self._entry_bytes))
        caps = entry_caps(self._entry_bytes, self.options.max_bytes_per_split)
        groups = partition_spans(spans, self.options.max_entries_per_split, caps)
        return [ReadPartition(g) for g in at_least(groups, self.options.min_partitions)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition, self.columns)

    @plainly
    def commit(self, end: dict[str, Any]) -> None:
        log.debug("bkeeper stream: processed up to %s", end)
        self._commit_to_subscription(end)

    def _commit_to_subscription(self, done: dict[str, Any]) -> None:
        """Record in the subscription every record before ``done`` consumed. Spark calls
        ``commit`` for a batch only when it constructs the next one (so a query stopping
        after its last batch never commits it): ``latestOffset``'s ``start``, the end of a
        batch Spark has completed, is recorded too."""
        subscription = self.options.subscription
        if subscription is None or not done or done == self._committed:
            return
        rt = self._rt()

        async def run() -> None:
            for name, position in _exact(done).items():
                named = rt.logs.log(name)
                await ensure_subscription(named, subscription, position)  # a log new since
                await commit_before(named, subscription, position)

        rt.call(run())
        self._committed = done


class RefusedStreamReader(DataSourceStreamReader):
    """A stream whose options were refused: its first call raises the refusal."""

    def __init__(self, error: ConfigError) -> None:
        self.error = error

    @plainly
    def _refuse(self) -> NoReturn:
        raise self.error

    def initialOffset(self) -> dict[str, Any]:  # noqa: N802
        self._refuse()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:  # noqa: N802
        self._refuse()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[ReadPartition]:
        self._refuse()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        self._refuse()


def _exact(offset: dict[str, Any]) -> dict[str, Position]:
    """Positions of an offset we produced (every log at an exact position)."""
    positions = positions_from_offset(offset or {})
    bad = [name for name, p in positions.items() if not isinstance(p, Position)]
    if bad:
        raise ConfigError(f"offset of logs {bad} is not an exact position")
    return {name: p for name, p in positions.items() if isinstance(p, Position)}


__all__ += ["LogBatchReader", "BatchWriter", "PushdownBatchReader", "StreamReader", "StreamWriter"]
