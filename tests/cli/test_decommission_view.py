"""``bkeeper shell decommissionbookie`` while it waits and at its end (issue 42): the live
summary on a terminal, a line per change of state into a pipe (JSON lines with ``--json``),
the table of the ledgers and, at the timeout, the one error line naming what blocks it.

The command runs here against an in-memory cluster staged by hand (metadata only: a ledger
blocked with a worker's reason, one being re-replicated, one not marked yet), so what each
state looks like is checked without waiting for real workers; tests/e2e has the same with
real processes."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import Iterator

import pytest
from google.protobuf import text_format
from rich.console import Console

from bkeeper.autorecovery.decommission_status import (
    AuditState,
    DecommissionStatus,
    LedgerRow,
    LedgerState,
)
from bkeeper.cli._decommission_view import (
    DecommissionView,
    change_json,
    change_line,
    summary_lines,
)
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.meta.layout import ur_lock_path
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.meta.ledger_metadata import LedgerState as MetaState
from bkeeper.meta.memory import drop_memory_tree
from bkeeper.meta.underreplication import BlockedReason
from bkeeper.wire._pb import data_formats_pb2 as pb
from tests.cli.runner import run_cli

GONE = "gone:3181"
WHY = f"no candidate bookie for {GONE} (segment at entry 0): 3 writable, 3 already in the ensemble"
SINCE_MS = 1_700_000_000_000


def blocked_row(ledger_id: int) -> LedgerRow:
    return LedgerRow(
        ledger_id,
        LedgerState.BLOCKED,
        SINCE_MS,
        reason=WHY,
        reason_kind="no_candidate",
        reason_worker="w1",
        remedy="add 1 writable bookie outside its ensemble (workers retry as soon as one "
        "registers)",
    )


def status_of(*rows: LedgerRow, **kwargs: object) -> DecommissionStatus:
    return DecommissionStatus(GONE, {r.ledger_id: r for r in rows}, **kwargs)  # type: ignore[arg-type]


def test_the_summary_counts_then_lists_what_blocks_at_most_its_lines() -> None:
    rows = [
        LedgerRow(1, LedgerState.MOVED, SINCE_MS),
        LedgerRow(2, LedgerState.REPLICATING, SINCE_MS, worker="w2"),
        *(blocked_row(n) for n in range(10, 22)),
    ]
    lines = summary_lines(status_of(*rows, auditor="aud:1"), limit=10)
    assert lines[0] == "1 of 14 moved, 1 being re-replicated, 12 blocked"
    assert lines[1] == (
        f"  ledger 10: blocked: {WHY} (no_candidate); add 1 writable bookie outside its "
        "ensemble (workers retry as soon as one registers), since 22:13:20 UTC"
    )
    assert len(lines) == 12 and lines[10].startswith("  ledger 19: blocked")
    assert lines[11] == (
        f"  ... and 3 more (bkeeper shell listunderreplicated --missing {GONE})"
    )  # two blocked, and the one being re-replicated
    few = summary_lines(status_of(rows[1], blocked_row(10), auditor=None, enabled=False))
    assert few == [
        "0 of 2 moved, 1 being re-replicated, 1 blocked",
        "no auditor is elected: nothing marks the ledgers",
        "auto-recovery is disabled: no worker takes a ledger",
        few[3],
        "  ledger 2: being re-replicated by w2, since 22:13:20 UTC",
    ]


def test_a_change_is_one_plain_line_or_one_json_object() -> None:
    current = status_of(LedgerRow(1, LedgerState.MOVED, SINCE_MS), blocked_row(2))
    assert change_line(current.rows[1], current) == "ledger 1: moved off [1 of 2 moved]"
    assert change_line(current.rows[2], current) == (
        f"ledger 2: blocked: {WHY} (no_candidate); add 1 writable bookie outside its "
        "ensemble (workers retry as soon as one registers), since 22:13:20 UTC [1 of 2 moved]"
    )
    assert json.loads(change_json(current.rows[2], current)) == {
        "ledger_id": 2,
        "state": "blocked",
        "since_ms": SINCE_MS,
        "worker": None,
        "reason": WHY,
        "reason_kind": "no_candidate",
        "reason_worker": "w1",
        "remedy": current.rows[2].remedy,
        "moved": 1,
        "total": 2,
    }


def test_on_a_terminal_the_bar_and_the_summary_are_redrawn_at_each_poll() -> None:
    out = io.StringIO()
    terminal = Console(file=out, force_terminal=True, width=200)
    view = DecommissionView(GONE, console=terminal)
    with view.showing():
        view.progress(0, 2)
        view.update(status_of(LedgerRow(1, LedgerState.QUEUED, SINCE_MS), blocked_row(2)))
        view.progress(1, 2)
        view.update(status_of(LedgerRow(1, LedgerState.MOVED, SINCE_MS), blocked_row(2)))
    shown = out.getvalue()
    assert f"ledgers moved off {GONE}" in shown and "1/2" in shown
    assert "1 of 2 moved, 1 blocked" in shown
    assert f"ledger 2: blocked: {WHY}" in shown
    assert "ledger 2: blocked" in shown and "\n" in shown


def test_into_a_pipe_only_the_changes_are_lines() -> None:
    out = io.StringIO()
    view = DecommissionView(GONE, console=Console(file=out, force_terminal=False, width=300))
    first = status_of(LedgerRow(1, LedgerState.QUEUED, SINCE_MS), blocked_row(2))
    with view.showing():
        view.update(first)
        view.update(first)  # nothing changed: nothing printed
        view.update(status_of(LedgerRow(1, LedgerState.MOVED, SINCE_MS), blocked_row(2)))
    lines = out.getvalue().splitlines()
    assert lines == [
        "ledger 1: queued: marked under-replicated, no worker on it yet, since 22:13:20 UTC "
        "[0 of 2 moved]",
        change_line(blocked_row(2), first),
        "ledger 1: moved off [1 of 2 moved]",
    ]


# -- the command, against a staged in-memory cluster ---------------------------------------
@pytest.fixture
def staged() -> Iterator[tuple[str, dict[str, int]]]:
    """A cluster whose stopped bookie ``GONE`` three ledgers need: ``blocked`` (marked, a
    worker's no-candidate reason), ``copying`` (marked, a worker's lock), ``unmarked``; an
    elected auditor that never audits and no worker that ever finishes."""
    name = f"decommission-{uuid.uuid4().hex[:12]}"
    uri = f"memory://{name}/ledgers"
    ids = asyncio.run(_stage(uri))
    yield uri, ids
    drop_memory_tree(name)


async def _stage(uri: str) -> dict[str, int]:
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
        urm = cluster.underreplication
        await urm.ensure_layout()
        meta = LedgerMetadata(
            ensemble_size=3,
            write_quorum=3,
            ack_quorum=2,
            segments={0: ["a:3181", "b:3181", GONE]},
            password=b"pw",
            state=MetaState.CLOSED,
            last_entry_id=9,
        )
        ids = {}
        for name in ("blocked", "copying", "unmarked"):
            ledger_id, _ = await cluster.ledgers.create(meta)
            ids[name] = int(ledger_id)
        for name in ("blocked", "copying"):
            await urm.mark_underreplicated(ids[name], [GONE])
        await urm.set_blocked(ids["blocked"], BlockedReason("no_candidate", WHY, SINCE_MS, "w1"))
        lock = text_format.MessageToString(pb.LockDataFormat(bookieId="w2")).encode()
        store = cluster.store
        await store.create(ur_lock_path(cluster.root, ids["copying"]), lock, make_parents=True)
        vote = text_format.MessageToString(pb.AuditorVoteFormat(bookieId="aud:1")).encode()
        election = f"{cluster.root}/underreplication/auditorelection/V_0000000000"
        await store.create(election, vote, make_parents=True)
        await store.create(cluster.cookies.path(GONE), b"x", make_parents=True)
        return ids


def test_the_command_names_each_ledger_while_it_waits_and_what_blocks_it_at_its_timeout(
    staged: tuple[str, dict[str, int]],
) -> None:
    uri, ids = staged
    done = run_cli(
        "shell", "decommissionbookie", GONE, "--timeout", "0.5", "--metadata", uri,
        env={"COLUMNS": "300", "BKEEPER_PROGRESS_INTERVAL_S": "60"},
    )  # fmt: skip
    assert done.returncode == 1, (done.stdout, done.stderr)
    lines = done.stderr.splitlines()
    blocked, copying, unmarked = ids["blocked"], ids["copying"], ids["unmarked"]
    assert lines[:3] == [
        f"ledger {blocked}: blocked: {WHY} (no_candidate); add 1 writable bookie outside its "
        "ensemble (workers retry as soon as one registers), since 22:13:20 UTC [0 of 3 moved]",
        f"ledger {copying}: being re-replicated by w2, since {lines[1].split('since ')[1]}",
        f"ledger {unmarked}: waiting for the auditor to mark it under-replicated, since "
        f"{lines[2].split('since ')[1]}",
    ]
    assert len(lines) == 4  # nothing changed after the first look; then the one error line
    assert lines[3].startswith(
        f"error: bookie {GONE}: 3 of 3 ledgers still need it after 0.5 s (0 of 3 moved, 1 being "
        f"re-replicated, 1 waiting for the auditor, 1 blocked); ledger {blocked} blocked: {WHY}"
    )
    assert "add 1 writable bookie outside its ensemble" in lines[3]
    table = done.stdout
    assert f"ledgers of {GONE}" in table
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in table.splitlines()]
    rows = {int(row[0]): row[1:] for row in cells if row and row[0].isdigit()}
    assert rows[blocked][:3] == ["blocked", "2023-11-14 22:13:20 UTC", "-"]
    assert rows[blocked][3].startswith(f"{WHY} (no_candidate); add 1 writable bookie")
    assert (rows[copying][0], rows[copying][2:]) == (
        "replicating",
        ["w2", "being re-replicated by w2"],
    )
    assert rows[unmarked][0] == "awaiting audit"
    assert GONE in asyncio.run(_cookies(uri))  # not decommissioned


async def _cookies(uri: str) -> list[str]:
    async with await ClusterMetadata.open(uri) as cluster:
        return list(await cluster.cookies.bookie_ids())


def test_the_command_with_json_prints_json_lines_then_the_rows(
    staged: tuple[str, dict[str, int]],
) -> None:
    uri, ids = staged
    done = run_cli(
        "shell", "decommissionbookie", GONE, "--timeout", "0.5", "--json", "--metadata", uri
    )
    assert done.returncode == 1, (done.stdout, done.stderr)
    *changes, error = done.stderr.splitlines()
    assert error.startswith(f"error: bookie {GONE}: 3 of 3 ledgers still need it after 0.5 s")
    states = {(c["ledger_id"], c["state"]) for c in map(json.loads, changes)}
    assert states == {
        (ids["blocked"], "blocked"),
        (ids["copying"], "replicating"),
        (ids["unmarked"], "awaiting_audit"),
    }
    assert all(json.loads(c)["total"] == 3 for c in changes)
    final = json.loads(done.stdout)
    assert (final["bookie_id"], final["ledgers"], final["cookie_deleted"]) == (GONE, 3, False)
    assert final["error"] == error.removeprefix("error: ")
    [blocked] = [r for r in final["rows"] if r["ledger_id"] == ids["blocked"]]
    assert (blocked["reason_kind"], blocked["reason"]) == ("no_candidate", WHY)


def test_statuses_compare_by_rows_not_by_counts() -> None:
    one = status_of(blocked_row(1), audit=AuditState.RAN)
    assert one == status_of(blocked_row(1), audit=AuditState.RAN)
    assert one.counts[LedgerState.BLOCKED] == 1 and one.moved == 0
