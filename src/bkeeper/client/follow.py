"""A read handle's view of its ledger's metadata, kept current while the handle stays open.

A ledger's metadata changes under a reader that does not fence: the writer adds a segment
(ensemble change) and at last seals the ledger; auto-recovery (or the shell's ``recover``)
replaces a lost bookie in any segment, sealed ones included. A reader that kept the metadata
it was opened with would send its reads and long polls to bookies that no longer hold, or
never held, the entries. Two mechanisms keep a :class:`LedgerView` current (Apache
BookKeeper's readers do both: they watch the ledger's metadata, and re-read it when a read
fails):

* **watch**: :meth:`LedgerView.follow` (called by the handle's long poll, the mark of a
  reader that stays open) watches the ledger's metadata node through the metadata store's
  watch API and applies each newer version as it comes, waking any long poll so that it goes
  again to the new last segment's bookies. The watch ends once the ledger is sealed (the
  writer changes nothing more; a later bookie replacement is caught by the refresh below), or
  deleted, or when the handle is closed, dropped, or its client closed. At most
  ``ClientConfig.metadata_watches_max`` views of one client watch at once; the others rely on
  the refresh alone.
* **refresh**: :meth:`LedgerView.refresh` re-reads the metadata when a bookie's answer says
  the view may be old (no replica of an entry up to the LAC has it, or none answers): the
  handle asks again with the new view when the metadata moved on, and reports the error
  otherwise (also when the metadata cannot be read: that is logged).

Only a strictly newer version replaces the view (the node's version only grows: ledger ids
are never reused), so what a view holds never goes back in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from bkeeper.client.context import ClientContext
from bkeeper.common.errors import BKeeperError, LedgerNotFoundError, MetadataError
from bkeeper.common.tasks import TaskOwner
from bkeeper.meta.ledger_metadata import LedgerMetadata, LedgerState
from bkeeper.meta.store import Versioned

__all__ = ["LedgerView"]

log = logging.getLogger(__name__)


class LedgerView:
    """The metadata one read handle reads by; see the module docstring."""

    def __init__(
        self, ctx: ClientContext, ledger_id: int, versioned: Versioned[LedgerMetadata]
    ) -> None:
        self._ctx = ctx
        self.ledger_id = ledger_id
        self.versioned = versioned
        self._changed = asyncio.Event()
        self._watches = TaskOwner(f"ledger {ledger_id} view")  # one watch at most
        #: No watch will be started any more: the ledger is sealed or gone, or stop() ran.
        self._done = versioned.value.state is LedgerState.CLOSED
        #: How many newer versions this view took (from the watch or a refresh).
        self.updates = 0

    @property
    def watching(self) -> bool:
        return not self._watches.closed and len(self._watches) > 0

    def change_event(self) -> asyncio.Event:
        """An event set at the next change of the view (take it before acting on the view)."""
        return self._changed

    def apply(self, versioned: Versioned[LedgerMetadata]) -> bool:
        """Take ``versioned`` if it is newer than the view; True if it was."""
        if versioned.version <= self.versioned.version:
            return False
        self.versioned = versioned
        self.updates += 1
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        return True

    async def refresh(self) -> bool:
        """Read the metadata again; True when it had moved on (the view now holds it)."""
        try:
            fresh = await self._ctx.ledgers.read(self.ledger_id)
        except LedgerNotFoundError:
            return False
        except MetadataError as exc:  # the caller reports what made it ask
            log.warning("ledger %d: could not read its metadata again: %s", self.ledger_id, exc)
            return False
        moved = self.apply(fresh)
        if moved:
            log.info("ledger %d: metadata moved on to version %d", self.ledger_id, fresh.version)
        return moved

    def follow(self) -> None:
        """Watch the metadata from now on (a no-op when watching already, or when the
        ledger is sealed or gone, or over ``metadata_watches_max``)."""
        ctx = self._ctx
        if self._done or self.watching or ctx.closed:
            return
        if len(ctx.followers) >= ctx.config.metadata_watches_max:
            return
        ctx.followers.add(self)
        self._watches.spawn(self._watch(), "metadata watch")

    def stop(self) -> None:
        """Stop watching for good. Safe to call from a finalizer (the loop may be gone)."""
        self._done = True
        self._ctx.followers.discard(self)
        with contextlib.suppress(RuntimeError):  # the loop is closed already
            self._watches.cancel()

    async def _watch(self) -> None:
        try:
            updates = self._ctx.ledgers.watch(self.ledger_id)
            async with contextlib.aclosing(updates):
                async for current in updates:
                    if current is None:  # deleted: nothing more to follow
                        self._done = True
                        return
                    self.apply(current)
                    if current.value.state is LedgerState.CLOSED:
                        self._done = True
                        return
        except BKeeperError as exc:
            # The next long poll starts a new watch; meanwhile reads refresh on stale answers.
            log.warning("ledger %d: stopped watching its metadata: %s", self.ledger_id, exc)
        finally:
            self._ctx.followers.discard(self)
