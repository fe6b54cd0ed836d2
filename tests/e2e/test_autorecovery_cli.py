"""``bkeeper autorecovery``, ``bkeeper bookie --autorecovery`` and the auto-recovery shell
commands against a real ZooKeeper and real bookie processes; bad input is one ``error:``
line."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.client import BookKeeper
from tests.cli.runner import run_cli
from tests.e2e.helpers import one_error_line
from tests.e2e.helpers import run_in_process as run
from tests.e2e.helpers import run_process as process

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

PASSWORD = b"pw"
WAIT_S = 60.0


def wait_line(log_path: Path, proc: subprocess.Popen[bytes], text: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if text.encode() in log_path.read_bytes():
            return
        assert proc.poll() is None, log_path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"no {text!r} in {log_path}: {log_path.read_text()}")


@pytest.fixture
def start_autorecovery(real_cluster, tmp_path: Path) -> Iterator[object]:
    """Starts ``bkeeper autorecovery`` processes; each is killed and reaped at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> tuple[subprocess.Popen[bytes], Path]:
        log_path = tmp_path / f"autorecovery-{len(procs)}.log"
        with log_path.open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "bkeeper", "autorecovery", "--metadata",
                 real_cluster.uri, *args],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        procs.append(proc)
        wait_line(log_path, proc, "ready (metadata ")
        return proc, log_path

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def until(check, what: str) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(WAIT_S):
        while not await check():
            await asyncio.sleep(0.1)


@pytest.mark.parametrize("real_cluster", [1], indirect=True)
async def test_autorecovery_process_is_the_auditor_until_it_stops(
    real_cluster, start_autorecovery
) -> None:
    uri = real_cluster.uri
    none = await process(uri, "shell", "whoisauditor")
    assert one_error_line(none) == "error: no auditor is elected (no auto-recovery process runs)"
    proc, log_path = await asyncio.to_thread(start_autorecovery, "--id", "tester:1")
    who = await run(uri, "shell", "whoisauditor")
    assert (who.returncode, who.stdout) == (0, "tester:1\n"), who.stderr
    expected = {
        "enabled": True, "auditor": "tester:1", "lost_bookie_recovery_delay_s": 0,
        "locked": [], "under_replicated": 0,
    }  # fmt: skip

    async def status_is_expected() -> bool:  # the auditor creates the delay node as it starts
        status = await run(uri, "shell", "queryautorecoverystatus", "--json")
        return bool(json.loads(status.stdout) == expected)

    await until(status_is_expected, "the auditor's status")
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 30) == 0
    assert "autorecovery tester:1 stopped" in log_path.read_text()
    gone = await process(uri, "shell", "whoisauditor")
    assert gone.returncode == 1


@pytest.mark.parametrize("real_cluster", [1], indirect=True)
async def test_bad_autorecovery_options_are_one_line(real_cluster) -> None:
    uri = real_cluster.uri
    cases = {
        ("-o", "nope=1"): "no autorecovery option named 'nope'",
        ("-o", "ledgers_in_parallel=0"): "ledgers_in_parallel: must be a positive integer",
        ("-o", "rate_bytes_per_s=fast"): "rate_bytes_per_s: 'fast' is not an integer",
        ("-o", "lost_bookie_recovery_delay_s"): "is not key=value",
        ("--id", "has space"): "id: 'has space' has characters other than",
    }
    for args, expected in cases.items():
        result = await run(uri, "autorecovery", *args)
        assert expected in one_error_line(result, code=2), (args, result.stderr)
    nowhere = uri.replace("/ledgers", "/nowhere/ledgers")
    for args in (("autorecovery",), ("shell", "whoisauditor"), ("shell", "recover", "a:1")):
        # a server command (signal handlers) is a process of its own
        result = await (process if args[0] == "autorecovery" else run)(nowhere, *args)
        assert one_error_line(result).startswith(f"error: no cluster at {nowhere}"), args


