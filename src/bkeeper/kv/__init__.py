"""A replicated key-value store on the state machine framework (:mod:`bkeeper.statemachine`).

:mod:`bkeeper.kv.state` is the state machine (keys, values, per-key versions, atomic batches,
idempotent request ids), :mod:`bkeeper.kv.server` a member serving it over HTTP/JSON, and
:mod:`bkeeper.kv.client` the Python client (asyncio and blocking) that finds the leader and
retries across leader changes.

Layer: ``bkeeper.kv`` sits above ``bkeeper.statemachine`` (beside ``bkeeper.spark`` and
``bkeeper.testing``), so that it imports the generic framework while the framework knows
nothing of it; the CLI (``bkeeper kv``) sits above it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bkeeper.kv.client import BlockingKvClient, KvClient, KvItem, members_from_store
    from bkeeper.kv.server import KvServer, KvServerConfig, log_name
    from bkeeper.kv.state import KvState

__all__ = [
    "BlockingKvClient",
    "KvClient",
    "KvItem",
    "KvServer",
    "KvServerConfig",
    "KvState",
    "log_name",
    "members_from_store",
]

# Each name is imported on first use from its module: a client (`bkeeper kv put`) does not
# load the server (aiohttp's web server, the state machine framework).
_MODULES = {
    "BlockingKvClient": "client",
    "KvClient": "client",
    "KvItem": "client",
    "members_from_store": "client",
    "KvServer": "server",
    "KvServerConfig": "server",
    "log_name": "server",
    "KvState": "state",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'bkeeper.kv' has no attribute {name!r}")
    return getattr(importlib.import_module(f"bkeeper.kv.{module}"), name)
