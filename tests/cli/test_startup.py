"""Start-up of the ``bkeeper`` command (docs/benchmarks.md, "CLI start-up").

``bkeeper --help`` and ``bkeeper GROUP --help`` answer within 0.3 s, because the command tables
(``bkeeper.cli.main.COMMANDS``, ``LOG_COMMANDS``, ``bkeeper.cli.shell.COMMANDS``,
``bkeeper.cli.bench.COMMANDS``) name each sub-command and its short help without importing
it; a command imports only what it uses, which the import guard below checks in a child
process for each command path; and each table row agrees with its command, so the listing
cannot drift from the commands' own help.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from bkeeper.cli import main as cli_main
from bkeeper.cli._lazy import LazyCommand, LazyGroup, load_target

#: Every test here starts processes itself (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

#: Spark, Arrow, NumPy, the HTTP stack, metrics, the Spark and dashboard packages, the bookie
#: and auto-recovery: none belongs in a command that does not serve, bench or run Spark.
HEAVY = (
    "pyspark",
    "pyarrow",
    "numpy",
    "aiohttp",
    "prometheus_client",
    "bkeeper.spark",
    "bkeeper.dashboard",
    "bkeeper.server",
    "bkeeper.autorecovery",
    "bkeeper.admin",
)
#: What a listing (``--help`` of the command or a group) has no use for either: the client,
#: the named logs, the storage engine, ZooKeeper's client, rich.
LISTING = (
    *HEAVY,
    "bkeeper.client",
    "bkeeper.namedlog",
    "bkeeper.storage",
    "bkeeper.statemachine",
    "bkeeper.kv",
    "kazoo",
    "rich",
)
#: What ``log append RECORDS`` has no use for: it prints no table and no progress line.
APPEND = (*HEAVY, "rich")
#: The limit on ``bkeeper --help`` and ``bkeeper GROUP --help`` (issue 39).
HELP_SECONDS_MAX = 0.3
RUNS = 5

#: Run the command line in a child that writes the names of its modules at exit.
_DUMP_MODULES = textwrap.dedent(
    """
    import atexit, json, os, sys

    def _dump():
        with open(os.environ["BKEEPER_TEST_MODULES_FILE"], "w") as out:
            json.dump(sorted(sys.modules), out)

    atexit.register(_dump)
    from bkeeper.cli.main import main
    main()
    """
)

#: The groups of ``bkeeper`` (each ``GROUP --help`` is measured and guarded).
GROUPS = ("bench", "kv", "log", "meta", "security", "shell")


def _groups() -> list[str]:
    ctx = click.Context(cli_main.cli)
    return sorted(
        name
        for name in cli_main.cli.list_commands(ctx)
        if isinstance(cli_main.cli.get_command(ctx, name), click.Group)
    )


def test_the_measured_groups_are_every_group() -> None:
    assert _groups() == list(GROUPS)


def _run_timed(args: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of one ``python -m bkeeper ARGS`` child."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "bkeeper", *args], capture_output=True, text=True, check=False
    )
    wall_s = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    assert "Usage: bkeeper" in done.stdout
    cpu_s = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu_s, wall_s


@pytest.mark.parametrize("group", ["", *GROUPS])
def test_help_takes_under_0_3_s_of_cpu(group: str) -> None:
    """The child's CPU time (user + sys, from ``RUSAGE_CHILDREN``), best of 5 runs, is held
    to 0.3 s: what the command costs whatever else the machine runs (it measures 0.06-0.09 s
    here, also at load 13 on 2 cores; 0.9-1.3 s before the lazy tables). Its wall time is
    in the message, not asserted: it also counts the time the child waits for a core, which
    a loaded machine decides (at load 13 on 2 cores the best of 20 took 0.46 s wall for
    0.08 s of CPU), and a start-up that really is slow fails the CPU check."""
    args = [group, "--help"] if group else ["--help"]
    runs = [_run_timed(args) for _ in range(RUNS)]
    best_cpu_s = min(cpu for cpu, _ in runs)
    best_wall_s = min(wall for _, wall in runs)
    shown = f"bkeeper {' '.join(args)}: CPU {best_cpu_s:.3f} s, wall {best_wall_s:.3f} s"
    assert best_cpu_s <= HELP_SECONDS_MAX, shown


def _modules(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> set[str]:
    """The modules a ``bkeeper ARGS`` child imported (whatever its exit status)."""
    out = tmp_path / f"modules-{len(list(tmp_path.iterdir()))}.json"
    child_env = {**os.environ, **(env or {}), "BKEEPER_TEST_MODULES_FILE": str(out)}
    subprocess.run(
        [sys.executable, "-c", _DUMP_MODULES, *args],
        env=child_env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    loaded: list[str] = json.loads(out.read_text())
    return set(loaded)


def _offending(loaded: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        name for name in loaded if any(name == f or name.startswith(f + ".") for f in forbidden)
    )


@pytest.mark.parametrize(
    "args",
    [["--help"], *[[group, "--help"] for group in GROUPS]],
    ids=" ".join,
)
def test_a_listing_imports_no_command(args: list[str], tmp_path: Path) -> None:
    offending = _offending(_modules(args, tmp_path), LISTING)
    assert not offending, f"bkeeper {' '.join(args)} imported {offending[:12]}"


@pytest.mark.parametrize(
    "args",
    [
        ["log", "append", "--help"],
        ["log", "consume", "--help"],
        ["kv", "put", "--help"],
        ["shell", "listledgers", "--help"],
        ["shell", "simpletest", "--help"],
    ],
    ids=" ".join,
)
def test_a_command_imports_nothing_heavy_it_does_not_use(args: list[str], tmp_path: Path) -> None:
    offending = _offending(_modules(args, tmp_path), HEAVY)
    assert not offending, f"bkeeper {' '.join(args)} imported {offending[:12]}"


def test_shell_recovery_commands_load_auto_recovery_but_not_the_bookie(tmp_path: Path) -> None:
    """``whoisauditor``, ``listunderreplicated`` ... read auto-recovery's state in the
    metadata (``bkeeper.autorecovery.admin``): the bookie that auto-recovery's integrity
    check runs in, its admin HTTP and metrics stay out."""
    loaded = _modules(["shell", "whoisauditor", "--help"], tmp_path)
    assert "bkeeper.autorecovery.admin" in loaded
    offending = _offending(loaded, tuple(m for m in HEAVY if m != "bkeeper.autorecovery"))
    assert not offending, f"bkeeper shell whoisauditor --help imported {offending[:12]}"


def test_log_append_against_an_unreachable_zookeeper_imports_nothing_heavy(
    tmp_path: Path,
) -> None:
    """The run path (client, ZooKeeper session), up to where it fails: a port nothing
    listens on (refused at once)."""
    from bkeeper.testing.benchmarks import free_port

    uri = f"zk://127.0.0.1:{free_port()}/nowhere"
    loaded = _modules(["log", "append", "x", "y", "--metadata", uri], tmp_path)
    assert "kazoo.client" in loaded  # it did get as far as connecting
    offending = _offending(loaded, APPEND)
    assert not offending, f"bkeeper log append imported {offending[:12]}"


def test_kv_put_loads_the_http_client_but_not_the_server(tmp_path: Path) -> None:
    from bkeeper.testing.benchmarks import free_port

    url = f"http://127.0.0.1:{free_port()}"
    args = ["kv", "--timeout", "0.1", "put", "--name", "s", "--url", url, "k", "v"]
    loaded = _modules(args, tmp_path)
    assert "bkeeper.kv.client" in loaded and "aiohttp" in loaded  # it did try the member
    not_used = ("aiohttp.web", "bkeeper.kv.server", *(m for m in HEAVY if m != "aiohttp"))
    offending = _offending(loaded, not_used)
    assert not offending, f"bkeeper kv put imported {offending[:12]}"


@pytest.fixture(scope="module")
def sandbox(
    tmp_path_factory: pytest.TempPathFactory, zookeeper_home: Path | None
) -> Iterator[dict[str, str]]:
    from bkeeper.testing.benchmarks import free_port, free_port_range
    from bkeeper.testing.sandbox import Sandbox, SandboxConfig

    config = SandboxConfig(
        data_dir=tmp_path_factory.mktemp("startup-sandbox"),
        bookies=3,
        zookeeper_port=free_port(),
        bookie_port_base=free_port_range(3),
        autorecovery=False,
        zookeeper_home=zookeeper_home,
    )
    with Sandbox(config) as box:
        yield box.client_env


def test_log_append_against_a_real_cluster_imports_nothing_heavy(
    sandbox: dict[str, str], tmp_path: Path
) -> None:
    """A whole ``log append`` (create the log, open a writer, append, close) on a sandbox."""
    created = subprocess.run(
        [sys.executable, "-m", "bkeeper", "log", "create", "startup"],
        env={**os.environ, **sandbox},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert created.returncode == 0, created.stderr
    loaded = _modules(["log", "append", "startup", "one"], tmp_path, sandbox)
    assert "bkeeper.namedlog.writer" in loaded
    offending = _offending(loaded, APPEND)
    assert not offending, f"bkeeper log append imported {offending[:12]}"
    done = subprocess.run(
        [sys.executable, "-m", "bkeeper", "log", "read", "startup"],
        env={**os.environ, **sandbox},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.rstrip().endswith("one"), done.stderr


# -- the tables agree with their commands -----------------------------------------------------


def _tables() -> list[tuple[str, LazyGroup]]:
    from bkeeper.cli.bench import bench
    from bkeeper.cli.shell import shell

    return [("bkeeper", cli_main.cli), ("log", cli_main.log), ("shell", shell), ("bench", bench)]


def _row_of(command: click.Command, name: str, target: str) -> LazyCommand:
    """The row a command should have: its first help sentence, as click's listing shows it."""
    return LazyCommand(name, target, command.get_short_help_str(limit=sys.maxsize), command.hidden)