def test_bookie_autorecovery_usage_mistakes(tmp_path: Path) -> None:
    def bookie(*args: str) -> subprocess.CompletedProcess[str]:  # refused before it serves
        return run_cli("bookie", "--data-dir", str(tmp_path / "b"), *args)

    alone = bookie("--autorecovery")
    assert "--autorecovery needs --metadata" in one_error_line(alone, code=2)
    stray = bookie("-o", "ledgers_in_parallel=2", "--metadata", "zk://127.0.0.1:1/x")
    assert "ledgers_in_parallel: auto-recovery options, for a bookie started with " \
        "--autorecovery" in one_error_line(stray, code=2)  # fmt: skip
    bad = bookie("--autorecovery", "-o", "open_ledger_grace_period_ms=-1")
    assert "open_ledger_grace_period_ms: must be an integer >= 0, got -1" in one_error_line(
        bad, code=2
    )
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("real_cluster", [1], indirect=True)
async def test_delay_flag_and_listings(real_cluster) -> None:
    uri = real_cluster.uri
    unset = await run(uri, "shell", "lostbookierecoverydelay")
    assert unset.stdout.startswith("lostBookieRecoveryDelay not set"), unset.stderr
    assert (await run(uri, "shell", "lostbookierecoverydelay", "--set", "7")).returncode == 0
    got = await run(uri, "shell", "lostbookierecoverydelay")
    assert got.stdout == "lostBookieRecoveryDelay: 7 s\n"
    negative = await run(uri, "shell", "lostbookierecoverydelay", "--set", "-1")
    assert "must be 0 or more seconds, got -1" in one_error_line(negative)

    disabled = await run(uri, "shell", "autorecovery", "--disable")
    assert disabled.stdout == "auto-recovery is disabled\n", disabled.stderr
    assert (await run(uri, "shell", "autorecovery")).stdout == "auto-recovery is disabled\n"
    no_audit = await run(uri, "shell", "triggeraudit")
    assert "auto-recovery is disabled" in one_error_line(no_audit)
    enabled = await run(uri, "shell", "autorecovery", "--enable")
    assert enabled.stdout == "auto-recovery is enabled\n"
    no_auditor = await run(uri, "shell", "triggeraudit")
    assert "no auditor is elected" in one_error_line(no_auditor)

    listed = await run(uri, "shell", "listunderreplicated", "--json")
    assert (listed.returncode, json.loads(listed.stdout)) == (0, [])
    unknown = await run(uri, "shell", "recover", "nobody:1")
    assert one_error_line(unknown).startswith("error: unknown bookie nobody:1: not registered")
    running = await run(uri, "shell", "decommissionbookie", real_cluster.bookie_id(0))
    assert one_error_line(running) == (
        f"error: bookie {real_cluster.bookie_id(0)} is still registered (writable): "
        "stop it before decommissioning"
    )


async def _write_ledgers(uri: str, count: int, entries: int) -> list[int]:
    ids = []
    async with BookKeeper(uri) as bk:
        for _ in range(count):
            handle = await bk.create_ledger(3, 2, 2, password=PASSWORD)
            for entry_id in range(entries):
                await handle.append(b"entry-%d" % entry_id)
            await handle.close()
            ids.append(handle.ledger_id)
    return ids


async def _bookies_of(uri: str, ledger_ids: list[int]) -> set[str]:
    async with BookKeeper(uri) as bk:
        found: set[str] = set()
        for ledger_id in ledger_ids:
            meta = await bk.ledger_metadata(ledger_id)
            found.update(str(b) for ensemble in meta.segments.values() for b in ensemble)
        return found


async def _read_all(uri: str, ledger_ids: list[int], entries: int) -> None:
    async with BookKeeper(uri) as bk:
        for ledger_id in ledger_ids:
            reader = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
            got = [e.data async for e in reader.read(0, entries - 1)]
            assert got == [b"entry-%d" % i for i in range(entries)]


@pytest.mark.parametrize("real_cluster", [4], indirect=True)
async def test_recover_by_hand_dry_run_then_for_real(real_cluster) -> None:
    uri = real_cluster.uri
    ledgers = await _write_ledgers(uri, 3, 20)
    # The lost bookie holds a ledger: E3 of 4 bookies leaves a given bookie out of all three
    # ledgers one time in 64 (a CI run's failure: then nothing needed recovering).
    first = await _bookies_of(uri, ledgers[:1])
    victim = next(i for i in range(4) if real_cluster.bookie_id(i) in first)
    lost = real_cluster.bookie_id(victim)
    await asyncio.to_thread(real_cluster.stop, victim, signal.SIGKILL)
    await until(lambda: _unregistered(uri, lost), "the bookie's registration gone")
    planned = await run(uri, "shell", "recover", lost, "--dry-run", "--json")
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    needing = [ledger for ledger in ledgers if lost in await _bookies_of(uri, [ledger])]
    assert [row["ledger_id"] for row in plan] == needing
    assert all(row["done"] and row["entries_copied"] == 0 for row in plan)
    assert lost in await _bookies_of(uri, ledgers)  # a dry run changes nothing

    done = await run(uri, "shell", "recover", lost)
    assert done.returncode == 0, done.stderr
    assert "recovered" in done.stdout
    assert lost not in await _bookies_of(uri, ledgers)
    await _read_all(uri, ledgers, 20)
    again = await run(uri, "shell", "recover", lost, "--json")
    assert (again.returncode, json.loads(again.stdout)) == (0, [])


