"""The under-replication queue of autorecovery, in Apache BookKeeper's ZooKeeper layout.

Under ``<root>/underreplication``:

* ``LAYOUT``: protobuf text of ``LedgerRereplicationLayoutFormat {type: "BASIC" version: 1}``;
* ``ledgers/<%04x>/<%04x>/<%04x>/<%04x>/urL<%010d>``: one persistent node per
  under-replicated ledger (the id's four 16-bit groups in hex), holding the protobuf text of
  ``UnderreplicatedLedgerFormat {replica: <bookie that lost it>... ctime: <ms>}``;
* ``locks/urL<%010d>``: ephemeral, a replication worker is on that ledger (``LockDataFormat``);
* ``disable``: present while autorecovery is disabled;
* ``auditorelection/V_<seq>``: the auditor election (``AuditorVoteFormat``);
* ``blocked/urL<%010d>``: ours, not Java's: why a queued ledger is not being repaired
  (:class:`BlockedReason`, JSON text). Java's ``UnderreplicatedLedgerFormat`` has no field
  for it and Java reads the marks with ``TextFormat.merge``, which refuses unknown fields, so
  the reason lives beside the mark; Java's auditor and workers never look under
  ``blocked/``. A worker writes it when an attempt leaves the ledger queued (only when the
  reason changes) and removes it with the mark; one left behind (the ledger repaired by a
  Java worker, or deleted) is removed by :meth:`UnderReplicationManager.prune_blocked`;
* ``lostBookieRecoveryDelay``: seconds the auditor waits after a bookie is lost, as decimal
  text (``b"30"``, Java's ``Integer.toString``); any write of it (``triggeraudit`` rewrites the
  same value) makes the auditor audit at once;
* ``checkallledgersctime``, ``placementpolicycheckctime``, ``replicascheckctime``: when each
  periodic check last ran (ms), as *binary* protobuf (``CheckAllLedgersFormat`` etc.; Java
  writes these with ``toByteArray``, unlike the text formats above).

Invariants: marking merges replica lists under compare-and-set (``cas_update``, at most
``mark_attempts_max`` tries); a worker deletes a marker only at the version it saw when it
took the lock, so a ledger marked again meanwhile stays queued; empty hex directories are
pruned.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from dataclasses import dataclass

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from bkeeper.common.cas import cas_update
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import (
    ConfigError,
    ConnectionLossError,
    MetadataClosedError,
    MetadataError,
    MetadataVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    ProtocolError,
    SessionExpiredError,
)
from bkeeper.common.ids import LedgerId
from bkeeper.common.validate import check_positive_ints
from bkeeper.meta.blocked_reason import BLOCKED, BlockedReason, ur_blocked_path
from bkeeper.meta.election import LeaderElection
from bkeeper.meta.events import Subscription
from bkeeper.meta.layout import LAYOUT, UNDERREPLICATION, ur_ledger_path, ur_lock_path
from bkeeper.meta.store import (
    ANY_VERSION,
    NodeStore,
    WatchEvent,
    WatchKind,
    join_path,
    parent_path,
)
from bkeeper.meta.ur_nodes import (
    CHECKS,
    DELAY_S_MAX,
    HEX_LEVELS,
    LOST_BOOKIE_RECOVERY_DELAY,
    UR_LAYOUT_TYPE,
    UR_LAYOUT_VERSION,
    check_node,
    is_hex,
    parse_delay,
    parse_text,
    text,
)
from bkeeper.wire._pb import data_formats_pb2 as pb

__all__ = [
    "BLOCKED",
    "CHECKS",
    "LOST_BOOKIE_RECOVERY_DELAY",
    "UR_LAYOUT_TYPE",
    "BlockedReason",
    "UnderReplicationConfig",
    "UnderReplicationManager",
    "UnderreplicatedLedger",
    "auditor_election",
    "ur_blocked_path",
]


@dataclass(frozen=True)
class UnderReplicationConfig:
    mark_attempts_max: int = 16

    def __post_init__(self) -> None:
        check_positive_ints(self, "mark_attempts_max")


@dataclass(frozen=True)
class UnderreplicatedLedger:
    ledger_id: LedgerId
    missing_replicas: tuple[str, ...]
    ctime_ms: int | None
    version: int


@dataclass(frozen=True)
class _Queued:
    """A ledger's queue entry as read for a compare-and-set round (None: not queued)."""

    entry: UnderreplicatedLedger | None


