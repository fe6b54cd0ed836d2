"""House rules a linter cannot state as an import contract: which modules touch the process
environment, and that importing a low layer does not load the layers above it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "bkeeper"

#: Only the command line reads or writes the process environment (house-style.md: ``cli`` is
#: the only place that reads argv, config files and the environment).
ENVIRONMENT_ALLOWED = ("cli",)

#: Where the library must write the environment because Spark offers no other channel (good
#: sense over the rule, as house-style.md allows; each site says why in a comment):
#: the JVM picks its Python workers' interpreter only from its environment, and PySpark's
#: worker decides whether to print a traceback only from ``SPARK_HIDE_TRACEBACK``.
#: And where an entry point other than the command line reads the client variables a user's
#: shell holds: the Spark data source's options, on the driver. And the simulator's campaign,
#: which fixes its spawned workers' string hashing (``PYTHONHASHSEED``), settable for a new
#: interpreter only through its environment.
#: How many uses each such file has; one more fails the test.
ENVIRONMENT_EXCEPTIONS = {
    "spark/session.py": 2,
    "spark/errors.py": 1,
    "spark/options.py": 1,
    "sim/campaign.py": 4,
}


_ENVIRONMENT_NAMES = {"environ", "environb", "getenv", "putenv", "unsetenv"}


def _environment_uses(path: Path) -> list[str]:
    """``line: what`` for each use of the process environment in the file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "os"
            and node.attr in _ENVIRONMENT_NAMES
        ):
            found.append(f"{node.lineno}: os.{node.attr}")
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            names = [alias.name for alias in node.names if alias.name in _ENVIRONMENT_NAMES]
            found += [f"{node.lineno}: from os import {name}" for name in names]
    return sorted(found)


def test_only_the_cli_touches_the_environment() -> None:
    offenders = []
    for path in sorted(SRC.rglob("*.py")):
        package = path.relative_to(SRC).parts[0]
        if package in ENVIRONMENT_ALLOWED or "_pb" in path.parts:
            continue
        name = str(path.relative_to(SRC))
        uses = _environment_uses(path)
        if len(uses) > ENVIRONMENT_EXCEPTIONS.get(name, 0):
            offenders += [f"{name}:{use}" for use in uses]
    assert offenders == []


def test_the_scan_finds_environment_uses(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom os import getenv, path\nx = os.environ.get('A')\n")
    assert _environment_uses(sample) == ["2: from os import getenv", "3: os.environ"]


def _loaded_after(statement: str) -> set[str]:
    code = f"{statement}\nimport sys\nprint(' '.join(m for m in sys.modules if m.startswith('bkeeper')))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return set(out.stdout.split())


def test_a_low_layer_loads_nothing_above_it(subprocesses: None) -> None:
    loaded = _loaded_after("import bkeeper.wire")
    above = {"bkeeper.client", "bkeeper.server", "bkeeper.meta", "bkeeper.storage"}
    assert {m for m in loaded if m.rsplit(".", 1)[0] in above or m in above} == set()
    loaded = _loaded_after("import bkeeper.storage")
    assert {m for m in loaded if m.startswith(("bkeeper.client", "bkeeper.wire"))} == set()


def test_the_root_still_offers_the_client(subprocesses: None) -> None:
    loaded = _loaded_after("from bkeeper import BookKeeper, ClientConfig")
    assert "bkeeper.client" in loaded