async def _unregistered(uri: str, bookie_id: str) -> bool:
    result = await run(uri, "shell", "listbookies", "--all")
    return bookie_id not in result.stdout


AUTO = (4, ("--autorecovery",))


@pytest.mark.parametrize("real_cluster", [AUTO], indirect=True)
async def test_bookies_with_autorecovery_repair_a_killed_bookie_then_decommission(
    real_cluster,
) -> None:
    uri = real_cluster.uri
    ids = {real_cluster.bookie_id(i) for i in range(4)}

    async def auditor() -> str:
        return (await run(uri, "shell", "whoisauditor")).stdout.strip()

    async def elected() -> bool:
        return await auditor() in ids

    await until(elected, "an auditor among the bookies")
    victim = real_cluster.index_of(await auditor())  # the auditor itself: it must move
    lost = real_cluster.bookie_id(victim)
    ledgers = await _write_ledgers(uri, 4, 20)
    while lost not in await _bookies_of(uri, ledgers):  # 1 in 256: else nothing to repair
        ledgers += await _write_ledgers(uri, 1, 20)
    await asyncio.to_thread(real_cluster.stop, victim, signal.SIGKILL)

    async def repaired() -> bool:
        listed = json.loads((await run(uri, "shell", "listunderreplicated", "--json")).stdout)
        return not listed and lost not in await _bookies_of(uri, ledgers)

    await until(repaired, "every ledger off the killed bookie")
    assert await auditor() in ids - {lost}
    await _read_all(uri, ledgers, 20)
    retired = await run(uri, "shell", "decommissionbookie", lost, "--json")
    assert retired.returncode == 0, retired.stderr
    assert json.loads(retired.stdout) == {
        "bookie_id": lost, "ledgers": 0, "cookie_deleted": True, "rows": [],
    }  # fmt: skip


@pytest.mark.parametrize("real_cluster", [AUTO], indirect=True)
async def test_decommission_triggers_the_audit_the_delay_holds_back(real_cluster) -> None:
    uri = real_cluster.uri
    assert (await run(uri, "shell", "lostbookierecoverydelay", "--set", "3600")).returncode == 0
    ledgers = await _write_ledgers(uri, 3, 10)
    first = await _bookies_of(uri, ledgers[:1])
    victim = next(i for i in range(4) if real_cluster.bookie_id(i) in first)
    lost = real_cluster.bookie_id(victim)
    needing = [lid for lid in ledgers if lost in await _bookies_of(uri, [lid])]
    await asyncio.to_thread(real_cluster.stop, victim, signal.SIGKILL)
    await until(lambda: _unregistered(uri, lost), "the bookie's registration gone")
    # The delay holds the marking back; decommission triggers the audit that skips it.
    listed = json.loads((await run(uri, "shell", "listunderreplicated", "--json")).stdout)
    assert listed == []
    retired = await run(uri, "shell", "decommissionbookie", lost, "--json")
    assert retired.returncode == 0, retired.stderr
    report = json.loads(retired.stdout)
    assert report == {
        "bookie_id": lost, "ledgers": len(needing), "cookie_deleted": True,
        "rows": report["rows"],
    }  # fmt: skip
    assert [(r["ledger_id"], r["state"]) for r in report["rows"]] == [
        (lid, "moved") for lid in needing
    ]
    # per ledger, as it went: one JSON line per change of state, the last one "moved"
    changes = [json.loads(line) for line in retired.stderr.splitlines()]
    last = {change["ledger_id"]: change for change in changes}
    assert sorted(last) == needing
    assert all(change["state"] == "moved" for change in last.values()), changes
    assert changes[-1]["moved"] == changes[-1]["total"] == len(needing)
    first = {change["ledger_id"]: change["state"] for change in reversed(changes)}
    assert set(first.values()) <= {"awaiting_audit", "queued", "replicating", "moved"}, changes
    assert lost not in await _bookies_of(uri, ledgers)
    await _read_all(uri, ledgers, 10)
    again = await run(uri, "shell", "decommissionbookie", lost)
    assert one_error_line(again).startswith(f"error: unknown bookie {lost}: not registered")


async def _write_ledger_on_every_bookie(uri: str, bookies: int, entries: int) -> int:
    async with BookKeeper(uri) as bk:
        handle = await bk.create_ledger(bookies, 2, 2, password=PASSWORD)
        for entry_id in range(entries):
            await handle.append(b"entry-%d" % entry_id)
        await handle.close()
        return handle.ledger_id


