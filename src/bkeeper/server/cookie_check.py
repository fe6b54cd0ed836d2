"""Stamping and checking the local cookie of a bookie's data directory.

First start: write ``<data_dir>/current/VERSION`` (temp file, fsync, rename, fsync dir).
Later starts: refuse with :class:`CookieMismatchError` naming what differs (another bookie's
directory, a changed port or id, another cluster). A cookie written without a cluster
instance id is re-stamped once the bookie learns one.
"""

from __future__ import annotations

import os

from bkeeper.meta.cookie import Cookie
from bkeeper.server.config import BookieConfig

__all__ = [
    "check_or_stamp_cookie",
    "cookie_for",
    "cookie_path",
    "read_local_cookie",
    "write_local_cookie",
]


def cookie_path(data_dir: str) -> str:
    return os.path.join(data_dir, "current", "VERSION")


def cookie_for(config: BookieConfig, instance_id: str, bookie_id: str | None = None) -> Cookie:
    data_dir = os.path.abspath(config.data_dir)
    return Cookie(
        bookie_id=bookie_id or config.effective_bookie_id,
        journal_dirs=(data_dir,),
        ledger_dirs=(data_dir,),
        instance_id=instance_id,
    )


def check_or_stamp_cookie(
    config: BookieConfig, instance_id: str, bookie_id: str | None = None
) -> Cookie:
    """Check the stored cookie against this configuration, or stamp a new one."""
    expected = cookie_for(config, instance_id, bookie_id)
    path = cookie_path(config.data_dir)
    if os.path.exists(path):
        with open(path, "rb") as f:
            stored = Cookie.decode(f.read())
        if not stored.instance_id and instance_id:
            stored = Cookie(stored.bookie_id, stored.journal_dirs, stored.ledger_dirs, instance_id)
            stored.verify(expected, path)
            _write_atomic(path, expected.encode())
            return expected
        stored.verify(expected, path)
        return stored
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _write_atomic(path, expected.encode())
    return expected


def read_local_cookie(data_dir: str) -> Cookie | None:
    """The cookie stamped in ``data_dir``, or None when it has none (never started);
    ``ProtocolError`` when it is unreadable."""
    try:
        with open(cookie_path(data_dir), "rb") as f:
            return Cookie.decode(f.read())
    except FileNotFoundError:
        return None


def write_local_cookie(data_dir: str, cookie: Cookie) -> None:
    """Replace the cookie of ``data_dir`` (atomically, synced) with ``cookie``."""
    _write_atomic(cookie_path(data_dir), cookie.encode())


def _write_atomic(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
