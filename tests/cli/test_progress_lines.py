"""Long work shows progress off a terminal too (issue 39): rich draws nothing into a pipe
until the work ends, so a CI log showed a long ``shell recover`` as silent. Plain lines now,
one every interval while the work lasts; none for work shorter than one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bkeeper.cli._progress import INTERVAL_ENV, PLAIN_INTERVAL_S, elapsed, plain_interval_s
from bkeeper.cli.shell_ops import progress


def test_plain_lines_while_the_work_lasts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines come while the work lasts (waited for, two of each state), each the state at
    that moment, in order; at most one an interval (a flood fails: the bound counts the
    measured time, which load can only lengthen)."""
    monkeypatch.setenv(INTERVAL_ENV, "0.1")
    lines: list[str] = []

    def wait_for(count: int, text: str) -> None:
        deadline = time.monotonic() + 30  # a hang guard
        while sum(text in line for line in lines) < count:
            assert time.monotonic() < deadline, lines
            time.sleep(0.02)
            lines.extend(capsys.readouterr().err.splitlines())

    started = time.monotonic()
    with progress("recovering ledgers") as advance:
        advance(0, 40)
        wait_for(2, "0 of 40")
        advance(3, 40)
        wait_for(2, "3 of 40")
    lasted_s = time.monotonic() - started
    lines.extend(capsys.readouterr().err.splitlines())
    assert all(re.fullmatch(r"recovering ledgers: (0|3) of 40, \d+ s", line) for line in lines)
    first_3 = next(i for i, line in enumerate(lines) if "3 of 40" in line)
    assert all("0 of 40" in line for line in lines[:first_3]), lines
    assert all("3 of 40" in line for line in lines[first_3:]), lines
    assert len(lines) <= lasted_s / 0.1 + 2, (lasted_s, lines)


def test_the_item_just_done_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "0.1")
    lines: list[str] = []
    with progress("recovering ledgers") as advance:
        advance(3, 40, "ledger 12")
        deadline = time.monotonic() + 30  # a hang guard
        while not lines:
            assert time.monotonic() < deadline
            time.sleep(0.02)
            lines.extend(capsys.readouterr().err.splitlines())
    lines.extend(capsys.readouterr().err.splitlines())
    assert all(
        re.fullmatch(r"recovering ledgers: ledger 12 \(3 of 40\), \d+ s", line) for line in lines
    ), lines


def test_work_shorter_than_one_interval_prints_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with progress("checking bookies") as advance:
        advance(1, None)
    assert capsys.readouterr().err == ""


def test_the_interval_and_elapsed_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(INTERVAL_ENV, raising=False)
    assert plain_interval_s() == PLAIN_INTERVAL_S == 2.0
    for bad in ("", "0", "-1", "soon"):
        monkeypatch.setenv(INTERVAL_ENV, bad)
        assert plain_interval_s() == PLAIN_INTERVAL_S
    monkeypatch.setenv(INTERVAL_ENV, "30")
    assert plain_interval_s() == 30.0
    assert [elapsed(s) for s in (0.4, 59.9, 65, 3_725)] == ["0 s", "59 s", "1 min 05 s",
                                                          "1 h 02 min"]  # fmt: skip


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "bench", *args],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, INTERVAL_ENV: "0.05"},
    )  # fmt: skip


def test_a_bench_without_bars_shows_its_time_into_a_pipe(subprocesses: None) -> None:
    """Before: nothing on stderr until the table (``bench codec`` at its default count:
    15 s of silence)."""
    result = _bench("codec", "--count", "20000")
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines and all(re.fullmatch(r"bench codec: \d+ s", line) for line in lines), lines
    assert "bkeeper bench" in result.stdout


def test_a_bench_with_bars_prints_their_counts_into_a_pipe(
    subprocesses: None, tmp_path: Path
) -> None:
    """Before: rich's bars drew nothing off a terminal."""
    result = _bench("storage", "--count", "100000", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    assert lines, "no progress line"
    assert all(re.fullmatch(r"adding: [\d,]+ of 100,000", line) for line in lines), lines
