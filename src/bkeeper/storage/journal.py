"""The journal writer: a bounded queue drained by one owned thread with group commit.

Callers (the event loop thread, holding the storage lock) append framed records with
:meth:`Journal.append_locked`, which only appends to a ``bytearray`` and a token list: no
syscall and no thread hand-off per record. The journal thread takes everything queued at
once as one group (see :mod:`bkeeper.storage.journal_format`), writes it with one write,
makes it durable with one fdatasync and then calls ``on_durable(tokens, None)`` once, from
the journal thread, with the tokens of that group in queue order.

When to write (group commit). An idle journal thread writes a new record at once, so a lone
add costs one fdatasync of latency. While records keep coming, the thread starts the next
group no sooner than ``journal_max_group_wait_ms`` after the previous group started, unless
the queue reaches ``journal_group_bytes_max`` or ``journal_group_entries_max`` first. So under
load a slow disk gives groups of whatever arrived during the previous fdatasync, and a fast
disk is held to at most one fdatasync per wait window: large groups, few syscalls, few
callbacks into the event loop. No record waits longer than the window plus one fdatasync.

Limits: at most ``journal_queue_entries_max`` records and ``journal_queue_bytes_max`` bytes
queued; beyond that :meth:`append_locked` raises ``TooManyRequestsError``. Files are created
when the first group is written to them (a bookie that never writes creates none) and roll
when the next group would take the file past ``journal_file_bytes_max``.

No room (see :mod:`bkeeper.storage.disk_space`): if a write or fdatasync fails for lack of
space, nothing of the group was acknowledged: its tokens get ``on_durable(tokens,
DiskFullError)``, the file is cut back to the end of the last durable group (durably, so
replay never sees a torn group followed by good ones) and reopened. While the disk has no
room, groups already queued fail the same way without a write, and :meth:`append_locked`
raises ``DiskFullError``; once space is freed the journal writes again.

Metrics (``metrics``, a :class:`~bkeeper.storage.metrics.JournalMetrics`, optional): per
group, never per record: entries and bytes, the fdatasync's time, and how long the group's
oldest record waited (from the previous cut, or from the idle thread's wake-up, to the cut).
The tokens handed to ``on_durable`` are a :class:`GroupTokens` list whose ``started_at`` is
that start (``clock.monotonic()``), so that the owner can time its requests per group too.

Failure: any other failed write or fdatasync (or a failure to cut the file back) fails the
group with the error; the journal never writes again (a later good group after a torn one
would look like corruption in the middle on replay), fails every later group the same way
and makes :meth:`append_locked` raise ``BookieIOError``.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
from collections.abc import Callable
from typing import NamedTuple

from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import BookieIOError, DiskFullError, TooManyRequestsError
from bkeeper.common.threads import OS_THREADS, Threads
from bkeeper.storage.config import StorageConfig
from bkeeper.storage.disk_space import DiskSpace, DiskState
from bkeeper.storage.filesystem import BytesLike, FileSystem, WritableFile, create_durably
from bkeeper.storage.journal_format import (
    FILE_HEADER_BYTES,
    GROUP_HEADER_BYTES,
    encode_file_header,
    encode_group_header,
    journal_file_name,
)
from bkeeper.storage.metrics import JournalMetrics

__all__ = ["DurableCallback", "GroupTokens", "Journal", "JournalPosition", "cut_reason"]

log = logging.getLogger(__name__)


class GroupTokens(list[object]):
    """The tokens of one group, in queue order, and when the group started gathering
    (``clock.monotonic()``: its oldest record was queued at or after that; set when the
    group is cut, before ``on_durable`` sees it). No ``__init__`` of its own: one is made
    per group, at the cost of a list."""

    __slots__ = ("started_at",)
    started_at: float


DurableCallback = Callable[[GroupTokens, BaseException | None], None]


class JournalPosition(NamedTuple):
    """A group boundary in the journal: file id and byte offset."""

    file_id: int
    offset: int


def cut_reason(
    config: StorageConfig,
    *,
    records: int,
    group_bytes: int,
    due_in_s: float,
    woke_idle: bool,
    closing: bool,
) -> str | None:
    """Why the queued records go out as a group now, or None to wait (``due_in_s`` more).

    ``idle``: the first record after a quiet spell goes out at once; ``closing``: drain;
    ``entries`` / ``bytes``: the group is full; ``window``: the wait window since the
    previous group started is over. Nothing queued: None."""
    if not records:
        return None
    if woke_idle:
        return "idle"
    if closing:
        return "closing"
    if records >= config.journal_group_entries_max:
        return "entries"
    if group_bytes >= config.journal_group_bytes_max:
        return "bytes"
    if due_in_s <= 0:
        return "window"
    return None


class _Roll:
    """What the journal thread takes instead of a group when it should roll while idle."""


_ROLL = _Roll()


class Journal:
    """Owns the journal files being written and the journal thread."""

    def __init__(
        self,
        fs: FileSystem,
        directory: str,
        config: StorageConfig,
        lock: threading.Lock,
        on_durable: DurableCallback,
        file_id: int,
        disk: DiskSpace | None = None,
        clock: Clock | None = None,
        metrics: JournalMetrics | None = None,
        threads: Threads | None = None,
    ) -> None:
        """``threads`` makes the journal's thread and condition (the OS's by default)."""
        threads = threads if threads is not None else OS_THREADS
        self._fs = fs
        self._metrics = metrics
        self._clock: Clock = clock if clock is not None else default_clock()
        self._disk = disk
        self._directory = directory
        self._config = config
        self._cond = threads.condition(lock)
        self._on_durable = on_durable
        self._buf = bytearray(GROUP_HEADER_BYTES)
        self._tokens = GroupTokens()
        self._group_started_at = self._clock.monotonic()
        self._records = 0
        self._idle = False
        self._closing = False
        self._aborted = False
        self._failed: BaseException | None = None
        self._no_room = False
        # Whether appends are refused (failed, closing or no room): one test on the hot path.
        self._refusing = False
        self._group_due = 0.0
        self._roll_wanted = False
        #: groups written, by why they were cut then (see :func:`cut_reason`)
        self.groups_cut: collections.Counter[str] = collections.Counter()
        self._file_id = file_id
        self._file: WritableFile | None = None
        self._seq = 0
        self._file_bytes = 0  # 0: the file is not created yet
        self.durable_position = JournalPosition(file_id, FILE_HEADER_BYTES)
        self.groups_written = 0
        #: Bytes of the groups made durable so far (read by other threads: a plain int).
        self.bytes_written = 0
        self._thread = threads.thread(self._run, "bkeeper-journal")
        if disk is not None:
            disk.add_listener(self._on_disk_state)
            self._no_room = self._refusing = disk.state is DiskState.NO_ROOM

    # -- caller side -------------------------------------------------------------------
    def start(self) -> None:
        """Start the journal thread (the first file is created by the first group)."""
        self._thread.start()

    def append_locked(self, header: bytes, payload: BytesLike, token: object | None) -> None:
        """Queue one framed record. The caller holds the lock given to the constructor."""
        if self._refusing:
            self._raise_refusal_locked()
        if (
            self._records >= self._config.journal_queue_entries_max
            or len(self._buf) + len(payload) > self._config.journal_queue_bytes_max
        ):
            raise TooManyRequestsError("journal queue is full")
        buf = self._buf
        buf += header
        buf += payload
        self._records += 1
        if token is not None:
            self._tokens.append(token)
        if self._idle:
            self._idle = False
            self._cond.notify()

    def open_run_locked(self) -> tuple[bytearray, int, int]:
        """For a writer that frames records into the queue itself (the caller holds the lock,
        and holds it until :meth:`close_run_locked`): the queue's buffer, and how many more
        records and bytes it takes now. Raises as :meth:`append_locked` does while appends
        are refused. No token: see :meth:`append_token_locked`."""
        if self._refusing:
            self._raise_refusal_locked()
        config = self._config
        return (
            self._buf,
            config.journal_queue_entries_max - self._records,
            config.journal_queue_bytes_max - len(self._buf),
        )

    def close_run_locked(self, count: int) -> None:
        """``count`` framed records were appended to the buffer :meth:`open_run_locked` gave,
        within the room it said."""
        self._records += count
        if self._idle:
            self._idle = False
            self._cond.notify()

    def append_token_locked(self, token: object) -> None:
        """Queue a token after the records queued so far: it comes back with the group that
        makes them durable."""
        self._tokens.append(token)

    def _raise_refusal_locked(self) -> None:
        if self._failed is not None or self._closing:
            raise BookieIOError("journal is not writable") from self._failed
        raise DiskFullError("no space left on the data disk: writes are refused until it is freed")

    def _update_refusing_locked(self) -> None:
        self._refusing = self._failed is not None or self._closing or self._no_room

    def _on_disk_state(self, state: DiskState) -> None:
        with self._cond:
            self._no_room = state is DiskState.NO_ROOM
            self._update_refusing_locked()

    def fail(self, error: BaseException) -> None:
        """Stop accepting records (another part of the engine failed)."""
        with self._cond:
            if self._failed is None:
                self._failed = error
            self._update_refusing_locked()

    @property
    def failed(self) -> bool:
        return self._failed is not None

    @property
    def file_id(self) -> int:
        """The id of the file being written."""
        return self._file_id

    def close(self) -> None:
        """Write everything queued (callbacks fired), then stop the thread."""
        with self._cond:
            self._closing = True
            self._update_refusing_locked()
            self._cond.notify()
        self._join()

    def abort(self) -> None:
        """Stop the thread without writing what is queued (process death, for tests)."""
        with self._cond:
            self._closing = True
            self._aborted = True
            self._update_refusing_locked()
            self._cond.notify()
        self._join()

    def _join(self) -> None:
        if self._thread.is_alive() and not self._thread.is_current():
            self._thread.join()
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- journal thread ----------------------------------------------------------------
    def request_roll(self) -> None:
        """Start a new file at the next opportunity: at once when idle, else before the
        next group. A checkpoint asks for this once the current file is large, so that the
        next checkpoint can delete it (an idle journal would otherwise keep its last file,
        up to ``journal_file_bytes_max``, for good)."""
        with self._cond:
            self._roll_wanted = True
            self._cond.notify_all()

    @property
    def queued_records(self) -> int:
        """Records queued and not yet taken into a group (read without the lock: a gauge)."""
        return self._records

    @property
    def idle(self) -> bool:
        """The thread waits with nothing queued, every group's ``on_durable`` called (read
        without the lock: set by the thread after the callbacks, cleared by an append).
        What a virtual-time test loop asks before it lets time jump."""
        return self._idle

    @property
    def file_bytes(self) -> int:
        """Bytes in the file being written (0: not created yet)."""
        return self._file_bytes

    def _run(self) -> None:
        while True:
            group = self._take_group()
            if group is None:
                return
            if isinstance(group, _Roll):
                self._roll_idle()
                continue
            buf, tokens, count, refused = group
            error = refused if refused is not None else self._write_group(buf, count)
            if tokens:
                try:
                    self._on_durable(tokens, error)
                except Exception:
                    log.exception("on_durable callback failed")

    def _take_group(
        self,
    ) -> tuple[bytearray, GroupTokens, int, BaseException | None] | _Roll | None:
        """The next group, and the error to fail it with instead of writing it (failed, or
        no room); None when the thread must stop."""
        config = self._config
        woke_idle = False
        with self._cond:
            while True:
                if self._aborted:
                    return None
                if self._records:
                    wait_s = self._group_due - self._clock.monotonic()
                    reason = cut_reason(
                        config,
                        records=self._records,
                        group_bytes=len(self._buf),
                        due_in_s=wait_s,
                        woke_idle=woke_idle,
                        closing=self._closing,
                    )
                    if reason is not None:
                        self.groups_cut[reason] += 1
                        break
                    self._cond.wait(wait_s)
                elif self._closing:
                    return None
                elif self._roll_wanted:
                    self._roll_wanted = False
                    return _ROLL
                else:
                    self._idle = True
                    self._cond.wait()
                    self._idle = False
                    woke_idle = True
                    self._group_started_at = self._clock.monotonic()
            refused: BaseException | None = self._failed
            if refused is None and self._no_room:
                refused = DiskFullError("no space left on the data disk: the group is not written")
            buf, tokens, records = self._buf, self._tokens, self._records
            self._buf = bytearray(GROUP_HEADER_BYTES)
            self._tokens = GroupTokens()
            self._records = 0
        now = self._clock.monotonic()
        tokens.started_at = started_at = self._group_started_at
        self._group_started_at = now  # the next group gathers from now on
        self._group_due = now + config.journal_max_group_wait_s
        metrics = self._metrics
        if metrics is not None:
            metrics.group_entries.observe(records)
            metrics.group_bytes.observe(len(buf))
            metrics.queue_wait.observe(now - started_at)
        return buf, tokens, records, refused

    def _write_group(self, buf: bytearray, count: int) -> BaseException | None:
        try:
            file = self._writable_file(len(buf))
            buf[:GROUP_HEADER_BYTES] = encode_group_header(
                self._seq, len(buf) - GROUP_HEADER_BYTES, count
            )
            file.write(buf)
            if self._metrics is None:
                file.sync()
            else:
                synced_from = self._clock.monotonic()
                file.sync()
                self._metrics.fsync_latency.observe(self._clock.monotonic() - synced_from)
        except Exception as exc:  # any failure here leaves the file in an unknown state
            return self._write_failed(exc, count)
        self._seq += 1
        self._file_bytes += len(buf)
        self.groups_written += 1
        self.bytes_written += len(buf)
        self.durable_position = JournalPosition(self._file_id, self._file_bytes)
        if self._disk is not None:
            self._disk.note_written(len(buf))
        return None

    def _write_failed(self, exc: Exception, count: int) -> BaseException:
        """Cut the file back to its last durable group; no room: refuse until space is freed,
        anything else: stop for good. Returns the error the group's tokens get."""
        try:
            self._discard_unsynced()
            no_room = self._disk is not None and self._disk.explains(exc)
        except Exception as repair:
            log.error(
                "journal write failed (%s) and the file could not be cut back: %s", exc, repair
            )
            no_room, exc = False, repair
        if not no_room:
            with self._cond:
                self._failed = exc
                self._update_refusing_locked()
            log.error("journal write failed, journal stopped: %s", exc)
            return exc
        with self._cond:
            self._no_room = True
            self._update_refusing_locked()
        assert self._disk is not None
        self._disk.report_no_space()
        log.warning("journal: no space for a group of %d records (%s): writes refused", count, exc)
        error = DiskFullError(f"no space left on the data disk: the group is not written ({exc})")
        error.__cause__ = exc
        return error

    def _discard_unsynced(self) -> None:
        """After a failed write or fdatasync: cut the file back to the end of its last durable
        group, durably, and drop the handle (a handle whose fdatasync failed is not trusted:
        the next group reopens the file)."""
        file, self._file = self._file, None
        if file is None:
            return
        file.close()
        self._fs.truncate(file.path, self._file_bytes)

    def _writable_file(self, group_bytes: int) -> WritableFile:
        """The file the next group goes to: created on first use, reopened after a failed
        write, rolled when the group would take it past its size limit."""
        too_big = self._file_bytes + group_bytes > self._config.journal_file_bytes_max
        if self._seq > 0 and (too_big or self._roll_wanted):
            self._roll_wanted = False
            if self._file is not None:
                self._file.close()  # every group in it is durable
                self._file = None
            self._file_id += 1
            self._seq = 0
            self._file_bytes = 0
        if self._file is not None:
            return self._file
        path = os.path.join(self._directory, journal_file_name(self._file_id))
        if self._file_bytes:
            self._file = self._fs.open_append(path)
        else:
            self._file = self._create_file(path)
            self._file_bytes = FILE_HEADER_BYTES
        return self._file

    def _roll_idle(self) -> None:
        """Roll while no group is being written: the new file is created at once, so that
        the durable position (the next checkpoint's mark) moves past the old one."""
        if self._seq == 0 or self._failed is not None or self._no_room:
            return  # nothing in the current file yet, or no writing now
        if self._file is not None:
            self._file.close()
            self._file = None
        self._file_id += 1
        self._seq = 0
        self._file_bytes = 0
        path = os.path.join(self._directory, journal_file_name(self._file_id))
        try:
            self._file = self._create_file(path)
        except Exception as exc:
            log.warning("journal %s: new file not created now (the next group does): %s", path, exc)
            return
        self._file_bytes = FILE_HEADER_BYTES
        self.durable_position = JournalPosition(self._file_id, FILE_HEADER_BYTES)

    def _create_file(self, path: str) -> WritableFile:
        """Create a journal file with its header, durably; on failure remove what was made."""
        return create_durably(self._fs, self._directory, path, encode_file_header(self._file_id))
