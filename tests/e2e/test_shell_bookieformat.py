"""``bkeeper shell bookieformat`` on a bookie whose journal and entry logs live outside its
data directory (``--journal-dir`` / ``--ledger-dir``): every directory its checkpoint names
is emptied, with the local cookie, and (``--delete-cookie``) the stored cookie too. In
process (memory:// metadata); the refusals against real processes are in test_shell_ops."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

from click.testing import CliRunner

from bkeeper.cli.shell import shell
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.cookie import Cookie
from bkeeper.server.cookie_check import write_local_cookie
from bkeeper.storage import Storage, StorageConfig

KEY = b"k" * 20


def _bookie(data: Path, ledgers: Path, journal: Path) -> None:
    for path in (ledgers, journal):
        path.mkdir()
    config = StorageConfig(
        data_dir=str(data), ledger_dirs=(str(ledgers),), journal_dirs=(str(journal),)
    )
    storage = Storage.open(config)
    for entry_id in range(20):
        body = (7).to_bytes(8, "big") + entry_id.to_bytes(8, "big") + bytes(16) + b"x" * 50
        storage.add_entry(7, entry_id, KEY, body)
    storage.checkpoint()
    storage.close()


def _files(*dirs: Path) -> int:
    return sum(len(names) for top in dirs for _root, _subdirs, names in os.walk(top))


async def _cluster(uri: str, cookie: Cookie) -> None:
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
        await cluster.cookies.write(cookie.bookie_id, cookie)


async def _stored(uri: str, bookie_id: str) -> list[str]:
    async with await ClusterMetadata.open(uri) as cluster:
        return [b for b in await cluster.cookies.bookie_ids() if b == bookie_id]


def test_bookieformat_empties_every_dir_of_the_bookie_and_deletes_its_cookies(
    tmp_path: Path,
) -> None:
    data, ledgers, journal = tmp_path / "data", tmp_path / "ledgers", tmp_path / "journal"
    _bookie(data, ledgers, journal)
    cookie = Cookie("bk-7", (str(data),), (str(data),), "instance")
    write_local_cookie(str(data), cookie)
    uri = f"memory://{uuid.uuid4().hex}/ledgers"
    asyncio.run(_cluster(uri, cookie))
    current = data / "current"
    files = _files(current, ledgers, journal)
    assert files >= 4  # the cookie, a journal file, an entry log, the index and checkpoint

    # Its checkpoint is in its ledger dir: without the dirs it was started with, the command
    # cannot know them, and formats nothing.
    alone = CliRunner().invoke(
        shell, ["bookieformat", "--data-dir", str(data), "--force", "--metadata", uri]
    )
    assert alone.exit_code == 1
    assert alone.output == (
        f"error: {data} is not a bookie data directory (no current/journal and current/ledgers "
        "in it; give --ledger-dir and --journal-dir if the bookie was started with them)\n"
    )
    assert _files(current, ledgers, journal) == files

    result = CliRunner().invoke(
        shell, ["bookieformat", "--data-dir", str(data), "--ledger-dir", str(ledgers),
                "--force", "--delete-cookie", "--metadata", uri],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"formatted bookie bk-7: {files} files (")
    assert result.output.rstrip().endswith(
        f"deleted from {current}, {ledgers}, {journal}; its cookie deleted from the metadata"
    )
    assert (os.listdir(current), os.listdir(ledgers), os.listdir(journal)) == ([], [], [])
    assert asyncio.run(_stored(uri, "bk-7")) == []


def test_bookieformat_of_a_directory_that_is_no_bookies_is_one_error_line(
    tmp_path: Path,
) -> None:
    uri = f"memory://{uuid.uuid4().hex}/ledgers"
    result = CliRunner().invoke(
        shell, ["bookieformat", "--data-dir", str(tmp_path), "--force", "--metadata", uri]
    )
    assert result.exit_code == 1
    assert result.output.startswith(f"error: {tmp_path} is not a bookie data directory")
