"""The ledger metadata store: ledger metadata in the hierarchical layout, under CAS.

Each ledger's metadata is one persistent node (:func:`bkeeper.meta.layout.ledger_path`)
holding :mod:`bkeeper.meta.metadata_format` bytes. Invariants:

* a create never overwrites: an existing node raises ``LedgerExistsError`` (ids are never
  reused); with a generated id the store takes a fresh id instead, at most
  ``create_attempts_max`` times;
* every update is a compare-and-set on the version the caller read; a lost race raises
  ``MetadataVersionError`` and the caller re-reads;
* listing yields ids in ascending order: the short (2-digit top level) tree, then the long
  (3-digit) tree.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator

from bkeeper.common.errors import (
    ConnectionLossError,
    LedgerExistsError,
    LedgerNotFoundError,
    MetadataClosedError,
    MetadataError,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
)
from bkeeper.common.ids import LedgerId
from bkeeper.meta.idgen import LedgerIdGenerator
from bkeeper.meta.layout import is_ledger_tree_name, ledger_id_from_parts, ledger_path
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.meta.metadata_format import decode_ledger_metadata, encode_ledger_metadata
from bkeeper.meta.store import ANY_VERSION, NodeStore, Versioned, join_path

__all__ = ["CREATE_ATTEMPTS_MAX", "LedgerMetadataStore"]

#: How many generated ids one ``create`` may try when an id turns out to be taken.
CREATE_ATTEMPTS_MAX = 8

_SHORT_TOP_WIDTH = 2
_LONG_TOP_WIDTH = 3


class LedgerMetadataStore:
    """Create, read, compare-and-set, delete, list and watch ledger metadata under ``root``."""

    def __init__(self, store: NodeStore, root: str, id_generator: LedgerIdGenerator) -> None:
        self._store = store
        self._root = root
        self._id_generator = id_generator

    async def create(
        self, metadata: LedgerMetadata, ledger_id: int | None = None
    ) -> tuple[LedgerId, Versioned[LedgerMetadata]]:
        """Store metadata of a new ledger, with ``ledger_id`` or a generated one."""
        if ledger_id is not None:
            return LedgerId(ledger_id), await self._create(ledger_id, metadata)
        for _attempt in range(CREATE_ATTEMPTS_MAX):
            new_id = await self._id_generator.generate()
            try:
                return new_id, await self._create(new_id, metadata)
            except LedgerExistsError:
                continue
        raise MetadataError(f"every one of {CREATE_ATTEMPTS_MAX} generated ledger ids was taken")

    async def read(self, ledger_id: int) -> Versioned[LedgerMetadata]:
        """The metadata and its version; ``LedgerNotFoundError``."""
        try:
            data, version = await self._store.get(ledger_path(self._root, ledger_id))
        except NoNodeError as exc:
            raise LedgerNotFoundError(f"ledger {ledger_id}: no metadata") from exc
        return Versioned(decode_ledger_metadata(data), version)

    async def write(
        self, ledger_id: int, metadata: LedgerMetadata, version: int
    ) -> Versioned[LedgerMetadata]:
        """Replace the metadata if it is still at ``version``; ``MetadataVersionError``."""
        path = ledger_path(self._root, ledger_id)
        try:
            new_version = await self._store.set(path, encode_ledger_metadata(metadata), version)
        except NoNodeError as exc:
            raise LedgerNotFoundError(f"ledger {ledger_id}: no metadata") from exc
        return Versioned(metadata, new_version)

    async def delete(self, ledger_id: int, version: int = ANY_VERSION) -> None:
        """Delete the metadata (if still at ``version``); ``LedgerNotFoundError``."""
        try:
            await self._store.delete(ledger_path(self._root, ledger_id), version)
        except NoNodeError as exc:
            raise LedgerNotFoundError(f"ledger {ledger_id}: no metadata") from exc

    async def exists(self, ledger_id: int) -> bool:
        return await self._store.exists(ledger_path(self._root, ledger_id)) is not None

    async def ledger_ids(self) -> AsyncIterator[LedgerId]:
        """Every ledger id with metadata, ascending."""
        top = await self._children(self._root)
        for width in (_SHORT_TOP_WIDTH, _LONG_TOP_WIDTH):
            for name in (n for n in top if len(n) == width and n.isdigit()):
                async for ledger_id in self._walk([name], long_form=width == _LONG_TOP_WIDTH):
                    yield ledger_id

    async def watch(self, ledger_id: int) -> AsyncGenerator[Versioned[LedgerMetadata] | None, None]:
        """The current metadata, then each new version; ``None`` while it does not exist.

        Ends when the store closes. Use ``contextlib.aclosing`` to stop watching early.
        """
        subscription = await self._store.watch(ledger_path(self._root, ledger_id), persistent=True)
        last: Versioned[LedgerMetadata] | bool | None = False  # False: nothing yielded yet
        try:
            while True:
                try:
                    current = await self._read_or_none(ledger_id)
                    if current != last:
                        last = current
                        yield current
                except (ConnectionLossError, SessionExpiredError):
                    pass  # a RESET follows once the store reconnects
                await subscription.get()
        except MetadataClosedError:
            return
        finally:
            subscription.close()

    async def _create(self, ledger_id: int, metadata: LedgerMetadata) -> Versioned[LedgerMetadata]:
        path = ledger_path(self._root, ledger_id)
        try:
            await self._store.create(path, encode_ledger_metadata(metadata), make_parents=True)
        except NodeExistsError as exc:
            raise LedgerExistsError(f"ledger {ledger_id} already has metadata") from exc
        except ConnectionLossError:
            # The create may have applied before the connection dropped: the creator token
            # tells our own create from someone else's.
            existing = await self._read_or_none(ledger_id)
            if metadata.ctoken and existing and existing.value.ctoken == metadata.ctoken:
                return existing
            raise
        return Versioned(metadata, 0)

    async def _read_or_none(self, ledger_id: int) -> Versioned[LedgerMetadata] | None:
        try:
            return await self.read(ledger_id)
        except LedgerNotFoundError:
            return None

    async def _walk(self, parts: list[str], long_form: bool) -> AsyncIterator[LedgerId]:
        for name in await self._children(join_path(self._root, *parts)):
            if is_ledger_tree_name(name, len(parts), long_form):
                async for ledger_id in self._walk([*parts, name], long_form):
                    yield ledger_id
                continue
            leaf = ledger_id_from_parts([*parts, name])
            if leaf is not None:
                yield leaf

    async def _children(self, path: str) -> list[str]:
        try:
            return await self._store.children(path)
        except NoNodeError:
            return []  # deleted while listing, or nothing there yet
