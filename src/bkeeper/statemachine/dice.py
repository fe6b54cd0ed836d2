"""The replicated "Dice" application of the BookKeeper tutorial, on the state machine framework.

Dice is a :class:`~bkeeper.statemachine.machine.StateMachine` whose commands are die values
and whose ``apply`` prints them; :class:`~bkeeper.statemachine.machine.ReplicatedStateMachine`
does the election, terms, catch-up and tailing described below.

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
from typing import BinaryIO

from bkeeper.common.errors import BKeeperError, ConfigError
from bkeeper.common.rand import new_rng
from bkeeper.meta.store import NodeStore
from bkeeper.namedlog import NamedLogs, Position
from bkeeper.statemachine.machine import ReplicatedStateMachine
from bkeeper.statemachine.protocol import RsmConfig, election_path

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
        self._config = config or DiceConfig()
        self._out = out
        self._rng = rng or new_rng()
        self.values: list[tuple[int, int, str]] = []  # (value, epoch, role) as printed
        self.rsm = ReplicatedStateMachine(
            logs,
            store,
            self,
            RsmConfig(
                log_name=self._config.log_name,
                candidate=self._config.candidate.encode(),
                append_timeout_s=self._config.append_timeout_s,
                retry_pause_s=min(self._config.period_s, 1.0),
            ),
            before_open_writer=before_open_writer,
        )

    @property
    def leading(self) -> bool:
        """True while this process holds the log's writer and rolls."""
        return self.rsm.leading

    @property
    def fenced(self) -> int:
        """Times this process's writer was fenced while it led (another writer took over)."""
        return self.rsm.fenced

    @property
    def refused(self) -> int:
        """Times its writer was refused because a newer leader holds the log."""
        return self.rsm.refused

    # -- the state machine: a die value per command, printed when applied -------------
    def apply(self, command: bytes, position: Position) -> None:
        try:
            value = int(command)
        except ValueError:
            log.warning("record at %s is not a die value: %r", position, command)
            return
        role = self.rsm.role
        self.values.append((value, position.ledger_id, role))
        self._out(f"Value = {value}, epoch = {position.ledger_id}, {role}")

    def write_snapshot(self, out: BinaryIO) -> None:
        """Dice keeps no state beyond what it printed: an empty snapshot."""

    def restore_snapshot(self, source: BinaryIO) -> None:
        """Nothing to restore (see ``write_snapshot``)."""

    # -- the process -------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        roller = asyncio.ensure_future(self._roll(stop))
        try:
            await self.rsm.run(stop)
        finally:
            roller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await roller

    async def _roll(self, stop: asyncio.Event) -> None:
        """While leading, roll a die every period; a value is printed once applied."""
        period = self._config.period_s
        while not stop.is_set():
            await self.rsm.wait_leading()
            try:
                await self.rsm.submit(b"%d" % self._rng.randint(1, 6))
            except BKeeperError as exc:  # not leading any more: wait to lead again
                log.info("roll failed: %s", exc)
                continue
            await asyncio.sleep(period)
