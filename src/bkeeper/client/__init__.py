"""The ledger client: quorum writes, reads, fencing and recovery, with BookKeeper's semantics.

Decisions are pure (``distribution``, ``placement``); handles perform their effects over a
pipelined connection per bookie (``bookie_client``, ``pool``). Never imports ``storage`` or
``server``.

The names below are imported on first use, so that ``bkeeper.client.config`` (the process's
client security defaults, read by every ``bkeeper`` command) loads without the whole client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bkeeper.client.bookkeeper import BookKeeper
    from bkeeper.client.config import ClientConfig
    from bkeeper.client.entry import Entry
    from bkeeper.client.read_handle import ReadHandle
    from bkeeper.client.write_handle import AddCallback, WriteHandle

__all__ = ["AddCallback", "BookKeeper", "ClientConfig", "Entry", "ReadHandle", "WriteHandle"]

_MODULES = {
    "AddCallback": "write_handle",
    "BookKeeper": "bookkeeper",
    "ClientConfig": "config",
    "Entry": "entry",
    "ReadHandle": "read_handle",
    "WriteHandle": "write_handle",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'bkeeper.client' has no attribute {name!r}")
    return getattr(importlib.import_module(f"bkeeper.client.{module}"), name)
