"""A bookie that serves no HTTP does without aiohttp: importing it (its client makes TLS
contexts at import) was a third of a bookie process's start-up CPU (0.9-1.0 s -> 0.6-0.7 s,
docs/benchmarks.md "Bookie start-up"). Checked in a fresh interpreter: the test process has
imported everything already."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

_PROBE = """
import json, sys
import bkeeper.cli.bookie  # what ``bkeeper bookie`` imports before it runs
from bkeeper.server import Bookie, BookieConfig
after_import = sorted(m for m in sys.modules if m.split(".")[0] == "aiohttp")
Bookie(BookieConfig(data_dir=sys.argv[1], http_port=None if sys.argv[2] == "none" else 0))
after_bookie = sorted(m for m in sys.modules if m.split(".")[0] == "aiohttp")
print(json.dumps([after_import, after_bookie]))
"""


def _aiohttp_modules(data_dir: Path, http: bool) -> tuple[list[str], list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(data_dir), "0" if http else "none"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    after_import, after_bookie = json.loads(done.stdout)
    return after_import, after_bookie


def test_a_bookie_without_http_imports_no_aiohttp(tmp_path: Path) -> None:
    assert _aiohttp_modules(tmp_path / "plain", http=False) == ([], [])


def test_a_bookie_with_http_imports_it_when_made(tmp_path: Path) -> None:
    after_import, after_bookie = _aiohttp_modules(tmp_path / "http", http=True)
    assert after_import == []
    assert "aiohttp.web" in after_bookie