@pytest.mark.parametrize("table", _tables(), ids=lambda table: table[0])
def test_each_row_agrees_with_its_command(table: tuple[str, LazyGroup]) -> None:
    """Each row's short help and hidden flag are its command's; the failure shows the row
    to write (a command whose first help sentence changed, or that was added)."""
    _, group = table
    for name, row in group.lazy_commands.items():
        command = load_target(row.target)
        assert isinstance(command, click.Command), row.target
        assert command.name == name, f"{row.target} is registered as {command.name!r}"
        expected = _row_of(command, name, row.target)
        assert row == expected, f"the row of {name!r} is out of date; it reads:\n{expected!r}"


def test_each_command_of_log_and_shell_has_a_row() -> None:
    """A command added to ``bkeeper.cli.log``'s group, to ``log_subscriptions.COMMANDS`` or
    to a ``shell_*`` module's ``commands`` is missing from ``bkeeper log``/``bkeeper shell``
    until it has a row."""
    from bkeeper.cli import (
        log,
        log_subscriptions,
        shell,
        shell_admin,
        shell_cookie,
        shell_disk,
        shell_ledger,
        shell_ops,
        shell_recovery,
        shell_sanity,
    )

    def missing(group: LazyGroup, commands: list[click.Command]) -> list[str]:
        return [
            f"{c.name}: {c.callback.__module__}:{c.callback.__name__}"  # type: ignore[union-attr]
            for c in commands
            if c.name not in group.lazy_commands and c.name not in group.commands
        ]

    log_commands = [*log.log.commands.values(), *log_subscriptions.COMMANDS]
    assert missing(cli_main.log, log_commands) == []
    assert cli_main.log.help == log.log.help and log.log.params == []
    shell_commands = [
        command
        for module in (
            shell_disk,
            shell_admin,
            shell_recovery,
            shell_ops,
            shell_ledger,
            shell_cookie,
            shell_sanity,
        )
        for command in module.commands
    ]
    assert missing(shell.shell, shell_commands) == []


