"""Ledger writers in a client process of their own, which the ``client-kill`` nemesis kills.

A killed client is the application crash of BookKeeper's model: its ledgers stay open with
entries in flight, and whoever reads them next must recover them (fencing and sealing). The
child (``bkeeper verify-client URI SEED NAME``, a hidden command:
:func:`~bkeeper.verify.client_child.run_client_process`) runs the ledger workload's writers
(:meth:`~bkeeper.verify.workload.LedgerWorkload.run_writers`) and writes each operation to its
standard output as one JSON line (:class:`StreamHistory`, flushed per line, and an append's
``invoke`` before the append is sent: what the child sent is on record even if it is killed a
moment later). :class:`ClientProcess`, in the harness, starts it, copies its lines into the
run's :class:`~bkeeper.verify.history.History` under the child's name
(:meth:`ClientProcess.start` returns once the child says it is writing: :data:`READY`), and
kills it (SIGKILL) or stops it (its standard input closed: it closes its ledgers and exits).

Limits: a line longer than :data:`LINE_BYTES_MAX` ends the copy with an error (the child is
ours: such a line is a bug).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, TextIO

from bkeeper.common.errors import BKeeperError
from bkeeper.common.tasks import within
from bkeeper.verify.history import History, Op, OpType

__all__ = [
    "LINE_BYTES_MAX",
    "READY",
    "START_TIMEOUT_S",
    "ClientProcess",
    "StreamHistory",
]

log = logging.getLogger(__name__)

#: The longest line the harness accepts from a client process.
LINE_BYTES_MAX = 64 * 1024
#: The line a child writes once it sent its first append (it is writing: a kill now is one
#: in mid-write).
READY = b'{"ready":true}\n'
#: Seconds a child has to start and connect.
START_TIMEOUT_S = 60.0
#: Seconds a stopped client process has to close its ledgers and exit before it is killed.
STOP_TIMEOUT_S = 30.0
_TYPES = ("invoke", "ok", "fail", "info")


class StreamHistory(History):
    """A history that writes each operation to ``out`` as a JSON line, flushed, and keeps
    none (the harness keeps them)."""

    def __init__(self, out: TextIO) -> None:
        super().__init__()
        self._out = out
        self._count = 0

    def add(
        self,
        process: str,
        type_: OpType,
        f: str,
        *,
        ledger: int = -1,
        entry: int = -1,
        value: str = "",
        error: str = "",
    ) -> Op:
        fields = {
            "process": process,
            "type": type_,
            "f": f,
            "ledger": ledger,
            "entry": entry,
            "value": value,
            "error": error,
        }
        self._out.write(json.dumps(fields, separators=(",", ":")) + "\n")
        self._out.flush()
        self._count += 1
        return Op(self._count - 1, 0.0, process, type_, f, ledger, entry, value, error)


class ClientProcess:
    """One client process (module doc): :meth:`start`, then :meth:`kill` or :meth:`stop`."""

    def __init__(
        self,
        uri: str,
        seed: int,
        name: str,
        history: History,
        log_path: str,
        *,
        on_created: Callable[[int], None],
        on_create_sent: Callable[[int], None] = lambda _ledger: None,
    ) -> None:
        self.uri = uri
        self.seed = seed
        self.name = name
        self.history = history
        self.log_path = log_path
        self._on_created = on_created  # each ledger the child created (``create`` ok)
        # Each ledger id the child asked to create (``create`` invoked with its id): one
        # killed before the create's answer may have left the ledger in the cluster.
        self._on_create_sent = on_create_sent
        self._proc: asyncio.subprocess.Process | None = None
        self._copy: asyncio.Task[None] | None = None
        self._ready = asyncio.Event()

    async def start(self) -> None:
        """Start the child; return once it is writing (:data:`READY`). ``BKeeperError``
        when it exits first or is not ready within :data:`START_TIMEOUT_S` (then killed)."""
        with open(self.log_path, "ab") as err:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "bkeeper",
                "verify-client",
                self.uri,
                str(self.seed),
                self.name,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
                limit=LINE_BYTES_MAX,
            )
        self._copy = asyncio.create_task(self._copy_lines())
        ready = asyncio.create_task(self._ready.wait())
        try:
            await asyncio.wait(
                {ready, self._copy}, timeout=START_TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            ready.cancel()
        if not self._ready.is_set():
            await self.kill()  # (raises the copy's error, if it had one)
            raise BKeeperError(
                f"client process {self.name} not writing within {START_TIMEOUT_S:g} s "
                f"(exit code {self._require().returncode}; see {self.log_path})"
            )

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def running_pid(self) -> int | None:
        """The child's pid while it has not been reaped (None once it has, or before it
        started): what a stop may still signal."""
        proc = self._proc
        return None if proc is None or proc.returncode is not None else proc.pid

    async def kill(self) -> None:
        """SIGKILL the child (if it was started); every line it wrote before is still
        copied."""
        proc = self._proc
        if proc is None:
            return
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
        await self._copied()

    async def stop(self) -> None:
        """Close the child's standard input (it finishes and exits); kill it if it does not
        within :data:`STOP_TIMEOUT_S`."""
        proc = self._require()
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            await within(proc.wait(), STOP_TIMEOUT_S)
        except TimeoutError:
            log.warning(
                "client process %s did not stop within %g s: killed", self.name, STOP_TIMEOUT_S
            )
            await self.kill()
            return
        await self._copied()

    def _require(self) -> asyncio.subprocess.Process:
        if self._proc is None:
            raise BKeeperError(f"client process {self.name} was never started")
        return self._proc

    async def _copied(self) -> None:
        if self._copy is not None:
            await self._copy  # a malformed line: raised here

    async def _copy_lines(self) -> None:
        proc = self._require()
        assert proc.stdout is not None
        while True:
            try:
                line = await proc.stdout.readline()
            except ValueError as exc:  # longer than the limit
                raise BKeeperError(f"client process {self.name}: {exc}") from exc
            if not line:
                return
            if line == READY:
                self._ready.set()
                continue
            self.record_line(line)

    def record_line(self, line: bytes) -> None:
        """One line of the child's into the history (module doc)."""
        try:
            fields: Any = json.loads(line)
            type_, f = fields["type"], str(fields["f"])
            if type_ not in _TYPES:
                raise ValueError(f"type {type_!r}")
            ledger, entry = int(fields["ledger"]), int(fields["entry"])
            value, error = str(fields["value"]), str(fields["error"])
            process = f"{self.name}/{fields['process']}"
        except (ValueError, KeyError, TypeError) as exc:
            raise BKeeperError(
                f"client process {self.name} wrote a line that is not an operation: "
                f"{line[:200]!r} ({exc})"
            ) from exc
        self.history.add(process, type_, f, ledger=ledger, entry=entry, value=value, error=error)
        if f == "create" and type_ == "invoke" and ledger >= 0:
            self._on_create_sent(ledger)
        if f == "create" and type_ == "ok":
            self._on_created(ledger)
