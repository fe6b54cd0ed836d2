"""The bookie process: listener, per-request handlers, read-only switch, ordered start/stop.

Imports ``common``, ``wire``, ``storage`` and ``meta``; never ``client``.
"""

from bkeeper.server.bookie import Bookie
from bkeeper.server.config import BookieConfig

__all__ = ["Bookie", "BookieConfig"]
