"""The bookie-local admin endpoints of a real bookie in this process (its real files, its
real mode switches): server_config, state/readonly, last_log_mark, list_disk_file."""

from __future__ import annotations

import os
from pathlib import Path

from bkeeper.server import Bookie
from tests.server.admin_client import call

READONLY = "/api/v1/bookie/state/readonly"
CONFIG = "/api/v1/config/server_config"


async def test_server_config_shows_the_options_and_refuses_changes(start_bookie) -> None:
    bookie: Bookie = await start_bookie(
        http_port=0,
        http_admin_writes=True,
        gc_wait_ms=123_456,
        storage={"write_cache_bytes_max": 3 << 20},
    )
    answer = await call(bookie.http_port, "GET", CONFIG)
    assert answer.status == 200
    values = answer.json()
    assert values["gc_wait_ms"] == 123_456
    assert values["write_cache_bytes_max"] == 3 << 20
    assert values["http_port"] == 0 and values["http_admin_writes"] is True
    assert values["data_dir"] == bookie.config.data_dir
    assert "extra" not in values
    put = await call(bookie.http_port, "PUT", CONFIG, {"gc_wait_ms": 1})
    assert (put.status, put.error) == (
        409,
        "the configuration of a running bookie is frozen: change it in its settings "
        "(--conf, -o) and restart it",
    )


async def test_readonly_switches_the_bookie_both_ways(start_bookie) -> None:
    bookie: Bookie = await start_bookie(http_port=0, http_admin_writes=True)
    seen: list[bool] = []
    bookie.add_readonly_listener(seen.append)
    assert (await call(bookie.http_port, "GET", READONLY)).json() == {"readOnly": False}
    on = await call(bookie.http_port, "PUT", READONLY, {"readOnly": True})
    assert (on.status, on.json()) == (200, {"readOnly": True})
    assert bookie.state.readonly is True and bookie.status().read_only is True
    assert (await call(bookie.http_port, "GET", READONLY)).json() == {"readOnly": True}
    off = await call(bookie.http_port, "PUT", READONLY, {"readOnly": False})
    assert (off.status, off.json()) == (200, {"readOnly": False})
    assert bookie.state.readonly is False
    assert seen == [True, False]


async def test_a_bookie_configured_read_only_stays_so_saying_why(start_bookie) -> None:
    bookie: Bookie = await start_bookie(http_port=0, http_admin_writes=True, readonly=True)
    answer = await call(bookie.http_port, "PUT", READONLY, {"readOnly": False})
    assert (answer.status, answer.error) == (
        409,
        f"bookie {bookie.bookie_id} stays read-only: the bookie is configured read-only (readonly)",
    )
    assert bookie.state.readonly is True


async def test_a_bad_readonly_body_is_400_naming_the_field(start_bookie) -> None:
    bookie: Bookie = await start_bookie(http_port=0, http_admin_writes=True)
    for body, message in (
        ({}, "readOnly: must be true or false, got None"),
        ({"readOnly": "yes"}, "readOnly: must be true or false, got 'yes'"),
        ({"readonly": True}, "unknown field 'readonly' in the body; expected readOnly"),
    ):
        answer = await call(bookie.http_port, "PUT", READONLY, body)
        assert (answer.status, answer.error) == (400, message)
    assert bookie.state.readonly is False


async def test_last_log_mark_and_the_files_on_disk(start_bookie, tmp_path: Path) -> None:
    bookie: Bookie = await start_bookie(http_port=0)
    assert bookie.storage is not None
    bookie.storage.checkpoint()
    mark = await call(bookie.http_port, "GET", "/api/v1/bookie/last_log_mark")
    assert mark.status == 200
    journal_dir = os.path.join(bookie.config.data_dir, "current", "journal")
    ((directory, position),) = mark.json().items()
    assert directory == journal_dir
    assert set(position) == {"logFileId", "logFileOffset"}
    assert position["logFileId"] >= 1 and position["logFileOffset"] >= 0

    every = (await call(bookie.http_port, "GET", "/api/v1/bookie/list_disk_file")).json()
    assert set(every) == {"journal files", "entrylog files", "index files"}
    journals = {f["name"] for f in every["journal files"]}
    on_disk = {name for name in os.listdir(journal_dir) if name.endswith(".txn")}
    assert journals == on_disk  # none before the first add (tests/e2e: with data)
    assert {f["kind"] for f in every["index files"]} == {"index", "checkpoint"}
    only = await call(bookie.http_port, "GET", "/api/v1/bookie/list_disk_file?file_type=journal")
    assert only.json() == {"journal files": every["journal files"]}
    bad = await call(bookie.http_port, "GET", "/api/v1/bookie/list_disk_file?file_type=txn")
    assert (bad.status, bad.error) == (
        400,
        "file_type: must be one of journal, entrylog, index, got 'txn'",
    )


async def test_what_bkeeper_has_no_use_for_is_501_saying_why(start_bookie) -> None:
    bookie: Bookie = await start_bookie(http_port=0, http_admin_writes=True)
    expand = await call(bookie.http_port, "PUT", "/api/v1/bookie/expand_storage", {})
    assert (expand.status, expand.error) == (
        501,
        "not supported: a bookie takes its directories at start; add the directory to "
        "ledger_dirs (--ledger-dir) and restart it",
    )
    for method in ("GET", "PUT"):
        compact = await call(bookie.http_port, method, "/api/v1/bookie/entry_location_compact")
        assert compact.status == 501
        assert compact.error.startswith("not supported: entry locations are in bkeeper's own")
