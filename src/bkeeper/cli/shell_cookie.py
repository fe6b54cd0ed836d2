"""``bkeeper shell cookie_get|cookie_delete|updatecookie|bookieformat``: a bookie's cookie
and its data, in the manner of Apache BookKeeper's shell commands of the same names.

A bookie's *cookie* (:mod:`bkeeper.meta.cookie`) names it, its directories and its cluster;
it is stamped in ``<data_dir>/current/VERSION`` and stored in the metadata under
``<root>/cookies/<bookieId>``, and a bookie refuses to start when the two disagree. These
commands change a bookie's cookie or wipe its data, so each first checks that the bookie is
**not registered** (running) at ``--metadata``: a refusal otherwise, one ``error:`` line and
exit status 1. Deleting asks for confirmation on a terminal (``--force``: do not ask).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import click
from rich.table import Table

from bkeeper.cli._disk import (
    DATA_DIR_OPTION,
    JOURNAL_DIR_OPTION,
    JSON_OPTION,
    LEDGER_DIR_OPTION,
    learn_dirs,
    print_json,
    show,
)
from bkeeper.cli._errors import CommandError
from bkeeper.cli._options import confirm_deletion, metadata_option
from bkeeper.cli._tables import titled_table
from bkeeper.common.errors import NodeExistsError, NoNodeError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.cookie import Cookie
from bkeeper.server.cookie_check import cookie_path, read_local_cookie, write_local_cookie
from bkeeper.storage import OsFileSystem

__all__ = ["commands"]

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    from bkeeper.common.loop import run_event_loop

    return run_event_loop(coro)


def _cookie_json(cookie: Cookie, version: int | None = None) -> dict[str, object]:
    out: dict[str, object] = {
        "bookieId": cookie.bookie_id,
        "journalDirs": list(cookie.journal_dirs),
        "ledgerDirs": list(cookie.ledger_dirs),
        "indexDirs": list(cookie.index_dirs),
        "instanceId": cookie.instance_id,
    }
    if version is not None:
        out["version"] = version
    return out


def _cookie_table(title: str, cookie: Cookie, version: int | None = None) -> Table:
    table = titled_table(title, show_header=False)
    table.add_column("field")
    table.add_column("value")
    rows = [
        ("bookie id", cookie.bookie_id),
        ("journal dirs", ", ".join(cookie.journal_dirs) or "-"),
        ("ledger dirs", ", ".join(cookie.ledger_dirs) or "-"),
        ("index dirs", ", ".join(cookie.index_dirs) or "-"),
        ("instance id", cookie.instance_id or "-"),
    ]
    if version is not None:
        rows.append(("version", str(version)))
    for name, value in rows:
        table.add_row(name, value)
    return table


async def _refuse_if_registered(cluster: ClusterMetadata, bookie_id: str, doing: str) -> None:
    """``CommandError`` when ``bookie_id`` is registered (a running bookie). A root that
    holds no cluster has no registrations."""
    if await cluster.instance_id() is None:
        return
    bookies = await cluster.registry.bookies()
    if bookie_id in bookies.writable or bookie_id in bookies.read_only:
        raise CommandError(f"bookie {bookie_id} is registered (running): stop it before {doing}")


def _local_cookie(data_dir: str) -> Cookie:
    if not os.path.isdir(data_dir):
        raise CommandError(f"{data_dir}: no such directory")
    cookie = read_local_cookie(data_dir)
    if cookie is None:
        raise CommandError(f"{data_dir} has no cookie ({cookie_path(data_dir)}): never started")
    return cookie


# -- cookie_get, cookie_delete -------------------------------------------------------------
@click.command("cookie_get")
@metadata_option
@click.argument("bookie_id", metavar="BOOKIE")
@JSON_OPTION
def cookie_get(metadata_uri: str, bookie_id: str, as_json: bool) -> None:
    """Print the cookie of BOOKIE stored in the metadata (<root>/cookies/BOOKIE)."""

    async def run() -> tuple[Cookie, int]:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            try:
                versioned = await cluster.cookies.read(bookie_id)
            except NoNodeError as exc:
                raise CommandError(str(exc)) from None
            return versioned.value, versioned.version

    cookie, version = _run(run())
    if as_json:
        print_json(_cookie_json(cookie, version))
    else:
        show(_cookie_table(f"cookie of {bookie_id} at {metadata_uri}", cookie, version))


@click.command("cookie_delete")
@metadata_option
@click.argument("bookie_id", metavar="BOOKIE")
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
def cookie_delete(metadata_uri: str, bookie_id: str, force: bool) -> None:
    """Delete the cookie of BOOKIE from the metadata (refused while BOOKIE is registered).
    The bookie's next start stores its local cookie again."""

    async def check() -> None:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            try:
                await cluster.cookies.read(bookie_id)
            except NoNodeError as exc:
                raise CommandError(str(exc)) from None
            await _refuse_if_registered(cluster, bookie_id, "deleting its cookie")

    async def delete() -> None:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            await _refuse_if_registered(cluster, bookie_id, "deleting its cookie")
            try:
                await cluster.cookies.delete(bookie_id)
            except NoNodeError as exc:
                raise CommandError(str(exc)) from None

    _run(check())
    if not force:
        confirm_deletion(f"delete the cookie of {bookie_id} from {metadata_uri}?")
    _run(delete())
    click.echo(f"deleted the cookie of {bookie_id} from {metadata_uri}")


