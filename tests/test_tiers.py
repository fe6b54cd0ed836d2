"""The tiers (tests/tiers.py), in pytest sessions of their own: a test is an integration
test by the fixtures it uses; one that starts a process, or takes a process fixture out of
pytest's sight, without saying so fails naming what it did."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.tiers import PROCESS_FIXTURES, is_integration

ROOT = Path(__file__).resolve().parent.parent

INNER = """
import subprocess
import pytest

def test_pure():
    assert 1 + 1 == 2

def test_spawns_unsaid():
    subprocess.run(["true"], check=True)

def test_spawns_said(subprocesses):
    subprocess.run(["true"], check=True)

@pytest.fixture
def starts_one(subprocesses):
    subprocess.run(["true"], check=True)

def test_through_a_fixture(starts_one):
    pass

@pytest.fixture(params=["plain", "real"])
def unsaid(request):
    if request.param == "real":
        request.getfixturevalue("subprocesses")

def test_taken_unsaid(unsaid):
    pass

@pytest.fixture(params=["plain", pytest.param("real", marks=pytest.mark.takes("subprocesses"))])
def said(request):
    if request.param == "real":
        request.getfixturevalue("subprocesses")

def test_taken_said(said):
    pass
"""


def _session(tmp_path: Path, *args: str) -> dict[str, str]:
    """Each inner test's outcome (``-rA`` lines: PASSED, FAILED, ERROR), by its name."""
    (tmp_path / "test_inner.py").write_text(textwrap.dedent(INNER))
    command = [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-p", "no:cacheprovider",
               "-p", "no:randomly", "-q", "-rA", f"--basetemp={tmp_path / 'inner'}",
               str(tmp_path / "test_inner.py"), *args]  # fmt: skip
    env = {**os.environ, "BKEEPER_TEST_LEFTOVER_WAIT_S": "1"}
    done = subprocess.run(
        command, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    outcomes: dict[str, str] = {}
    for outcome, name in re.findall(r"^(PASSED|FAILED|ERROR) \S+::(\S+)", done.stdout, re.M):
        outcomes[name] = "ERROR" if outcomes.get(name) == "PASSED" else outcome
    outcomes["_stdout"] = done.stdout
    return outcomes


def test_a_test_is_in_the_tier_of_the_fixtures_it_declares(
    tmp_path: Path, subprocesses: None
) -> None:
    every = _session(tmp_path)
    out = every.pop("_stdout")
    assert every == {
        "test_pure": "PASSED",
        "test_spawns_unsaid": "ERROR",
        "test_spawns_said": "PASSED",
        "test_through_a_fixture": "PASSED",
        "test_taken_unsaid[plain]": "PASSED",
        "test_taken_unsaid[real]": "ERROR",
        "test_taken_said[plain]": "PASSED",
        "test_taken_said[real]": "PASSED",
    }, out
    assert "test_spawns_unsaid started 1 process(es) (subprocess.Popen ['true'])" in out
    assert "took subprocesses with getfixturevalue" in out

    in_process = _session(tmp_path, "-m", "not integration")
    in_process.pop("_stdout")
    assert set(in_process) == {
        "test_pure",
        "test_spawns_unsaid",
        "test_taken_unsaid[plain]",
        "test_taken_unsaid[real]",
        "test_taken_said[plain]",
    }


def test_the_suites_process_fixtures_mark_their_users(request: pytest.FixtureRequest) -> None:
    """This test uses none; the suite's ZooKeeper fixture is one of them."""
    assert not is_integration(request.node)
    assert {"zookeeper", "real_cluster", "spark", "sandbox", "subprocesses"} <= PROCESS_FIXTURES
