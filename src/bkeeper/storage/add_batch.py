"""The engine's one add body: :class:`AddBatch` and :func:`add_batch_locked`.

Every add reaches the engine as a batch: :meth:`Storage.add_entries
<bkeeper.storage.Storage.add_entries>` takes the adds a bookie connection read from one chunk,
and :meth:`Storage.add_entry` is a batch of one. A batch is parallel lists of the entries'
fields, no object per entry. So every rule of an add lives here once: the master key (a
ledger is created with the first key seen; another key is refused), fencing (refused unless
the batch holds recovery adds; a ledger in limbo is fenced), the damaged mark (a whole copy
added again clears it), room in the write cache and the journal queue, and the LAC (it only
grows).

Per batch: one hold of the lock; per ledger met (usually one a batch), one lookup of its
state, master key and journal; per entry only the checks that can differ (room, entry id),
the journal record (9-byte header with the CRC-32C, then the body, framed straight into the
journal's queue: ``Journal.open_run_locked``) and the write-cache insert; then the token.
The journal records are one ADD_ENTRY record per entry, so replay rebuilds the same state
(:meth:`EngineState.add_locked`).

Durability: the token follows the batch's records in each journal queue it went to (``parts``
of them), and a journal hands a token back only with the group holding everything queued
before it, once that group is fdatasynced.

Entries refused (wrong master key, fenced ledger, journal refusing or full, write cache full,
bad entry id) are listed in ``refused`` as ``(index, error)`` before the token is queued, and
are not in the journal; the others are added whatever happens to them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Self

from crc32c import crc32c

from bkeeper.common import bugs
from bkeeper.common.errors import (
    BadRequestError,
    BKeeperError,
    LedgerFencedError,
    TooManyRequestsError,
)
from bkeeper.storage.engine import EngineState
from bkeeper.storage.filesystem import BytesLike
from bkeeper.storage.framing import RECORD_HEADER, RECORD_HEADER_BYTES
from bkeeper.storage.journal import Journal
from bkeeper.storage.journal_format import RecordKind
from bkeeper.storage.ledger_state import StoredLedger

__all__ = ["ENTRY_HEAD_BYTES", "PREFIX_CRCS_MAX", "AddBatch", "add_batch_locked", "entry_lac"]

#: An entry body begins ledgerId | entryId | LAC | length: a shorter one is refused.
ENTRY_HEAD_BYTES = 32
_ENTRY_HEAD = struct.Struct(">qqq")

_ADD = int(RecordKind.ADD_ENTRY)
_pack_header = RECORD_HEADER.pack
#: The damaged marks before a ledger is met (empty: never written to).
_NO_DAMAGE: set[int] = set()
#: CRC-32C of a record header's first 5 bytes (length, kind) by length, so that an entry's
#: header costs one CRC call over its body. At most this many lengths are kept.
PREFIX_CRCS_MAX = 4096
_prefix_crcs: dict[int, int] = {}


def _prefix_crc(length: int) -> int:
    if len(_prefix_crcs) >= PREFIX_CRCS_MAX:
        _prefix_crcs.clear()
    crc = _prefix_crcs[length] = crc32c(length.to_bytes(4, "big") + bytes((_ADD,)))
    return crc


def entry_lac(ledger_id: int, entry_id: int, body: BytesLike) -> int:
    """The LAC ``body`` carries, once it is checked to name ``ledger_id`` and ``entry_id``
    (BadRequestError otherwise): for adds whose ids come beside the body, not from it."""
    if len(body) < ENTRY_HEAD_BYTES or entry_id < 0:
        raise BadRequestError(f"ledger {ledger_id}: bad entry {entry_id}")
    body_ledger_id, body_entry_id, lac = _ENTRY_HEAD.unpack_from(body)
    if body_ledger_id != ledger_id or body_entry_id != entry_id:
        raise BadRequestError(f"ledger {ledger_id} entry {entry_id}: body names another")
    return int(lac)


class AddBatch:
    """Entries to add at once, as parallel lists (index ``i`` of each is one entry):
    ``ledger_ids``, ``entry_ids`` and ``lacs`` as the bodies name them, ``master_keys`` and
    ``bodies`` (each body begins ledgerId | entryId | LAC). ``recovery``: recovery adds,
    taken on a fenced ledger (the whole batch is, or none of it). The engine fills
    ``refused`` (``(index, error)``, in index order) and ``parts`` (how many journal queues
    the batch's token was queued to: the owner gets it back from each of them)."""

    __slots__ = (
        "bodies",
        "entry_ids",
        "lacs",
        "ledger_ids",
        "master_keys",
        "parts",
        "recovery",
        "refused",
    )

    def __init__(self, recovery: bool = False) -> None:
        self.ledger_ids: list[int] = []
        self.entry_ids: list[int] = []
        self.lacs: list[int] = []
        self.master_keys: list[bytes] = []
        self.bodies: list[bytes] = []
        self.recovery = recovery
        self.refused: list[tuple[int, BKeeperError]] = []
        self.parts = 0

    @classmethod
    def of_one(
        cls, ledger_id: int, entry_id: int, lac: int, key: bytes, body: bytes, recovery: bool
    ) -> Self:
        """A batch of one entry (``lac`` as ``body`` names it), made without empty lists."""
        batch = cls.__new__(cls)
        batch.ledger_ids = [ledger_id]
        batch.entry_ids = [entry_id]
        batch.lacs = [lac]
        batch.master_keys = [key]
        batch.bodies = [body]
        batch.recovery = recovery
        batch.refused = []
        batch.parts = 0
        return batch


def add_batch_locked(
    engine: EngineState,
    journals: tuple[Journal, ...],
    batch: AddBatch,
    ledger_for_write: Callable[[int, bytes], StoredLedger],
    token: object | None,
) -> None:
    """Add the batch (the engine lock held): see the module docstring. ``ledger_for_write``
    is :meth:`Storage._ledger_for_write_locked` (creates a ledger, checks its key);
    ``token`` (None: none) is queued after the records in each journal touched."""
    cache = engine.write_cache
    active = cache.active
    ledgers = engine.ledgers
    refused = batch.refused
    recovery = batch.recovery
    count = len(journals)
    prefix_crcs = _prefix_crcs
    cache_room = cache.bytes_max - cache.active_bytes - cache.flushing_bytes
    added_bytes = 0
    touched: list[Journal] = []
    # The ledger being added to: its state, key, cache map, damaged marks and journal (its
    # queue's buffer, the room left there), or why its entries are refused.
    ledger_id = -1
    state: StoredLedger | None = None
    key = b""
    entries: dict[int, bytes] = {}
    damaged = _NO_DAMAGE
    journal: Journal | None = None
    refusal: BKeeperError | None = None
    queue = bytearray()
    run_records = records_room = bytes_room = 0
    index = -1
    for ledger, entry_id, lac, master_key, body in zip(
        batch.ledger_ids, batch.entry_ids, batch.lacs, batch.master_keys, batch.bodies, strict=True
    ):
        index += 1
        size = len(body)
        if entry_id < 0 or size < ENTRY_HEAD_BYTES:
            refused.append((index, BadRequestError(f"ledger {ledger}: bad entry {entry_id}")))
            continue
        if ledger != ledger_id or master_key != key:
            if run_records:
                assert journal is not None
                journal.close_run_locked(run_records)
                if journal not in touched:
                    touched.append(journal)
                run_records = 0
            ledger_id, key, journal = ledger, master_key, None
            try:
                state = ledgers.get(ledger)
                if state is None or state.master_key != master_key:
                    state = ledger_for_write(ledger, master_key)
                if (
                    state.fenced
                    and not recovery
                    and not (bugs.ACTIVE and bugs.active("fence-ignored-on-add"))
                ):
                    raise LedgerFencedError(f"ledger {ledger} is fenced")
                journal = journals[ledger % count]
                queue, records_room, bytes_room = journal.open_run_locked()
            except BKeeperError as exc:
                refusal = exc
                journal = None
            else:
                refusal = None
                damaged = state.damaged
                entries = active.get(ledger)  # type: ignore[assignment]
                if entries is None:
                    entries = active[ledger] = {}
        if refusal is not None:
            refused.append((index, refusal))
            continue
        assert state is not None
        if size > cache_room:
            refused.append((index, TooManyRequestsError("write cache is full")))
            continue
        if run_records >= records_room or size + RECORD_HEADER_BYTES > bytes_room:
            refused.append((index, TooManyRequestsError("journal queue is full")))
            continue
        prefix = prefix_crcs.get(size)
        if prefix is None:
            prefix = _prefix_crc(size)
        queue += _pack_header(size, _ADD, crc32c(body, prefix))
        queue += body
        run_records += 1
        bytes_room -= size + RECORD_HEADER_BYTES
        cache_room -= size
        added_bytes += size
        entries[entry_id] = body
        if damaged:
            damaged.discard(entry_id)  # a whole copy again (the integrity check's)
        if entry_id > state.last_entry_id:  # noqa: PLR1730 (hot path: no call)
            state.last_entry_id = entry_id
        if lac > state.lac:
            state.lac = lac
            engine.mark_dirty_locked(state)
    if run_records:
        assert journal is not None
        journal.close_run_locked(run_records)
        if journal not in touched:
            touched.append(journal)
    if not added_bytes:
        return
    if token is not None:
        for touched_journal in touched:
            touched_journal.append_token_locked(token)
        batch.parts = len(touched)
    cache.active_bytes += added_bytes
    if cache.active_bytes >= cache.flush_bytes and not engine.flush_wanted.is_set():
        engine.flush_wanted.set()
