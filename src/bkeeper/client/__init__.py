"""The ledger client: quorum writes, reads, fencing and recovery, with BookKeeper's semantics.

Decisions are pure (``distribution``, ``placement``); handles perform their effects over a
pipelined connection per bookie (``bookie_client``, ``pool``). Never imports ``storage`` or
``server``.
"""

from bkeeper.client.bookkeeper import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.client.entry import Entry
from bkeeper.client.read_handle import ReadHandle
from bkeeper.client.write_handle import WriteHandle

__all__ = ["BookKeeper", "ClientConfig", "Entry", "ReadHandle", "WriteHandle"]
