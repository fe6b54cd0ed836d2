"""Bookie cookies in the metadata store: ``<root>/cookies/<bookieId>``, versioned.

The node holds the same text as the bookie's ``current/VERSION`` files
(:class:`bkeeper.meta.cookie.Cookie`). Writing a cookie for a new bookie uses a create, so two
bookies claiming one id cannot both succeed; updating one is a compare-and-set on the version
read.
"""

from __future__ import annotations

from bkeeper.common.errors import NoNodeError
from bkeeper.meta.cookie import Cookie
from bkeeper.meta.layout import COOKIES
from bkeeper.meta.store import ANY_VERSION, NodeStore, Versioned, join_path

__all__ = ["CookieStore"]


class CookieStore:
    """Read, write (create or CAS) and delete bookie cookies under ``root``."""

    def __init__(self, store: NodeStore, root: str) -> None:
        self._store = store
        self._directory = join_path(root, COOKIES)

    def path(self, bookie_id: str) -> str:
        return join_path(self._directory, bookie_id)

    async def read(self, bookie_id: str) -> Versioned[Cookie]:
        """The cookie and its version; ``NoNodeError`` when the bookie has none."""
        try:
            data, version = await self._store.get(self.path(bookie_id))
        except NoNodeError as exc:
            raise NoNodeError(f"bookie {bookie_id} has no cookie in the metadata store") from exc
        return Versioned(Cookie.decode(data), version)

    async def write(self, bookie_id: str, cookie: Cookie, version: int | None = None) -> int:
        """Store ``cookie``: a create when ``version`` is None (``NodeExistsError`` if one
        exists), else a compare-and-set (``MetadataVersionError``). The new version."""
        path = self.path(bookie_id)
        if version is None:
            await self._store.create(path, cookie.encode(), make_parents=True)
            return 0
        return await self._store.set(path, cookie.encode(), version)

    async def delete(self, bookie_id: str, version: int = ANY_VERSION) -> None:
        await self._store.delete(self.path(bookie_id), version)

    async def bookie_ids(self) -> list[str]:
        """Every bookie id that has a cookie."""
        try:
            return await self._store.children(self._directory)
        except NoNodeError:
            return []
