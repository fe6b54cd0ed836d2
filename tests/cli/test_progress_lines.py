"""Long work shows progress off a terminal too (issue 39): rich draws nothing into a pipe
until the work ends, so a CI log showed a long ``shell recover`` as silent. Plain lines now,
one every interval while the work lasts; none for work shorter than one."""

from __future__ import annotations

import re
import time

import pytest

from bkeeper.cli._progress import INTERVAL_ENV, PLAIN_INTERVAL_S, elapsed, plain_interval_s
from bkeeper.cli.shell_ops import progress


def test_plain_lines_while_the_work_lasts(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(INTERVAL_ENV, "0.1")
    with progress("recovering ledgers") as advance:
        advance(0, 40)
        time.sleep(0.35)
        advance(3, 40)
        time.sleep(0.35)
    lines = capsys.readouterr().err.splitlines()
    assert 4 <= len(lines) <= 8, lines
    assert all(re.fullmatch(r"recovering ledgers: (0|3) of 40, 0 s", line) for line in lines)
    assert lines[0].startswith("recovering ledgers: 0 of 40") and lines[-1].startswith(
        "recovering ledgers: 3 of 40"
    )


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