def auditor_election(store: NodeStore, root: str, bookie_id: str) -> LeaderElection:
    """The auditor election of the cluster under ``root``, with ``bookie_id`` as candidate."""
    vote = text_format.MessageToString(pb.AuditorVoteFormat(bookieId=bookie_id)).encode()
    directory = join_path(root, UNDERREPLICATION, "auditorelection")
    return LeaderElection(store, directory, vote, prefix="V_")


class UnderReplicationManager:
    """Mark, list, lock, release and remove under-replicated ledgers; the disable flag."""

    def __init__(
        self,
        store: NodeStore,
        root: str,
        *,
        clock: Clock | None = None,
        config: UnderReplicationConfig | None = None,
    ) -> None:
        self._store = store
        self._base = join_path(root, UNDERREPLICATION)
        self._root = root
        self._clock = clock or default_clock()
        self._config = config or UnderReplicationConfig()
        self._locked_versions: dict[int, int] = {}

    async def ensure_layout(self) -> None:
        """Create the layout nodes if missing; ``MetadataError`` if another layout is there."""
        layout = pb.LedgerRereplicationLayoutFormat(type=UR_LAYOUT_TYPE, version=UR_LAYOUT_VERSION)
        await self._create_if_missing(
            join_path(self._base, LAYOUT), text_format.MessageToString(layout).encode()
        )
        data, _version = await self._store.get(join_path(self._base, LAYOUT))
        found = parse_text(data, pb.LedgerRereplicationLayoutFormat())
        if (found.type, found.version) != (UR_LAYOUT_TYPE, UR_LAYOUT_VERSION):
            raise MetadataError(f"under-replication layout {found.type}:{found.version} unknown")
        for name in ("ledgers", "locks"):
            await self._create_if_missing(join_path(self._base, name), b"")

    async def mark_underreplicated(self, ledger_id: int, missing_replicas: Iterable[str]) -> None:
        """Queue ``ledger_id`` (or add to its missing replicas if queued already)."""
        replicas = list(dict.fromkeys(missing_replicas))

        async def read() -> _Queued:
            return _Queued(await self.get(ledger_id))

        async def attempt(queued: _Queued) -> None:
            try:
                if queued.entry is None:
                    await self._create_mark(ledger_id, replicas)
                else:
                    await self._merge(queued.entry, replicas)
            except (NodeExistsError, NoNodeError) as exc:
                # Marked, or unmarked (and its directory pruned), meanwhile: read it again.
                raise MetadataVersionError(str(exc)) from exc

        await cas_update(
            read,
            attempt,
            what=f"ledger {ledger_id}: marking it under-replicated",
            attempts_max=self._config.mark_attempts_max,
            current=_Queued(None),  # most marks are new: try to create before reading
        )

    async def get(self, ledger_id: int) -> UnderreplicatedLedger | None:
        """The queue entry of ``ledger_id``, or None if it is not queued."""
        try:
            data, version = await self._store.get(ur_ledger_path(self._root, ledger_id))
        except NoNodeError:
            return None
        message = parse_text(data, pb.UnderreplicatedLedgerFormat())
        ctime = message.ctime if message.HasField("ctime") else None
        return UnderreplicatedLedger(LedgerId(ledger_id), tuple(message.replica), ctime, version)

    async def ledger_ids(self) -> AsyncIterator[LedgerId]:
        """The ids of the queued ledgers (listings only: no mark is read)."""
        async for ledger_id in self._walk(join_path(self._base, "ledgers"), 0):
            yield ledger_id

    async def ledgers(self) -> AsyncIterator[UnderreplicatedLedger]:
        """Every queued ledger, ascending by id."""
        async for ledger_id in self._walk(join_path(self._base, "ledgers"), 0):
            entry = await self.get(ledger_id)
            if entry is not None:
                yield entry

    async def watch_queue(self, directories_max: int) -> list[Subscription[WatchEvent]] | None:
        """One-shot watches on what decides which queued ledgers a worker may take: the
        ``disable`` flag, the ``locks`` directory, and ``ledgers/`` with every hex directory
        below it (a new mark adds a child to one of them, or a new directory to its parent).
        Any event on any of them means "look again"; each watch is armed before its directory
        is listed, so nothing that changes after this call returns goes unseen. None (nothing
        left armed) when the tree holds more than ``directories_max`` directories: the caller
        polls instead. The caller closes the subscriptions."""
        subs: list[Subscription[WatchEvent]] = []
        try:
            subs.append(await self._store.watch(join_path(self._base, "disable")))
            locks = join_path(self._base, "locks")
            subs.append(await self._store.watch(locks, WatchKind.CHILDREN))
            pending = [(join_path(self._base, "ledgers"), 0)]
            while pending:
                if len(subs) - 2 >= directories_max:
                    for sub in subs:
                        sub.close()
                    return None
                directory, level = pending.pop()
                subs.append(await self._store.watch(directory, WatchKind.CHILDREN))
                if level == HEX_LEVELS:
                    continue  # a leaf: its children are marks, not directories
                try:
                    names = await self._store.children(directory)
                except NoNodeError:
                    continue  # its creation fires the watch just set
                pending.extend(
                    (join_path(directory, name), level + 1)
                    for name in names
                    if len(name) == 4 and is_hex(name)
                )
        except BaseException:
            for sub in subs:
                sub.close()
            raise
        return subs

    async def try_lock(self, ledger_id: int, holder: str) -> bool:
        """Take the replication lock of a queued ledger; False if locked or not queued."""
        return await self.lock(ledger_id, holder) is not None

    async def lock(self, ledger_id: int, holder: str) -> UnderreplicatedLedger | None:
        """Take the replication lock of a queued ledger and return its queue entry (read
        under the lock); None if another holds the lock or the ledger is not queued."""
        path = ur_lock_path(self._root, ledger_id)
        data = text(pb.LockDataFormat(bookieId=holder))
        try:
            await self._store.create(path, data, ephemeral=True, make_parents=True)
        except NodeExistsError:
            stat = await self._store.exists(path)
            if stat is None or stat.ephemeral_owner != self._store.session_id:
                return None
        entry = await self.get(ledger_id)
        if entry is None:
            await self.release(ledger_id)
            return None
        self._locked_versions[ledger_id] = entry.version
        return entry

    async def lock_next(self, holder: str) -> UnderreplicatedLedger | None:
        """Lock the first queued ledger nobody works on; None if there is none."""
        async for entry in self.ledgers():
            if await self.try_lock(entry.ledger_id, holder):
                return await self.get(entry.ledger_id) or entry
        return None

    async def release(self, ledger_id: int) -> None:
        """Give up the lock (the ledger stays queued)."""
        self._locked_versions.pop(ledger_id, None)
        with contextlib.suppress(NoNodeError):
            await self._store.delete(ur_lock_path(self._root, ledger_id))

    async def mark_replicated(self, ledger_id: int) -> None:
        """Remove the ledger from the queue (unless marked again since it was locked)."""
        path = ur_ledger_path(self._root, ledger_id)
        version = self._locked_versions.get(ledger_id, ANY_VERSION)
        try:
            await self._store.delete(path, version)
            await self._prune(parent_path(path))
            await self.clear_blocked(ledger_id)
        except (NoNodeError, MetadataVersionError):
            pass  # gone already, or marked again: it stays for another round
        finally:
            await self.release(ledger_id)

    # -- why a queued ledger is not being repaired (ours: module doc) ------------------------
    async def set_blocked(self, ledger_id: int, reason: BlockedReason) -> None:
        """Record why ``ledger_id`` is not being repaired (replacing what was there)."""
        await self._put(ur_blocked_path(self._root, ledger_id), reason.encode())

    async def blocked(self, ledger_id: int) -> BlockedReason | None:
        """Why ``ledger_id`` is not being repaired; None if no reason is recorded."""
        try:
            data, _version = await self._store.get(ur_blocked_path(self._root, ledger_id))
        except NoNodeError:
            return None
        return BlockedReason.decode(data)

    async def clear_blocked(self, ledger_id: int) -> None:
        """Forget why ``ledger_id`` was not being repaired (it was, or it left the queue)."""
        with contextlib.suppress(NoNodeError):
            await self._store.delete(ur_blocked_path(self._root, ledger_id))

    async def blocked_ids(self) -> set[LedgerId]:
        """The ledgers with a recorded reason (one listing: no reason is read)."""
        try:
            names = await self._store.children(join_path(self._base, BLOCKED))
        except NoNodeError:
            return set()
        return {LedgerId(int(n[3:])) for n in names if n.startswith("urL") and n[3:].isdigit()}

    async def blocked_reasons(self, ledger_ids: Iterable[int]) -> dict[LedgerId, BlockedReason]:
        """The recorded reasons of those of ``ledger_ids`` that have one (an unreadable one
        is left out: a reason is advice, the mark is what counts)."""
        reasons: dict[LedgerId, BlockedReason] = {}
        recorded = await self.blocked_ids()
        for ledger_id in ledger_ids:
            if ledger_id not in recorded:
                continue
            try:
                reason = await self.blocked(ledger_id)
            except ProtocolError:
                continue
            if reason is not None:
                reasons[LedgerId(ledger_id)] = reason
        return reasons

    async def prune_blocked(self, queued: set[LedgerId]) -> int:
        """Remove the reasons of ledgers that left the queue: those not in ``queued`` (a
        listing of the queue) whose mark is still absent when read; how many were removed."""
        removed = 0
        for ledger_id in sorted(await self.blocked_ids() - queued):
            if await self.get(ledger_id) is None:  # marked again meanwhile: keep it
                await self.clear_blocked(ledger_id)
                removed += 1
        return removed

    async def disable(self) -> None:
        await self._create_if_missing(join_path(self._base, "disable"), b"")

    async def enable(self) -> None:
        with contextlib.suppress(NoNodeError):
            await self._store.delete(join_path(self._base, "disable"))

    async def is_enabled(self) -> bool:
        return await self._store.exists(join_path(self._base, "disable")) is None

    async def lost_bookie_recovery_delay_s(self) -> int | None:
        """The delay stored in the cluster; None if the node is absent (use the default)."""
        try:
            data, _version = await self._store.get(self._delay_path)
        except NoNodeError:
            return None
        return parse_delay(data)

    async def set_lost_bookie_recovery_delay_s(self, seconds: int) -> None:
        """Store the delay (creating the node if needed); every write triggers an audit."""
        if isinstance(seconds, bool) or not isinstance(seconds, int):
            raise ConfigError(f"lost_bookie_recovery_delay_s: must be an integer, got {seconds!r}")
        if not 0 <= seconds <= DELAY_S_MAX:
            raise ConfigError(
                f"lost_bookie_recovery_delay_s: must be in 0..{DELAY_S_MAX}, got {seconds}"
            )
        await self._put(self._delay_path, str(seconds).encode())

    async def watch_lost_bookie_recovery_delay(
        self, *, on_unreadable: Callable[[ProtocolError], None] | None = None
    ) -> AsyncGenerator[int | None, None]:
        """The current delay, then the delay after each write of its node (a rewrite of the
        same value included: that is how ``triggeraudit`` asks for an audit) and after its
        deletion (None). Writes between two reads collapse into one item. Ends when the
        store closes; use ``contextlib.aclosing`` to stop early. A value that is not a number
        raises ``ProtocolError``, or with ``on_unreadable`` is reported to it and yielded as
        None (the watch goes on).
        """
        watch = await self._store.watch(self._delay_path, WatchKind.DATA, persistent=True)
        seen: int | None = -2  # node version last yielded; -1: absent; -2: nothing yet
        try:
            while True:
                try:
                    try:
                        data, version = await self._store.get(self._delay_path)
                        value: int | None = parse_delay(data)
                    except ProtocolError as exc:
                        if on_unreadable is None:
                            raise
                        on_unreadable(exc)
                        value = None
                    except NoNodeError:
                        version, value = -1, None
                    if version != seen:
                        seen = version
                        yield value
                except (ConnectionLossError, SessionExpiredError):
                    pass  # a RESET follows once the store reconnects
                await watch.get()
        except MetadataClosedError:
            return
        finally:
            watch.close()

    async def current_auditor(self) -> str | None:
        """The bookie id in the vote that leads the auditor election; None if nobody runs."""
        directory = join_path(self._base, "auditorelection")
        try:
            names = await self._store.children(directory)
        except NoNodeError:
            return None
        votes = sorted((n for n in names if n.startswith("V_")), key=lambda n: n[-10:])
        for name in votes:
            try:
                data, _version = await self._store.get(join_path(directory, name))
            except NoNodeError:
                continue  # it left between listing and reading
            return parse_text(data, pb.AuditorVoteFormat()).bookieId
        return None

    async def locked_ids(self) -> set[LedgerId]:
        """The ledgers a replication worker holds (one listing: no lock is read)."""
        try:
            names = await self._store.children(join_path(self._base, "locks"))
        except NoNodeError:
            return set()
        return {LedgerId(int(n[3:])) for n in names if n.startswith("urL") and n[3:].isdigit()}

    async def locked(self) -> list[tuple[LedgerId, str]]:
        """The ledgers a replication worker holds, ascending, with the holder's id."""
        directory = join_path(self._base, "locks")
        try:
            names = await self._store.children(directory)
        except NoNodeError:
            return []
        held: list[tuple[LedgerId, str]] = []
        for name in names:
            if not (name.startswith("urL") and name[3:].isdigit()):
                continue
            try:
                data, _version = await self._store.get(join_path(directory, name))
            except NoNodeError:
                continue  # released between listing and reading
            holder = parse_text(data, pb.LockDataFormat()).bookieId
            held.append((LedgerId(int(name[3:])), holder))
        return sorted(held)

    async def check_ctime_ms(self, check: str) -> int | None:
        """When ``check`` (a key of :data:`CHECKS`) last ran, in ms; None if never."""
        node, kind, field = check_node(check)
        try:
            data, _version = await self._store.get(join_path(self._base, node))
        except NoNodeError:
            return None
        message = kind()
        try:
            message.ParseFromString(data)
        except DecodeError as exc:
            raise ProtocolError(f"{node} is unreadable: {exc}") from exc
        return int(getattr(message, field)) if message.HasField(field) else None

    async def set_check_ctime_ms(self, check: str, ms: int) -> None:
        """Record that ``check`` ran at ``ms`` (binary protobuf, as Java writes it)."""
        node, kind, field = check_node(check)
        message = kind()
        setattr(message, field, ms)
        await self._put(join_path(self._base, node), message.SerializeToString())

    @property
    def _delay_path(self) -> str:
        return join_path(self._base, LOST_BOOKIE_RECOVERY_DELAY)

    async def _put(self, path: str, data: bytes) -> None:
        """Set ``path`` to ``data``, creating it if absent (racing creators: one creates, the
        other sets)."""
        for _attempt in range(2):
            try:
                await self._store.set(path, data)
                return
            except NoNodeError:
                pass
            try:
                await self._store.create(path, data, make_parents=True)
                return
            except NodeExistsError:
                continue
        raise MetadataError(f"{path}: created and deleted concurrently, not written")

    async def _create_mark(self, ledger_id: int, replicas: list[str]) -> None:
        message = pb.UnderreplicatedLedgerFormat(replica=replicas, ctime=self._clock.wall_ms())
        path = ur_ledger_path(self._root, ledger_id)
        await self._store.create(path, text(message), make_parents=True)

    async def _merge(self, entry: UnderreplicatedLedger, replicas: list[str]) -> None:
        """Add ``replicas`` to a queued ledger's mark. Marked again for replicas it names
        already, the mark is written anyway (a new version, the same text) while a worker
        holds the ledger: that worker may be repairing from metadata older than this finding
        (a ledger closed meanwhile, with entries its refill did not cover), and its removal
        of the mark, at the version it locked, must then fail (the ledger stays queued for
        another round: the invariant of the module doc). Not locked, nothing is written: the
        next worker reads the metadata after this finding."""
        merged = list(dict.fromkeys([*entry.missing_replicas, *replicas]))
        lock = ur_lock_path(self._root, entry.ledger_id)
        if merged == list(entry.missing_replicas) and await self._store.exists(lock) is None:
            return
        message = pb.UnderreplicatedLedgerFormat(replica=merged)
        if entry.ctime_ms is not None:
            message.ctime = entry.ctime_ms
        path = ur_ledger_path(self._root, entry.ledger_id)
        await self._store.set(path, text(message), entry.version)

    async def _walk(self, directory: str, level: int) -> AsyncIterator[LedgerId]:
        try:
            names = await self._store.children(directory)
        except NoNodeError:
            return
        for name in names:
            if level < HEX_LEVELS and len(name) == 4 and is_hex(name):
                async for ledger_id in self._walk(join_path(directory, name), level + 1):
                    yield ledger_id
            elif level == HEX_LEVELS and name.startswith("urL") and name[3:].isdigit():
                yield LedgerId(int(name[3:]))

    async def _prune(self, directory: str) -> None:
        ledgers_dir = join_path(self._base, "ledgers")
        while directory != ledgers_dir and directory.startswith(ledgers_dir):
            try:
                await self._store.delete(directory)
            except (NotEmptyError, NoNodeError):
                return
            directory = parent_path(directory)

    async def _create_if_missing(self, path: str, data: bytes) -> None:
        with contextlib.suppress(NodeExistsError):
            await self._store.create(path, data, make_parents=True)
