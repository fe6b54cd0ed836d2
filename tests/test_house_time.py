"""Time only through the Clock: library code never reads a clock directly.

Every component that needs the time takes a :class:`bkeeper.common.clock.Clock`, so tests (and
a deterministic simulation of the cluster) decide what time it is. This scan of src/bkeeper
fails on a direct read outside ``common/clock.py`` and the entry points: a call of (or a
reference to, which hands the clock on) ``time.monotonic``, ``time.time``, ``time.perf_counter``
and their ``_ns`` forms, ``time.localtime()``/``gmtime()``/``ctime()`` without a time,
``datetime.now()``/``utcnow()``/``today()``, and an event loop's ``.time()``, whatever name
they were imported under.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "bkeeper"

#: Where reading the clock is the job: the Clock itself, and the entry points (the command
#: line, the test toolkit, the verification tool, the benchmarks), which run the library;
#: and the simulator, whose event loop is the virtual clock every simulated node reads.
ALLOWED_PACKAGES = ("cli", "testing", "verify", "sim")
ALLOWED_FILES = ("common/clock.py", "spark/bench.py", "spark/floor.py")

#: ``time`` functions that read a clock whether called or handed on as one.
_TIME_CLOCKS = frozenset(
    {
        "monotonic",
        "monotonic_ns",
        "time",
        "time_ns",
        "perf_counter",
        "perf_counter_ns",
        "clock_gettime",
        "clock_gettime_ns",
    }
)
#: ``time`` functions that read the clock when called without a time: how many arguments
#: that is.
_TIME_DEFAULTING = {"localtime": 0, "gmtime": 0, "ctime": 0, "asctime": 0, "strftime": 1}
#: ``datetime``/``date`` class methods that read the clock.
_DATETIME_CLOCKS = frozenset({"now", "utcnow", "today"})


class _Scan(ast.NodeVisitor):
    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        self._time_modules: set[str] = set()  # names bound to the time module
        self._datetime_modules: set[str] = set()  # names bound to the datetime module
        self._datetime_classes: set[str] = set()  # names bound to datetime.datetime/date
        self._time_functions: dict[str, str] = {}  # local name -> time function name
        self._called: set[int] = set()  # ids of the func nodes of calls

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "time":
                self._time_modules.add(alias.asname or "time")
            elif alias.name == "datetime":
                self._datetime_modules.add(alias.asname or "datetime")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for alias in node.names:
            local = alias.asname or alias.name
            if node.module == "time" and (
                alias.name in _TIME_CLOCKS or alias.name in _TIME_DEFAULTING
            ):
                self._time_functions[local] = alias.name
            elif node.module == "datetime" and alias.name in ("datetime", "date"):
                self._datetime_classes.add(local)

    def visit_Call(self, node: ast.Call) -> None:
        self._called.add(id(node.func))
        arguments = len(node.args) + len(node.keywords)
        name = self._time_function(node.func)
        if name in _TIME_DEFAULTING and arguments <= _TIME_DEFAULTING[name]:
            self.found.append((node.lineno, f"time.{name}()"))
        elif (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "time"
            and arguments == 0
            and name is None
        ):
            self.found.append((node.lineno, f"{ast.unparse(node.func.value)}.time()"))
        self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._check_reference(node)
        called = id(node) in self._called
        if (
            not called
            and node.attr == "time"
            and "loop" in ast.unparse(node.value).lower()
            and self._time_function(node) is None
        ):
            self.found.append((node.lineno, f"{ast.unparse(node)} (a clock handed on)"))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        self._check_reference(node)

    def _check_reference(self, node: ast.expr) -> None:
        called = id(node) in self._called
        name = self._time_function(node)
        if name in _TIME_CLOCKS:
            self.found.append(
                (node.lineno, f"time.{name}" + ("()" if called else " (a clock handed on)"))
            )
        elif self._is_datetime_clock(node):
            assert isinstance(node, ast.Attribute)
            suffix = "()" if called else " (a clock handed on)"
            self.found.append((node.lineno, f"datetime.{node.attr}{suffix}"))

    def _time_function(self, node: ast.expr) -> str | None:
        """The ``time`` function ``node`` names, if it names one."""
        if isinstance(node, ast.Name):
            return self._time_functions.get(node.id)
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in self._time_modules
        ):
            return node.attr
        return None

    def _is_datetime_clock(self, node: ast.expr) -> bool:
        if not isinstance(node, ast.Attribute) or node.attr not in _DATETIME_CLOCKS:
            return False
        owner = node.value
        if isinstance(owner, ast.Name):
            return owner.id in self._datetime_classes
        return (
            isinstance(owner, ast.Attribute)
            and owner.attr in ("datetime", "date")
            and isinstance(owner.value, ast.Name)
            and owner.value.id in self._datetime_modules
        )


def direct_time_reads(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each direct clock read in ``source``, in line order."""
    scan = _Scan()
    tree = ast.parse(source)
    # Imports first, wherever they are, so that a read above a function-level import counts.
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            scan.visit(node)
    scan.visit(tree)
    return sorted(set(scan.found))