@pytest.mark.parametrize("table", _tables(), ids=lambda table: table[0])
@pytest.mark.parametrize("width", [60, 80, 200])
def test_a_listing_reads_as_if_every_command_were_loaded(
    table: tuple[str, LazyGroup], width: int
) -> None:
    """The listing from the rows is the one click prints for the loaded commands."""
    _, lazy = table
    loaded = click.Group(lazy.name, help=lazy.help)
    ctx = click.Context(lazy)
    for name in lazy.list_commands(ctx):
        command = lazy.get_command(ctx, name)
        assert command is not None
        loaded.add_command(command, name)

    def listing(group: click.Group) -> str:
        formatter = click.HelpFormatter(width=width)
        group.format_commands(click.Context(group), formatter)
        return formatter.getvalue()

    fresh = LazyGroup(lazy.name, help=lazy.help, lazy_commands=tuple(lazy.lazy_commands.values()))
    for name, command in lazy.commands.items():
        if name not in lazy.lazy_commands:  # the group's own commands (shell simpletest, ...)
            fresh.add_command(command, name)
    assert listing(fresh) == listing(loaded)


def test_a_mistyped_command_is_matched_among_the_rows_not_loaded(
    capsys: pytest.CaptureFixture[str],
) -> None:
    fresh = LazyGroup("bkeeper", lazy_commands=cli_main.COMMANDS)
    with pytest.raises(click.UsageError) as caught:
        fresh.main(["sandbx"], standalone_mode=False)
    assert "No such command 'sandbx'" in caught.value.format_message()
    if hasattr(click.exceptions, "NoSuchCommand"):  # click >= 8.4 suggests
        assert "sandbox" in caught.value.format_message().split("No such command")[1]
