"""Stamping and checking the local cookie of a bookie's data directory.

Through the storage's :class:`~bkeeper.storage.FileSystem` port (the OS's by default), so a
bookie on an in-memory filesystem (the simulator) keeps its cookie there too.

First start: write ``<data_dir>/current/VERSION`` (temp file, fsync, rename, fsync dir).
Later starts: refuse with :class:`CookieMismatchError` naming what differs (another bookie's
directory, a changed port or id, another cluster). A cookie written without a cluster
instance id is re-stamped once the bookie learns one.
"""

from __future__ import annotations

import os

from bkeeper.meta.cookie import Cookie
from bkeeper.server.config import BookieConfig
from bkeeper.storage import FileSystem, OsFileSystem
from bkeeper.storage.filesystem import write_file_atomic

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
    config: BookieConfig,
    instance_id: str,
    bookie_id: str | None = None,
    fs: FileSystem | None = None,
) -> Cookie:
    """Check the stored cookie against this configuration, or stamp a new one."""
    fs = fs if fs is not None else OsFileSystem()
    expected = cookie_for(config, instance_id, bookie_id)
    path = cookie_path(config.data_dir)
    if fs.exists(path):
        stored = Cookie.decode(fs.read_file(path))
        if not stored.instance_id and instance_id:
            stored = Cookie(stored.bookie_id, stored.journal_dirs, stored.ledger_dirs, instance_id)
            stored.verify(expected, path)
            write_file_atomic(fs, path, expected.encode())
            return expected
        stored.verify(expected, path)
        return stored
    fs.makedirs(os.path.dirname(path))
    write_file_atomic(fs, path, expected.encode())
    return expected


def read_local_cookie(data_dir: str, fs: FileSystem | None = None) -> Cookie | None:
    """The cookie stamped in ``data_dir``, or None when it has none (never started);
    ``ProtocolError`` when it is unreadable."""
    fs = fs if fs is not None else OsFileSystem()
    path = cookie_path(data_dir)
    if not fs.exists(path):
        return None
    try:
        return Cookie.decode(fs.read_file(path))
    except FileNotFoundError:
        return None


def write_local_cookie(data_dir: str, cookie: Cookie, fs: FileSystem | None = None) -> None:
    """Write (or replace, atomically, synced) the cookie of ``data_dir``."""
    fs = fs if fs is not None else OsFileSystem()
    path = cookie_path(data_dir)
    fs.makedirs(os.path.dirname(path))
    write_file_atomic(fs, path, cookie.encode())