def _allowed(relative: str) -> bool:
    return relative.split("/", 1)[0] in ALLOWED_PACKAGES or relative in ALLOWED_FILES


def _offenders(root: Path = SRC) -> dict[str, list[str]]:
    """For each file under ``root`` not allowed to read the clock, its reads as
    ``src/bkeeper/<file>:<line>: <what>``."""
    offenders: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if _allowed(relative):
            continue
        reads = direct_time_reads(path.read_text())
        if reads:
            offenders[relative] = [f"src/bkeeper/{relative}:{line}: {what}" for line, what in reads]
    return offenders


def test_library_code_reads_time_only_through_the_clock() -> None:
    late = _offenders()
    listing = "\n".join(read for reads in late.values() for read in reads)
    assert not late, f"direct clock reads (take a bkeeper.common.clock.Clock):\n{listing}"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import time\nx = time.monotonic()\n", [(2, "time.monotonic()")]),
        ("import time\nx = time.monotonic_ns()\n", [(2, "time.monotonic_ns()")]),
        ("import time\nx = time.time()\n", [(2, "time.time()")]),
        ("import time\nx = time.time_ns()\n", [(2, "time.time_ns()")]),
        ("import time\nx = time.perf_counter()\n", [(2, "time.perf_counter()")]),
        ("import time as t\nx = t.monotonic()\n", [(2, "time.monotonic()")]),
        ("from time import monotonic\nx = monotonic()\n", [(2, "time.monotonic()")]),
        ("from time import monotonic as now\nx = now()\n", [(2, "time.monotonic()")]),
        ("from time import time\nx = time()\n", [(2, "time.time()")]),
        (
            "import time\ndef f(clock=time.monotonic): ...\n",
            [(2, "time.monotonic (a clock handed on)")],
        ),
        ("import time\nx = time.gmtime()\n", [(2, "time.gmtime()")]),
        ("import time\nx = time.strftime('%H')\n", [(2, "time.strftime()")]),
        ("from datetime import datetime\nx = datetime.now()\n", [(2, "datetime.now()")]),
        ("from datetime import datetime\nx = datetime.utcnow()\n", [(2, "datetime.utcnow()")]),
        ("from datetime import date as d\nx = d.today()\n", [(2, "datetime.today()")]),
        ("import datetime\nx = datetime.datetime.now()\n", [(2, "datetime.now()")]),
        ("import datetime as dt\nx = dt.datetime.now(dt.UTC)\n", [(2, "datetime.now()")]),
        ("x = loop.time()\n", [(1, "loop.time()")]),
        ("x = self._loop.time()\n", [(1, "self._loop.time()")]),
        (
            "import asyncio\nx = asyncio.get_running_loop().time()\n",
            [(2, "asyncio.get_running_loop().time()")],
        ),
        ("x = Thing(clock=self._loop.time)\n", [(1, "self._loop.time (a clock handed on)")]),
        ("def f():\n    return time.monotonic()\nimport time\n", [(2, "time.monotonic()")]),
    ],
)
def test_the_scan_catches_each_form(source: str, expected: list[tuple[int, str]]) -> None:
    assert direct_time_reads(source) == expected


@pytest.mark.parametrize(
    "source",
    [
        "import time\ntime.sleep(1)\n",
        "import time\nx = time.gmtime(0)\n",
        "import time\nx = time.strftime('%H', time.gmtime(5))\n",
        "x = clock.monotonic()\ny = clock.wall_ms()\n",
        "from datetime import datetime\nx = datetime.fromtimestamp(5)\n",
        "x = record.time\n",
        "x = obj.time(5)\n",
        "def time(): ...\nx = time()\n",
    ],
)
def test_the_scan_passes_what_reads_no_clock(source: str) -> None:
    assert direct_time_reads(source) == []


def test_the_failure_names_file_and_line_and_spares_entry_points(tmp_path: Path) -> None:
    for name in ("meta/zk.py", "cli/main.py", "common/clock.py", "spark/bench.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(
            "import asyncio\n\n\nasync def f():\n    return asyncio.get_event_loop().time()\n"
        )
    assert _offenders(tmp_path) == {
        "meta/zk.py": ["src/bkeeper/meta/zk.py:5: asyncio.get_event_loop().time()"]
    }