# -- updatecookie --------------------------------------------------------------------------
@click.command()
@metadata_option
@DATA_DIR_OPTION
@click.option("--bookie-id", "new_id", metavar="ID", help="Give the bookie this id.")
@click.option("--list", "show_list", is_flag=True, help="Show the local and stored cookies.")
@click.option("--delete", is_flag=True, help="Delete the local and the stored cookie.")
@click.option("--force", is_flag=True, help="With --delete: do not ask for confirmation.")
@JSON_OPTION
def updatecookie(
    metadata_uri: str,
    data_dir: str,
    new_id: str | None,
    show_list: bool,
    delete: bool,
    force: bool,
    as_json: bool,
) -> None:
    """The cookie of a stopped bookie: --list it (local and stored, and whether they agree),
    give the bookie a new id (--bookie-id: start it with that --bookie-id then), or --delete
    it. Ledgers whose metadata names the old id see that replica as lost (auto-recovery
    copies it elsewhere)."""
    if (new_id is not None) + show_list + delete != 1:
        raise click.UsageError("give one of --bookie-id ID, --list and --delete")
    local = _local_cookie(data_dir)
    if show_list:
        _list_cookies(metadata_uri, data_dir, local, as_json)
        return
    if delete:
        _run(_check_stopped(metadata_uri, local.bookie_id, "deleting its cookie"))
        if not force:
            confirm_deletion(
                f"delete the cookie of {local.bookie_id} from {data_dir} and {metadata_uri}?"
            )
        stored = _run(_delete_stored(metadata_uri, local.bookie_id))
        os.remove(cookie_path(data_dir))
        where = (
            f"{data_dir} and {metadata_uri}" if stored else f"{data_dir} ({metadata_uri} had none)"
        )
        click.echo(f"deleted the cookie of {local.bookie_id} from {where}")
        return
    assert new_id is not None
    _run(_change_id(metadata_uri, data_dir, local, new_id))
    click.echo(
        f"bookie {local.bookie_id} of {data_dir} is now {new_id}: "
        f"start it with --bookie-id {new_id}"
    )


def _list_cookies(metadata_uri: str, data_dir: str, local: Cookie, as_json: bool) -> None:
    async def stored() -> tuple[Cookie, int] | None:
        async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
            try:
                versioned = await cluster.cookies.read(local.bookie_id)
            except NoNodeError:
                return None
            return versioned.value, versioned.version

    found = _run(stored())
    differences = ["no cookie in the metadata"] if found is None else local.differences(found[0])
    if as_json:
        print_json(
            {
                "local": _cookie_json(local),
                "stored": None if found is None else _cookie_json(*found),
                "agree": not differences,
                "differences": differences,
            }
        )
        return
    tables = [_cookie_table(f"cookie in {cookie_path(data_dir)}", local)]
    if found is not None:
        tables.append(_cookie_table(f"cookie at {metadata_uri}", *found))
    show(
        *tables, note="they agree" if not differences else "they differ: " + "; ".join(differences)
    )


async def _check_stopped(metadata_uri: str, bookie_id: str, doing: str) -> None:
    async with await ClusterMetadata.open(metadata_uri) as cluster:
        await _refuse_if_registered(cluster, bookie_id, doing)


async def _delete_stored(metadata_uri: str, bookie_id: str) -> bool:
    async with await ClusterMetadata.open(metadata_uri) as cluster:
        await _refuse_if_registered(cluster, bookie_id, "deleting its cookie")
        try:
            await cluster.cookies.delete(bookie_id)
        except NoNodeError:
            return False
        return True


