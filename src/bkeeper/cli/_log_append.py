"""``bkeeper log append``'s work: records from the arguments, a file or standard input
appended in order, each position printed once durable, a progress line on a long append,
and a report that says exactly which records went in when an append fails or Ctrl-C stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator
from typing import BinaryIO

import click

from bkeeper.cli._errors import CommandError
from bkeeper.cli._stdin import read_lines
from bkeeper.common.errors import BKeeperError
from bkeeper.namedlog import LogWriter, NamedLogs, Position
from bkeeper.namedlog.core import RECORD_BYTES_MAX

__all__ = ["INTERRUPTED_WAIT_S", "PROGRESS_EVERY_S", "append_records", "read_whole"]


async def append_records(
    logs: NamedLogs,
    name: str,
    records: tuple[str, ...],
    *,
    key: str | None,
    contents: bytes | None,
    create_log: bool,
) -> None:
    """``bkeeper log append``'s work once connected (its help says what it does): the records
    given (``records``, or the file's ``contents``, or else standard input's lines) appended
    to log ``name``, positions printed once durable, and the report."""
    try:
        writer = await _open_writer(logs, name, create_log)
    except asyncio.CancelledError:
        click.echo("interrupted: nothing appended (the log's writer was not open yet)", err=True)
        raise
    raw_key = key.encode() if key is not None else None
    appends = _Appends(echo=bool(records) or contents is not None)
    if contents is not None:
        source = _given((contents,))
    elif records:
        source = _given(tuple(record.encode() for record in records))
    else:
        source = read_lines(sys.stdin.fileno())
    showing = None if records else asyncio.ensure_future(_show_progress(name, appends))
    try:
        try:
            async with contextlib.aclosing(source):
                await _feed(writer, source, raw_key, appends)
        except BKeeperError as exc:
            await appends.settle()  # the records acknowledged before it count
            appends.failure = appends.failure or exc
    except asyncio.CancelledError:  # Ctrl-C: say what went in, then exit 130
        appends.interrupted = True
        raise
    finally:
        if showing is not None:
            showing.cancel()
            await asyncio.gather(showing, return_exceptions=True)
        try:
            await _finish(writer, appends, name)
        except asyncio.CancelledError:  # Ctrl-C while closing: report all the same
            if appends.interrupted:
                raise
            appends.interrupted = True
            await _finish(writer, appends, name)
            raise
    appends.report(name)


async def _open_writer(logs: NamedLogs, name: str, create_log: bool) -> LogWriter:
    """The writer of log ``name``, creating the log first with ``create_log`` (if another
    process creates it meanwhile, that one is used); a missing log says how to create it."""
    from bkeeper.common.errors import LogDeletedError, LogExistsError, LogNotFoundError

    if create_log:
        with contextlib.suppress(LogExistsError):
            await logs.create(name)
    try:
        return await logs.log(name).open_writer()
    except LogDeletedError:
        raise
    except LogNotFoundError as exc:
        raise CommandError(
            f"log {name!r} does not exist (create it with 'bkeeper log create {name}', "
            "or pass --create)"
        ) from exc


async def _finish(writer: LogWriter, appends: _Appends, name: str) -> None:
    """Settle the appends sent and close the writer; interrupted, each within
    ``INTERRUPTED_WAIT_S`` (what is still in flight then is told as unknown), and the report
    printed here (the command then exits 130)."""
    from bkeeper.common.tasks import within

    bound = INTERRUPTED_WAIT_S if appends.interrupted else None
    await appends.settle(bound)
    try:
        await within(writer.close(), bound)
    except (BKeeperError, TimeoutError) as exc:
        if not appends.interrupted or isinstance(exc, BKeeperError):
            appends.failure = appends.failure or exc
    if appends.interrupted:
        await appends.settle(0)  # those that completed while the writer closed
        click.echo(appends.interrupted_report(), err=True)


#: How long Ctrl-C on ``log append`` waits for the outcome of the appends in flight (and
#: for the writer to close), so that its report is exact; past it they are told as unknown.
INTERRUPTED_WAIT_S = 2.0
#: A long ``log append`` shows its progress on standard error this often (s), from this long
#: after it started.
PROGRESS_EVERY_S = 2.0


async def _show_progress(name: str, appends: _Appends) -> None:
    """From ``PROGRESS_EVERY_S`` on, until cancelled: how many records are appended (a line
    redrawn in place on a terminal, else a line every interval; stderr only). A shorter
    append shows nothing, and loads no rich."""
    await asyncio.sleep(PROGRESS_EVERY_S)
    from bkeeper.cli._progress import status_line

    with status_line(lambda: f"appending to {name}: {appends.progress()}", first_s=0):
        await asyncio.get_running_loop().create_future()  # until cancelled


async def _feed(
    writer: LogWriter, source: AsyncIterator[bytes], key: bytes | None, appends: _Appends
) -> None:
    """Append each record of ``source`` until it ends or an append fails; raises
    ``LogDeletedError`` as soon as the writer learns that its log was deleted, also while
    ``source`` has nothing to give (standard input idle)."""

    async def feed() -> None:
        async for payload in source:  # cancelled while it waits here, nothing is lost
            appends.sending = True
            appends.add(await writer.append_async(payload, key=key))
            appends.sending = False
            if appends.failure is not None or appends.interrupted:
                return

    feeding = asyncio.ensure_future(feed())
    deleted = asyncio.ensure_future(writer.wait_deleted())
    try:
        await asyncio.wait([feeding, deleted], return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        appends.interrupted = True
        if appends.sending and not feeding.done():
            # Interrupted inside append_async: the record may be sent already, its future
            # not returned yet. Cancelling would lose it; let feed take it and stop.
            await asyncio.wait([feeding], timeout=INTERRUPTED_WAIT_S)
        raise
    finally:
        for task in (feeding, deleted):
            task.cancel()
        await asyncio.gather(feeding, deleted, return_exceptions=True)
    if not feeding.cancelled():
        feeding.result()  # its error, if it failed
    elif not deleted.cancelled():
        raise deleted.result()


async def _given(records: tuple[bytes, ...]) -> AsyncGenerator[bytes, None]:
    for record in records:
        yield record


def read_whole(source: BinaryIO) -> bytes:
    """All of ``source`` (read before the event loop starts); a ``CommandError`` naming the
    limit when it holds more than a record may (nothing is appended then)."""
    data = source.read(RECORD_BYTES_MAX + 1)
    if len(data) > RECORD_BYTES_MAX:
        raise CommandError(
            f"--file {source.name}: more than {RECORD_BYTES_MAX} bytes, the largest record a "
            "log takes (RECORD_BYTES_MAX); nothing appended"
        )
    return data


class _Appends:
    """The appends of one command, settled in order: positions are printed (``echo``) and
    counted only once durable; the first failure is kept, later appends are not counted."""

    def __init__(self, *, echo: bool) -> None:
        self._echo = echo
        self._pending: deque[asyncio.Future[Position]] = deque()
        self.count = 0
        self.first: Position | None = None
        self.last: Position | None = None
        self.failure: BaseException | None = None
        #: Inside ``append_async`` (its record may be sent, its future not known yet).
        self.sending = False
        #: Ctrl-C came: stop taking records and report.
        self.interrupted = False
        #: Appends whose outcome was not known when the report was made.
        self.unknown = 0

    def add(self, future: asyncio.Future[Position]) -> None:
        self._pending.append(future)
        while self._pending and self._pending[0].done():
            self._take(self._pending.popleft())

    async def settle(self, wait_s: float | None = None) -> None:
        """Wait for every append sent (at most ``wait_s``); each outcome is taken (none left
        unretrieved); those still pending after ``wait_s`` stay, counted in ``unknown``."""
        if self._pending and (wait_s is None or wait_s > 0):
            await asyncio.wait(self._pending, timeout=wait_s)
        while self._pending and self._pending[0].done():
            self._take(self._pending.popleft())
        for future in self._pending:  # an outcome after the report: retrieved, not told
            future.add_done_callback(_retrieved)
        self.unknown = len(self._pending)

    def progress(self) -> str:
        """How far the appends are, for a progress line."""
        last = f" (last {self.last})" if self.last is not None else ""
        return f"{self.count} {_records(self.count)} appended{last}, {len(self._pending)} in flight"

    def interrupted_report(self) -> str:
        """The line Ctrl-C prints: which records went in, which may have, which did not."""
        span = f" ({self.first} .. {self.last})" if self.first is not None else ""
        line = f"interrupted: appended {self.count} of the records read{span}"
        if self.failure is not None:
            line += f"; the next append failed: {self.failure}"
        if self.unknown:
            line += (
                f"; {self.unknown} more {'was' if self.unknown == 1 else 'were'} in "
                f"flight, outcome unknown"
            )
        return line + "; the rest were not written"

    def _take(self, future: asyncio.Future[Position]) -> None:
        error = future.exception() if not future.cancelled() else asyncio.CancelledError()
        if error is not None:
            self.failure = self.failure or error
            return
        if self.failure is not None:
            return  # acknowledged after an earlier one failed: not part of the prefix told
        position = future.result()
        self.count += 1
        self.first = self.first or position
        self.last = position
        if self._echo:
            click.echo(str(position))

    def report(self, name: str) -> None:
        span = f" ({self.first} to {self.last})" if self.first is not None else ""
        done = f"appended {self.count} {_records(self.count)} to {name}{span}"
        if self.failure is None:
            click.echo(done, err=True)
            return
        raise CommandError(f"{done}; the next append failed: {self.failure}")


def _retrieved(future: asyncio.Future[Position]) -> None:
    if not future.cancelled():
        future.exception()


def _records(count: int) -> str:
    return "record" if count == 1 else "records"
