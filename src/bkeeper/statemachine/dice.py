"""The replicated "Dice" application of the BookKeeper tutorial, on named logs.

Every Dice process joins a leader election on the metadata store and reads the log from its
start. The leader rolls a die every ``period_s`` and appends the value; it prints a value
only once the append is acknowledged (durable on an ack quorum). Followers tail the log
without fencing and print what they read. A process that wins the election first opens the
log's writer, which fences the previous leader (its next append fails), then prints the
values it has not seen yet ("catchup") before rolling. A leader that loses its session
(paused past the session timeout) loses leadership; when it runs again its appends fail
because its ledger was fenced, and it goes back to following.

Leadership terms: a process that finds itself leader takes its election node's sequence
number as its term (:attr:`LeaderElection.sequence`, higher for every later leader) and opens
the writer with it. The log records the term before the previous writer is fenced, and refuses
an older term before it fences anything (:class:`WriterTermError`): a process paused between
its leadership check and ``open_writer`` that resumes after another took over cannot fence
the new leader; it resigns and follows again.

So every process prints, in order, a prefix of the one sequence of values in the log, and
no value rolled by a leader after it was fenced. Each line reads
``Value = N, epoch = L, leading|following|catchup``, where the epoch is the ledger the value
was written to (one per leader term and roll).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from bkeeper.common.errors import (
    BKeeperError,
    ConfigError,
    LogExistsError,
    LogFencedError,
    WriterTermError,
)
from bkeeper.meta.election import LeaderElection
from bkeeper.meta.store import NodeStore, join_path
from bkeeper.namedlog import (
    EARLIEST,
    LogReader,
    NamedLog,
    NamedLogs,
    Position,
    Record,
    logs_root,
)

__all__ = ["Dice", "DiceConfig", "election_path"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DiceConfig:
    log_name: str = "dice"
    period_s: float = 1.0
    candidate: str = "dice"
    append_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 0.001 <= self.period_s <= 3600:
            raise ConfigError(f"period_s: must be 0.001..3600, got {self.period_s!r}")
        if self.append_timeout_s <= 0:
            raise ConfigError(f"append_timeout_s: must be positive, got {self.append_timeout_s}")


def election_path(ledgers_root: str, log_name: str) -> str:
    """Where the Dice processes of ``log_name`` hold their election."""
    return join_path(logs_root(ledgers_root).rpartition("/")[0], "elections", log_name)


class Dice:
    """One Dice process. ``await Dice(...).run(stop)`` until ``stop`` is set."""

    def __init__(
        self,
        logs: NamedLogs,
        store: NodeStore,
        config: DiceConfig | None = None,
        out: Callable[[str], None] = print,
        rng: random.Random | None = None,
        *,
        before_open_writer: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``before_open_writer``: awaited between the leadership check and
        ``open_writer`` (a test hook: a pause placed exactly there)."""
        self._logs = logs
        self._store = store
        self._config = config or DiceConfig()
        self._out = out
        self._rng = rng or random.Random()
        self._before_open_writer = before_open_writer
        self._printed: Position | None = None
        self.values: list[tuple[int, int, str]] = []  # (value, epoch, role) as printed
        #: True while this process holds the log's writer and rolls.
        self.leading = False
        #: Times this process's writer was fenced while it led (another writer took over).
        self.fenced = 0
        #: Times its writer was refused because a newer leader holds the log.
        self.refused = 0

    def _print(self, value: int, position: Position, role: str) -> None:
        if self._printed is not None and position <= self._printed:
            return  # seen already (a leader reading back its own rolls)
        self._printed = position
        self.values.append((value, position.ledger_id, role))
        self._out(f"Value = {value}, epoch = {position.ledger_id}, {role}")

    def _show(self, record: Record, role: str) -> None:
        try:
            value = int(record.payload)
        except ValueError:
            log.warning("record at %s is not a die value: %r", record.position, record.payload)
            return
        self._print(value, record.position, role)

    async def run(self, stop: asyncio.Event) -> None:
        config = self._config
        with contextlib.suppress(LogExistsError):
            await self._logs.create(config.log_name)
        named = self._logs.log(config.log_name)
        directory = election_path(self._logs.bk.cluster.root, config.log_name)
        reader = await named.open_reader(EARLIEST)
        election = self._candidate(directory)
        await election.start()
        try:
            while not stop.is_set():
                try:
                    await self._follow(reader, election, stop)
                    if stop.is_set():
                        break
                    if not await self._confirmed(election):
                        await asyncio.sleep(0.05)
                        continue
                    term = election.sequence
                    if term is None:  # lost it since the check
                        continue
                    if self._before_open_writer is not None:
                        await self._before_open_writer()
                    fenced = await self._lead(named, reader, election, stop, term)
                except BKeeperError as exc:  # the store or bookies failed: try again shortly
                    log.warning("dice: %s", exc)
                    await asyncio.sleep(min(self._config.period_s, 1.0))
                    continue
                if fenced:
                    # Fenced by another writer while this process thought it led: its view
                    # of the election is stale. Resign and queue again behind the others.
                    await election.aclose()
                    election = self._candidate(directory)
                    await election.start()
        finally:
            await election.aclose()
            await reader.close()

    def _candidate(self, directory: str) -> LeaderElection:
        return LeaderElection(self._store, directory, self._config.candidate.encode())

    async def _confirmed(self, election: LeaderElection) -> bool:
        """Leadership as the store sees it now (a paused process may still believe it)."""
        try:
            holder = await election.leader()
        except BKeeperError:
            return False
        return election.is_leader and holder == self._config.candidate.encode()

    async def _follow(
        self, reader: LogReader, election: LeaderElection, stop: asyncio.Event
    ) -> None:
        while not election.is_leader and not stop.is_set():
            record = await reader.next(0.1)
            if record is not None:
                self._show(record, "following")

    async def _lead(
        self,
        named: NamedLog,
        reader: LogReader,
        election: LeaderElection,
        stop: asyncio.Event,
        term: int,
    ) -> bool:
        """Lead until leadership ends; True when another writer fenced this one, or a newer
        leader holds the log (the process then queues again)."""
        try:
            writer = await named.open_writer(term=term)
        except WriterTermError as exc:
            self.refused += 1
            log.warning("not taking over the log: %s", exc)
            return True
        except BKeeperError as exc:
            log.warning("could not take over the log: %s", exc)
            await asyncio.sleep(self._config.period_s)
            return False
        try:
            end = await named.last_position()
            while end is not None and (self._printed is None or self._printed < end):
                if not election.is_leader or stop.is_set():
                    return False
                record = await reader.next(0.5)
                if record is not None:
                    self._show(record, "catchup")
            self.leading = True
            while election.is_leader and not stop.is_set():
                value = self._rng.randint(1, 6)
                try:
                    position = await asyncio.wait_for(
                        writer.append(b"%d" % value), self._config.append_timeout_s
                    )
                except LogFencedError:
                    self.fenced += 1
                    log.warning("fenced: another process leads now")
                    return True
                except (BKeeperError, TimeoutError) as exc:
                    log.warning("roll failed: %s", exc)
                    return False
                self._print(value, position, "leading")
                with contextlib.suppress(TimeoutError):
                    await election.wait_leadership_lost(self._config.period_s)
            return False
        finally:
            self.leading = False
            with contextlib.suppress(BKeeperError):
                await writer.close()
