"""The blocking client: ``bkeeper.sync.BookKeeper`` (see ``bkeeper.client.sync``)."""

from bkeeper.client.sync import BookKeeper, ReadHandle, WriteHandle

__all__ = ["BookKeeper", "ReadHandle", "WriteHandle"]
