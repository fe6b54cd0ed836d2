"""``bkeeper.spark.LagListener``: the lag of every stream reading named logs, after each batch.

Add it to a session (``spark.streams.addListener(LagListener(metadata_uri))``); on each
progress report of a query with a bkeeper source it measures, from the report's ``endOffset``
and ``latestOffset`` (the heads the source reported), the records (exact, or ``~``
estimated far behind), the age of the oldest unread record, the entries and the bytes each
log is behind (:mod:`bkeeper.spark.lag`), logs one line at INFO on ``bkeeper.spark.lag``, keeps the
last ``reports_max`` reports in :attr:`LagListener.reports` and calls ``on_report`` if given
(to export them: a metrics registry, a dashboard). It runs on the driver, in the listener
thread PySpark calls it from, with one client per process (:mod:`bkeeper.spark.runtime`).

Spark's progress report itself cannot carry these: pyspark 4.3's Python streaming source has
no metrics hook (its runner calls ``latestOffset``, ``reportLatestOffset`` and no other
reporting method; ``metrics`` stays ``{}``), so the report holds the heads only.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from bkeeper.common.errors import BKeeperError
from bkeeper.namedlog import LogConfig
from bkeeper.spark.lag import LagReport, measure, parse_progress_offsets
from bkeeper.spark.runtime import runtime

__all__ = ["REPORTS_MAX", "LagListener"]

log = logging.getLogger("bkeeper.spark.lag")

#: Reports a listener keeps (the most recent).
REPORTS_MAX = 1_000
#: Longest the measure of one progress report may take.
MEASURE_TIMEOUT_S = 60.0


class LagListener(StreamingQueryListener):
    """Records, time, entries and bytes behind per log and in total (min/avg/max over logs)
    for every progress report of a stream reading named logs of the cluster at ``metadata``."""

    def __init__(
        self,
        metadata: str,
        *,
        password: bytes = b"",
        on_report: Callable[[LagReport], None] | None = None,
        reports_max: int = REPORTS_MAX,
    ) -> None:
        self.metadata = metadata
        self.password = password
        self.on_report = on_report
        self.reports: deque[LagReport] = deque(maxlen=reports_max)

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        progress = event.progress
        for source in progress.sources:
            offsets = parse_progress_offsets(
                {"endOffset": source.endOffset, "latestOffset": source.latestOffset}
            )
            if offsets is None:
                continue  # another kind of source, or no head reported yet
            end, heads = offsets
            try:
                report = self.measure(progress.batchId, end, heads)
            except BKeeperError as error:  # the query goes on; the listener says why it can't
                log.warning(
                    "query %s batch %d: lag not measured: %s", progress.id, progress.batchId, error
                )
                continue
            log.info("query %s %s", progress.id, report.summary())
            self.reports.append(report)
            if self.on_report is not None:
                self.on_report(report)

    def measure(self, batch_id: int, end: Any, heads: Any) -> LagReport:
        rt = runtime(self.metadata, (), LogConfig(password=self.password))
        logs = rt.call(measure(rt.view, end, heads), MEASURE_TIMEOUT_S)
        return LagReport(batch_id, logs)