async def _change_id(metadata_uri: str, data_dir: str, local: Cookie, new_id: str) -> None:
    """Store the cookie under ``new_id``, rewrite the local one, delete the old stored one:
    in that order, so that running it again after a crash finishes the job."""
    if new_id == local.bookie_id:
        raise CommandError(f"the bookie of {data_dir} is {new_id} already")
    async with await ClusterMetadata.open(metadata_uri, require_cluster=True) as cluster:
        instance_id = await cluster.instance_id()
        if local.instance_id and local.instance_id != instance_id:
            raise CommandError(
                f"the bookie of {data_dir} belongs to cluster {local.instance_id}, not to the "
                f"one at {metadata_uri} ({instance_id})"
            )
        await _refuse_if_registered(cluster, local.bookie_id, "changing its id")
        await _refuse_if_registered(cluster, new_id, f"giving its id to {local.bookie_id}")
        # A bookie that never ran with this cluster is stamped with its instance id now.
        new = Cookie(
            new_id,
            local.journal_dirs,
            local.ledger_dirs,
            local.instance_id or instance_id or "",
            local.index_dirs,
        )
        try:
            await cluster.cookies.write(new_id, new)
        except NodeExistsError:
            existing = (await cluster.cookies.read(new_id)).value
            if existing != new:
                raise CommandError(
                    f"bookie {new_id} has a cookie already (of {', '.join(existing.ledger_dirs)})"
                ) from None
        write_local_cookie(data_dir, new)
        # It had none stored, or a run before this one deleted it: the same end.
        with contextlib.suppress(NoNodeError):
            await cluster.cookies.delete(local.bookie_id)


# -- bookieformat --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Wipe:
    """The directories whose contents are deleted, and what they hold."""

    dirs: tuple[str, ...]
    files: int
    size: int


def _inventory(dirs: tuple[str, ...]) -> _Wipe:
    files = size = 0
    for top in dirs:
        for root, _subdirs, names in os.walk(top):
            for name in names:
                files += 1
                try:
                    size += os.lstat(os.path.join(root, name)).st_size
                except FileNotFoundError:
                    continue  # gone meanwhile
    return _Wipe(dirs, files, size)


def _empty(directory: str) -> None:
    """Delete what ``directory`` holds (it stays), then sync it."""
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _format_dirs(
    data_dir: str, ledger_dirs: tuple[str, ...], journal_dirs: tuple[str, ...]
) -> tuple[str, ...]:
    """``<data_dir>/current`` (cookie, default dirs) and every other ledger and journal
    directory of the bookie (from its checkpoint, or given). A directory that cannot be
    learnt is a ``CommandError`` (saying to give them), never a partial format: a bookie
    started with ``--ledger-dir`` keeps its checkpoint there, not under ``data_dir``."""
    current = os.path.join(data_dir, "current")
    layout = learn_dirs(OsFileSystem(), data_dir, ledger_dirs, journal_dirs).layout
    inside = os.path.abspath(current) + os.sep
    dirs = [current] if os.path.isdir(current) else []
    for path in (*layout.ledger_dirs, *layout.journal_dirs):
        if not (os.path.abspath(path) + os.sep).startswith(inside) and path not in dirs:
            dirs.append(path)
    return tuple(dirs)


@click.command()
@metadata_option
@DATA_DIR_OPTION
@LEDGER_DIR_OPTION
@JOURNAL_DIR_OPTION
@click.option("--force", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--delete-cookie", is_flag=True, help="Also delete the bookie's cookie from the metadata."
)
def bookieformat(
    metadata_uri: str,
    data_dir: str,
    ledger_dirs: tuple[str, ...],
    journal_dirs: tuple[str, ...],
    force: bool,
    delete_cookie: bool,
) -> None:
    """Wipe a stopped bookie's data: its journals, entry logs, index, checkpoint and cookie
    (refused while it is registered). It starts empty next time, as a new bookie."""
    if not os.path.isdir(data_dir):
        raise CommandError(f"{data_dir}: no such directory")
    cookie = read_local_cookie(data_dir)
    if cookie is not None:
        _run(_check_stopped(metadata_uri, cookie.bookie_id, "formatting it"))
    elif delete_cookie:
        raise CommandError(f"{data_dir} has no cookie: --delete-cookie does not know the bookie id")
    wipe = _inventory(_format_dirs(data_dir, ledger_dirs, journal_dirs))
    if not wipe.dirs:
        raise CommandError(f"{data_dir} is not a bookie data directory (no current/ in it)")
    who = f"bookie {cookie.bookie_id}" if cookie is not None else "the bookie"
    if not force:
        confirm_deletion(
            f"delete {wipe.files} files ({wipe.size:,} bytes) of {who} in {', '.join(wipe.dirs)}?"
        )
    for directory in wipe.dirs:
        _empty(directory)
    stored = ""
    if delete_cookie and cookie is not None:
        deleted = _run(_delete_stored(metadata_uri, cookie.bookie_id))
        stored = (
            "; its cookie deleted from the metadata" if deleted else "; it had no stored cookie"
        )
    click.echo(
        f"formatted {who}: {wipe.files} files ({wipe.size:,} bytes) deleted from "
        f"{', '.join(wipe.dirs)}{stored}"
    )


commands = (cookie_get, cookie_delete, updatecookie, bookieformat)
