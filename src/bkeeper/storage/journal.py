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
queued; beyond that :meth:`append_locked` raises ``TooManyRequestsError``. Files roll when the
next group would take the file past ``journal_file_bytes_max``.

Failure: if a write or fdatasync fails, the group's tokens get ``on_durable(tokens, exc)``;
the journal never writes again (a later good group after a torn one would look like
corruption in the middle on replay), fails every later group the same way and makes
:meth:`append_locked` raise ``BookieIOError``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from bkeeper.common.errors import BookieIOError, TooManyRequestsError
from bkeeper.storage.config import StorageConfig
from bkeeper.storage.filesystem import BytesLike, FileSystem, WritableFile
from bkeeper.storage.journal_format import (
    FILE_HEADER_BYTES,
    GROUP_HEADER_BYTES,
    encode_file_header,
    encode_group_header,
    journal_file_name,
)

__all__ = ["DurableCallback", "Journal", "JournalPosition"]

log = logging.getLogger(__name__)

DurableCallback = Callable[[list[object], BaseException | None], None]


class JournalPosition(NamedTuple):
    """A group boundary in the journal: file id and byte offset."""

    file_id: int
    offset: int


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
    ) -> None:
        self._fs = fs
        self._directory = directory
        self._config = config
        self._cond = threading.Condition(lock)
        self._on_durable = on_durable
        self._buf = bytearray(GROUP_HEADER_BYTES)
        self._tokens: list[object] = []
        self._records = 0
        self._idle = False
        self._closing = False
        self._aborted = False
        self._failed: BaseException | None = None
        self._group_due = 0.0
        self._file_id = file_id
        self._file: WritableFile | None = None
        self._seq = 0
        self._file_bytes = 0
        self.durable_position = JournalPosition(file_id, FILE_HEADER_BYTES)
        self.groups_written = 0
        self._thread = threading.Thread(target=self._run, name="bkeeper-journal", daemon=True)

    # -- caller side -------------------------------------------------------------------
    def start(self) -> None:
        """Create the first journal file and start the journal thread."""
        self._file = self._create_file(self._file_id)
        self._thread.start()

    def append_locked(self, header: bytes, payload: BytesLike, token: object | None) -> None:
        """Queue one framed record. The caller holds the lock given to the constructor."""
        if self._failed is not None or self._closing:
            raise BookieIOError("journal is not writable") from self._failed
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

    def fail(self, error: BaseException) -> None:
        """Stop accepting records (another part of the engine failed)."""
        with self._cond:
            if self._failed is None:
                self._failed = error

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
            self._cond.notify()
        self._join()

    def abort(self) -> None:
        """Stop the thread without writing what is queued (process death, for tests)."""
        with self._cond:
            self._closing = True
            self._aborted = True
            self._cond.notify()
        self._join()

    def _join(self) -> None:
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()
        if self._file is not None:
            self._file.close()
            self._file = None

    # -- journal thread ----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            group = self._take_group()
            if group is None:
                return
            buf, tokens, count = group
            error = self._failed if self._failed is not None else self._write_group(buf, count)
            if tokens:
                try:
                    self._on_durable(tokens, error)
                except Exception:
                    log.exception("on_durable callback failed")

    def _take_group(self) -> tuple[bytearray, list[object], int] | None:
        config = self._config
        woke_idle = False
        with self._cond:
            while True:
                if self._aborted:
                    return None
                if self._records:
                    wait_s = self._group_due - time.monotonic()
                    if (
                        woke_idle  # the first record after a quiet spell goes out at once
                        or wait_s <= 0
                        or self._closing
                        or self._records >= config.journal_group_entries_max
                        or len(self._buf) >= config.journal_group_bytes_max
                    ):
                        break
                    self._cond.wait(wait_s)
                elif self._closing:
                    return None
                else:
                    self._idle = True
                    self._cond.wait()
                    self._idle = False
                    woke_idle = True
            group = (self._buf, self._tokens, self._records)
            self._buf = bytearray(GROUP_HEADER_BYTES)
            self._tokens = []
            self._records = 0
        self._group_due = time.monotonic() + config.journal_max_group_wait_s
        return group

    def _write_group(self, buf: bytearray, count: int) -> BaseException | None:
        try:
            file = self._file
            assert file is not None
            if self._seq > 0 and self._file_bytes + len(buf) > self._config.journal_file_bytes_max:
                file = self._roll()
            buf[:GROUP_HEADER_BYTES] = encode_group_header(
                self._seq, len(buf) - GROUP_HEADER_BYTES, count
            )
            file.write(buf)
            file.sync()
        except Exception as exc:  # any failure here leaves the file in an unknown state
            self._failed = exc
            log.error("journal write failed, journal stopped: %s", exc)
            return exc
        self._seq += 1
        self._file_bytes += len(buf)
        self.groups_written += 1
        self.durable_position = JournalPosition(self._file_id, self._file_bytes)
        return None

    def _roll(self) -> WritableFile:
        old = self._file
        self._file_id += 1
        self._file = self._create_file(self._file_id)
        self._seq = 0
        self.durable_position = JournalPosition(self._file_id, FILE_HEADER_BYTES)
        if old is not None:
            old.close()
        return self._file

    def _create_file(self, file_id: int) -> WritableFile:
        path = os.path.join(self._directory, journal_file_name(file_id))
        file = self._fs.open_append(path)
        file.write(encode_file_header(file_id))
        file.sync()
        self._fs.fsync_dir(self._directory)
        self._file_bytes = FILE_HEADER_BYTES
        return file
