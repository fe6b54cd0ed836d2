"""``bkeeper verify --sim`` as a user runs it: seeds in worker processes, the summary table, a
replay's trace hash, a bug put back found and shrunk, and bad input refused."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.cli.runner import run_cli

#: The campaign's workers are processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")


def verify_sim(*args: str) -> subprocess.CompletedProcess[str]:
    """A real ``bkeeper verify --sim`` process (its campaign's worker pool, and the
    resource tracker multiprocessing starts with it, end with it)."""
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "verify", "--sim", *args],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def _hash(output: str) -> str:
    found = re.search(r"trace hash ([0-9a-f]{32})", output)
    assert found, output
    return found.group(1)


def test_seeds_run_and_a_seed_replays_with_its_trace_hash() -> None:
    result = verify_sim("--seeds", "2", "--seed", "7", "--duration", "6")
    assert result.returncode == 0, result.stderr
    assert "no violation in 2 seed(s)" in result.stdout
    assert re.search(r"seeds\s+│\s+2", result.stdout), result.stdout
    assert "seeds per minute" in result.stdout
    first = verify_sim("--seeds", "1", "--seed", "7", "--duration", "6")
    again = verify_sim("--seeds", "1", "--seed", "7", "--duration", "6", "--jobs", "1")
    assert first.returncode == again.returncode == 0
    assert _hash(first.stdout) == _hash(again.stdout)


def test_a_bug_put_back_is_found_shrunk_and_told_with_its_replay() -> None:
    result = verify_sim("--seeds", "1", "--seed", "1", "--bug", "recovery-no-fence")
    assert result.returncode == 1
    assert "acknowledged past its seal" in result.stdout
    assert "the history of ledger(s)" in result.stdout
    assert "fault(s) lead to the violation" in result.stdout
    assert (
        "replay with: bkeeper verify --sim --seed 1 --seeds 1 --workload ledger --duration 30 "
        "--bug recovery-no-fence" in result.stdout
    )
    assert result.stderr.strip().splitlines()[-1] == ("error: 1 of 1 seed(s) found a violation")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--nemesis", "kill"), "unknown fault kill"),
        (("--nemesis", "member-crash"), "--nemesis member-crash: only with --workload kv"),
        (("--bug", "nope"), "--bug: unknown nope"),
        (("--duration", "0"), "--duration: must be above 0"),
        (("--metadata", "zk://127.0.0.1:2181/ledgers"), "leave out --metadata"),
    ],
)
def test_bad_input_is_refused_with_one_line(args: tuple[str, ...], message: str) -> None:
    result = run_cli("verify", "--sim", "--seeds", "1", *args)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_bug_without_sim_is_refused() -> None:
    result = run_cli("verify", "--bug", "ack-quorum-one")
    assert result.returncode == 2
    assert "--bug: only with --sim" in result.stderr