def _decommission_process(uri: str, bookie: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "BKEEPER_PROGRESS_INTERVAL_S": "3600", "COLUMNS": "400"}
    return subprocess.Popen(
        [sys.executable, "-m", "bkeeper", "shell", "decommissionbookie", bookie,
         "--metadata", uri, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def _wait_for_line(proc: subprocess.Popen[str], text: str) -> tuple[list[str], bool]:
    """The stderr lines up to the first holding ``text``, and whether the process still
    ran then."""
    assert proc.stderr is not None
    lines: list[str] = []
    while line := proc.stderr.readline():
        lines.append(line.rstrip("\n"))
        if text in line:
            return lines, proc.poll() is None
    raise AssertionError(f"no {text!r} in what it printed: {lines}")


@pytest.mark.parametrize("real_cluster", [AUTO], indirect=True)
async def test_decommission_names_the_ledger_that_blocks_it_while_it_runs_and_at_its_timeout(
    real_cluster,
) -> None:
    """Issue 42: one ledger moves off the stopped bookie; the other is on every bookie
    (E4 of 4), so no bookie can take the stopped one's place. While the decommission waits
    it says that ledger is blocked, with the worker's reason; at its timeout the table and
    the one error line name it, with what to do (add a bookie)."""
    uri = real_cluster.uri
    ids = {real_cluster.bookie_id(i) for i in range(4)}

    async def auditor() -> str:
        return (await run(uri, "shell", "whoisauditor")).stdout.strip()

    async def elected() -> bool:
        return await auditor() in ids

    await until(elected, "an auditor among the bookies")
    # the delay holds the marking back: the ledgers move while the decommission looks on
    assert (await run(uri, "shell", "lostbookierecoverydelay", "--set", "3600")).returncode == 0
    [movable] = await _write_ledgers(uri, 1, 10)
    stuck = await _write_ledger_on_every_bookie(uri, 4, 10)
    leader = await auditor()  # not the one stopped: no election to wait for
    lost = sorted((await _bookies_of(uri, [movable])) - {leader})[0]
    await asyncio.to_thread(real_cluster.stop, real_cluster.index_of(lost), signal.SIGKILL)
    await until(lambda: _unregistered(uri, lost), "the bookie's registration gone")

    why = f"no candidate bookie for {lost} (segment at entry 0): 3 writable, 3 already in"
    proc = _decommission_process(uri, lost, "--timeout", "20")
    try:
        said = f"ledger {stuck}: blocked: no candidate"
        lines, running = await asyncio.to_thread(_wait_for_line, proc, said)
        out, err = await asyncio.to_thread(proc.communicate, timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert running, "the blocked ledger was said only after the decommission ended"
    # a worker may hold the ledger at that moment, retrying it: said between reason and remedy
    retrying = r"(; \S+ is trying it again)?"
    blocked = (
        rf"ledger {stuck}: blocked: {re.escape(why)} the ensemble \(no_candidate\){retrying}; add"
    )
    assert re.match(blocked, lines[-1]), lines[-1]
    assert lines[0] == (
        f"ledger {movable}: waiting for the auditor to mark it under-replicated, since "
        f"{lines[0].split('since ')[1]}"
    )
    lines += err.splitlines()
    assert f"ledger {movable}: moved off [1 of 2 moved]" in lines
    assert proc.returncode == 1, (out, lines)
    error = lines[-1]
    assert error.startswith(f"error: bookie {lost}: 1 of 2 ledgers still need it after 20 s")
    assert f"; ledger {stuck} blocked: {why}" in error
    assert "add 1 writable bookie outside its ensemble" in error
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines()]
    rows = {int(row[0]): row[1:] for row in cells if row and row[0].isdigit()}
    assert rows[movable][0] == "moved"
    assert rows[stuck][0] == "blocked" and rows[stuck][3].startswith(why)

    # with --json: one JSON line per ledger (its state as the first poll found it), the rows
    again = await asyncio.to_thread(
        _decommission_process(uri, lost, "--timeout", "2", "--json").communicate, timeout=120
    )
    *changes, error = again[1].splitlines()
    assert error.startswith(f"error: bookie {lost}: 1 of 1 ledgers still need it after 2 s")
    # the first poll's state; a later poll may see the worker trying it again (a change)
    change, *later = [json.loads(line) for line in changes]
    assert {c["ledger_id"] for c in later} <= {stuck}
    assert (change["ledger_id"], change["state"], change["reason_kind"]) == (
        stuck, "blocked", "no_candidate",
    )  # fmt: skip
    assert change["reason"].startswith(why) and change["remedy"].startswith("add 1 writable")
    [row] = json.loads(again[0])["rows"]
    assert row == {key: change[key] for key in row}
