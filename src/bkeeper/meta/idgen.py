"""Ledger id generation, as Apache BookKeeper's ZooKeeper id generators do it.

31-bit ids: create the ephemeral-sequential node ``<root>/idgen/ID-``; the 10-digit sequence
ZooKeeper appends is the id; delete the node. Once a sequence reaches
``short_id_limit`` (Integer.MAX_VALUE) the generator switches for good to 64-bit ids: the
persistent directories ``<root>/idgen-long/HOB-<%010d>`` hold the high 32 bits (starting at
1) and an ephemeral-sequential ``ID-`` child under the highest one gives the low 32 bits.
When that sequence is exhausted too, the next ``HOB-`` directory is created.

Invariant: ids from one tree strictly increase in the order their nodes were created, so they
are unique. Clients switch to long mode as soon as any ``HOB-`` directory exists.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from bkeeper.common.errors import ConfigError, MetadataError, NodeExistsError
from bkeeper.common.ids import LedgerId
from bkeeper.common.validate import check_positive_ints
from bkeeper.meta.layout import IDGEN, IDGEN_LONG, SHORT_LEDGER_ID_LIMIT
from bkeeper.meta.store import NodeStore, join_path

__all__ = ["IdGeneratorConfig", "LedgerIdGenerator"]

_log = logging.getLogger(__name__)

_HOB_PREFIX = "HOB-"
_ID_PREFIX = "ID-"


@dataclass(frozen=True)
class IdGeneratorConfig:
    """``short_id_limit``: sequences at or above it are exhausted (tests lower it to reach the
    64-bit scheme quickly). ``attempts_max`` bounds the tries of one ``generate`` call."""

    short_id_limit: int = SHORT_LEDGER_ID_LIMIT
    attempts_max: int = 16

    def __post_init__(self) -> None:
        if not 1 <= self.short_id_limit <= SHORT_LEDGER_ID_LIMIT:
            raise ConfigError(f"short_id_limit: must be in [1, 2^31-1], got {self.short_id_limit}")
        check_positive_ints(self, "attempts_max")


class LedgerIdGenerator:
    """Generates unique, increasing ledger ids under ``root``."""

    def __init__(
        self, store: NodeStore, root: str, config: IdGeneratorConfig | None = None
    ) -> None:
        self._store = store
        self._root = root
        self._config = config or IdGeneratorConfig()
        self._long_mode = False

    async def generate(self) -> LedgerId:
        """A new ledger id; ``MetadataError`` if ``attempts_max`` tries did not yield one."""
        for _attempt in range(self._config.attempts_max):
            if not self._long_mode:
                self._long_mode = bool(await self._high_parts())
            if self._long_mode:
                ledger_id = await self._generate_long()
            else:
                ledger_id = await self._generate_short()
            if ledger_id is not None:
                return LedgerId(ledger_id)
        raise MetadataError(f"no ledger id after {self._config.attempts_max} attempts")

    async def _generate_short(self) -> int | None:
        sequence = await self._take_sequence(join_path(self._root, IDGEN))
        if sequence < self._config.short_id_limit:
            return sequence
        _log.info("31-bit ledger ids exhausted at %d; switching to 64-bit ids", sequence)
        await self._create_high_part(1)
        self._long_mode = True
        return None

    async def _generate_long(self) -> int | None:
        parts = await self._high_parts()
        high = max(parts, default=1)
        if not parts:
            await self._create_high_part(high)
        directory = join_path(self._root, IDGEN_LONG, f"{_HOB_PREFIX}{high:010d}")
        low = await self._take_sequence(directory)
        if low < self._config.short_id_limit:
            return (high << 32) | low
        await self._create_high_part(high + 1)
        return None

    async def _take_sequence(self, directory: str) -> int:
        """Create and delete one ephemeral-sequential ``ID-`` node; its sequence number."""
        path = await self._store.create(
            join_path(directory, _ID_PREFIX), ephemeral=True, sequential=True, make_parents=True
        )
        try:
            await self._store.delete(path)
        except MetadataError as exc:  # the node is ephemeral: it goes with the session anyway
            _log.debug("could not delete %s: %s", path, exc)
        sequence = int(path.rsplit(_ID_PREFIX, 1)[1])
        # ZooKeeper's counter is a signed 32-bit int: past 2^31-1 it turns negative.
        return sequence if sequence >= 0 else SHORT_LEDGER_ID_LIMIT

    async def _high_parts(self) -> list[int]:
        directory = join_path(self._root, IDGEN_LONG)
        if await self._store.exists(directory) is None:
            return []
        names = await self._store.children(directory)
        return [int(n[len(_HOB_PREFIX) :]) for n in names if _is_high_part(n)]

    async def _create_high_part(self, high: int) -> None:
        path = join_path(self._root, IDGEN_LONG, f"{_HOB_PREFIX}{high:010d}")
        with contextlib.suppress(NodeExistsError):  # another client got there first
            await self._store.create(path, make_parents=True)


def _is_high_part(name: str) -> bool:
    digits = name[len(_HOB_PREFIX) :]
    return name.startswith(_HOB_PREFIX) and len(digits) == 10 and digits.isdigit()
