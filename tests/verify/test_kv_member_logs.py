"""The kv workload reads its members' logs at the end: a follower that found its reader
stuck (and replaced it) is a violation, reported with the line that says where it waited."""

from __future__ import annotations

from pathlib import Path

from bkeeper.verify.kv_workload import LISTED_BUT_GONE, member_log_lines


def test_a_member_log_with_a_stalled_follower_is_found(tmp_path: Path) -> None:
    log = tmp_path / "member-1.log"
    assert member_log_lines(log) == []  # no log (the member never started)
    log.write_text(
        "2026-11-28 22:00:00,000 WARNING bkeeper.meta.zk: ZooKeeper 127.0.0.1:1: reconnected\n"
        "2026-11-28 22:00:20,000 WARNING bkeeper.statemachine.machine: kv-verify: follower "
        "stalled: its reader returned nothing for 15 s ... The reader stood at 3:7\n",
        encoding="utf-8",
    )
    (line,) = member_log_lines(log)
    assert "The reader stood at 3:7" in line
    log.write_text("nothing of the kind\n", encoding="utf-8")
    assert member_log_lines(log) == []


def test_a_member_log_with_a_listed_ledger_gone_is_found(tmp_path: Path) -> None:
    """The line a named log's reader writes when the log lists a ledger that is gone (verify
    seed 50042's course) is found by its marker, and only by it."""
    log = tmp_path / "member-0.log"
    log.write_text(
        "2026-11-29 00:00:00,000 WARNING bkeeper.namedlog.reader: log kv-verify: ledger 9 is "
        "listed but gone (deleted while the log lists it); whatever it held is lost: reading "
        "on after it\n",
        encoding="utf-8",
    )
    (line,) = member_log_lines(log, LISTED_BUT_GONE)
    assert "ledger 9" in line
    assert member_log_lines(log) == []
