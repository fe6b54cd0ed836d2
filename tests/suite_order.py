"""The order test files run in, from the time each took when the suite last recorded it.

``scripts/test.sh`` runs the integration tier in two processes that each take whole files
(pytest-xdist, ``--dist loadfile``, which hands files out in collection order): a long file
taken last would leave one process working alone at the end. (The in-process tier's
processes steal tests from each other, ``--dist worksteal``; the order helps there too.) So files run longest first, by the seconds in
``tests/durations.json`` (setup, call and teardown of all their tests). A file it does not
list yet counts as the mean of those it lists.

``--update-durations`` (``bash scripts/test.sh --update-durations``) writes the seconds of
the files that ran into that file, keeping the others: run it over the whole suite, on the
machine CI runs on, after adding or changing slow tests, and commit the file.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

__all__ = ["DURATIONS_FILE", "IN_PROCESS", "file_key", "load_durations", "order_items"]

TESTS_DIR = Path(__file__).parent
DURATIONS_FILE = TESTS_DIR / "durations.json"
#: What follows a file's name for the seconds of its in-process tests.
IN_PROCESS = " [in-process]"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-durations",
        action="store_true",
        help=f"Write each test file's seconds to {DURATIONS_FILE.name} (which orders the "
        "files, longest first): run over the whole suite.",
    )


def file_key(nodeid: str, integration: bool = True) -> str | None:
    """The file of a test id, relative to tests/ (None: a test outside tests/), with
    :data:`IN_PROCESS` after it for a test of the in-process tier."""
    path = nodeid.split("::", 1)[0]
    if not path.startswith("tests/"):
        return None
    return path.removeprefix("tests/") + ("" if integration else IN_PROCESS)


def load_durations(path: Path = DURATIONS_FILE) -> dict[str, float]:
    """The recorded seconds per file; a missing file orders nothing. A file that is not a
    JSON object of numbers fails the session, naming the file."""
    if not path.exists():
        return {}
    try:
        durations = json.loads(path.read_text())
    except ValueError as exc:
        raise pytest.UsageError(f"{path}: not JSON ({exc})") from exc
    if not isinstance(durations, dict) or not all(
        isinstance(name, str) and isinstance(seconds, (int, float))
        for name, seconds in durations.items()
    ):
        raise pytest.UsageError(f"{path}: not an object of file names and seconds")
    return {name: float(seconds) for name, seconds in durations.items()}


def order_items(items: list[pytest.Item], durations: dict[str, float]) -> None:
    """Sort ``items`` by their file's seconds, longest first (stable: each file's tests keep
    their order; a file not listed counts as the mean)."""
    unknown = sum(durations.values()) / len(durations) if durations else 0.0

    def key(item: pytest.Item) -> float:
        name = file_key(item.nodeid, item.get_closest_marker("integration") is not None)
        return -durations.get(name, unknown) if name is not None else 0.0

    items.sort(key=key)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    order_items(items, load_durations())


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--update-durations") and not hasattr(config, "workerinput"):
        # (not in an xdist worker: the controller gets every worker's reports and writes)
        config.pluginmanager.register(DurationRecorder(), "bkeeper-durations")


class DurationRecorder:
    """Adds up each file's seconds as reports come, and writes them once the session ends."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = file_key(report.nodeid, "integration" in report.keywords)
        if name is not None:
            self.seconds[name] += report.duration

    def pytest_sessionfinish(self) -> None:
        if not self.seconds:
            return
        durations = load_durations()
        durations.update({name: round(value, 2) for name, value in self.seconds.items()})
        ordered = dict(sorted(durations.items(), key=lambda pair: (-pair[1], pair[0])))
        DURATIONS_FILE.write_text(json.dumps(ordered, indent=1) + "\n")
