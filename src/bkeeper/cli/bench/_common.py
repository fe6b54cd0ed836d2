"""What the ``bkeeper bench`` commands share: the results table, progress, the cluster
options and a cluster of their own when none is given.

Progress: the benches with phases draw bars (:func:`progress`); the others show one line,
the bench's name and the time spent (:func:`shows_elapsed`). On a terminal both are
redrawn in place; into a pipe or a file (a CI log) they are plain lines every 2 s
(:mod:`bkeeper.cli._progress`), where rich alone would print nothing until the end."""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from bkeeper.cli._progress import elapsed, plain_interval_s, status_line, ticking
from bkeeper.client.config import set_process_security
from bkeeper.common.auth import ClientAuthConfig
from bkeeper.common.tls import TlsClientConfig
from bkeeper.testing.benchmarks import BenchResult, free_port, free_port_range
from bkeeper.testing.sandbox import Sandbox, SandboxConfig
from bkeeper.wire.codes import Protocol

__all__ = [
    "KEEP",
    "METADATA",
    "MIB",
    "cluster",
    "console",
    "parse_address",
    "parse_size",
    "print_results",
    "progress",
    "protocol_of",
    "shows_elapsed",
]

F = TypeVar("F", bound=Callable[..., Any])

MIB = 1024 * 1024
#: Width of the tables when the output is not a terminal (a file, a pipe, a test).
PIPE_WIDTH = 160
#: Characters of the workload column at least ("client writes E3/Qw3/Qa2 V2," and the like
#: on the first line).
WORKLOAD_WIDTH_MIN = 30

METADATA = click.option(
    "--metadata",
    "metadata_uri",
    default=lambda: os.environ.get("BKEEPER_METADATA", ""),
    show_default="$BKEEPER_METADATA, else a sandbox of its own",
    help="Cluster URI.",
)
KEEP = click.option(
    "--keep", is_flag=True, help="Keep what the benchmark wrote (default: delete it after)."
)


def console() -> Console:
    """Standard output, :data:`PIPE_WIDTH` wide when it is not a terminal."""
    out = Console()
    return out if out.is_terminal else Console(width=PIPE_WIDTH)


def print_results(results: list[BenchResult], unit: str) -> None:
    """One row per result: counts, ``unit``/s, MB/s, latency percentiles, then a column per
    name in the results' ``extra``."""
    extras = list(dict.fromkeys(name for r in results for name in r.extra))
    table = Table(title="bkeeper bench")
    for column in (
        "workload",
        "ops",
        "seconds",
        f"{unit}/s",
        "MB/s",
        "p50 ms",
        "p99 ms",
        "p99.9 ms",
        *extras,
    ):
        if column == "workload":  # its label first, whole: the figures' headers wrap instead
            table.add_column(column, justify="left", min_width=WORKLOAD_WIDTH_MIN)
        else:
            table.add_column(column, justify="right")
    for r in results:
        lat = r.latency_ms()
        table.add_row(
            r.name,
            f"{r.operations:,}",
            f"{r.seconds:.2f}",
            f"{r.rate:,.0f}",
            f"{r.mb_per_s:.1f}" if r.bytes else "-",
            f"{lat['p50']:.3f}" if lat else "-",
            f"{lat['p99']:.3f}" if lat else "-",
            f"{lat['p99.9']:.3f}" if lat else "-",
            *(r.extra.get(name, "-") for name in extras),
        )
    console().print(table)


class _Bars(Progress):
    """Rich's bars on a terminal; elsewhere (disabled there) a plain line of every task's
    count each :func:`~bkeeper.cli._progress.plain_interval_s`, from a thread that sleeps
    between lines."""

    _plain: contextlib.ExitStack | None = None

    def __enter__(self) -> _Bars:
        super().__enter__()
        if self.disable:
            self._plain = contextlib.ExitStack()
            self._plain.enter_context(ticking(self._print_line, plain_interval_s()))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        if self._plain is not None:
            self._plain.close()
        super().__exit__(exc_type, exc_val, exc_tb)

    def _print_line(self) -> None:
        parts = [
            f"{task.description}: {task.completed:,.0f}"
            + ("" if task.total is None else f" of {task.total:,.0f}")
            for task in self.tasks
            if not task.finished
        ]
        if parts:
            self.console.print("; ".join(parts), markup=False, highlight=False, soft_wrap=True)


def progress() -> Progress:
    """A progress bar on standard error, gone when done. It redraws only when told (each
    ``update(..., refresh=True)``): a refresh thread would take CPU from what is measured.
    Off a terminal, plain lines (:class:`_Bars`)."""
    err = Console(stderr=True)
    return _Bars(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        auto_refresh=False,
        disable=not err.is_terminal,
    )


def shows_elapsed(name: str) -> Callable[[F], F]:
    """Decorate a bench command (below its options): while it runs, standard error shows
    ``bench NAME: 12 s`` (and ``of --duration`` when it has one), so that a bench without
    bars is not silent for its whole run."""

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            started = time.monotonic()
            duration = kwargs.get("duration")
            measured = f" (measuring {duration:g} s once up)" if duration else ""

            def describe() -> str:
                return f"bench {name}: {elapsed(time.monotonic() - started)}{measured}"

            with status_line(describe):
                return command(*args, **kwargs)

        return run  # type: ignore[return-value]

    return decorate


def phase_bars(bar: Progress) -> Callable[[str, int, int], None]:
    """An ``on_progress(phase, done, whole)`` callback that draws one bar per phase on
    ``bar`` (see :func:`progress`)."""
    tasks: dict[str, TaskID] = {}

    def on_progress(phase: str, done: int, whole: int) -> None:
        task = tasks.get(phase)
        if task is None:
            task = tasks[phase] = bar.add_task(phase, total=whole)
        bar.update(task, completed=done, refresh=True)

    return on_progress


def bookie_options(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The repeatable ``-o/--option KEY=VALUE`` of the commands that start bookies or
    auto-recovery (into their parameter ``options``)."""
    return click.option(
        "-o", "--option", "options", multiple=True, metavar="KEY=VALUE", help=help_text
    )


def protocol_of(name: str) -> Protocol:
    return Protocol.V2 if name == "v2" else Protocol.V3


def parse_address(address: str, option: str) -> tuple[str, int]:
    """``host:port`` of ``option``, or a usage error naming it."""
    host, _, port_text = address.rpartition(":")
    if not host or not port_text.isdigit():
        raise click.BadParameter(f"{address!r} is not host:port", param_hint=option)
    return host, int(port_text)


_SIZE_UNITS = {"": 1, "K": 1024, "M": MIB, "G": 1024 * MIB}


def parse_size(text: str) -> int:
    """``2G``, ``512M``, ``64K``, ``1048576``: bytes (a usage error if it is not one)."""
    value = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = value[-1:] if value[-1:] in ("K", "M", "G") else ""
    number = value[: len(value) - len(unit)]
    try:
        size = int(float(number) * _SIZE_UNITS[unit])
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a size (like 2G, 512M)") from None
    if size <= 0:
        raise click.BadParameter(f"{text!r} is not a positive size")
    return size


@contextlib.contextmanager
def cluster(metadata_uri: str, bookies: int, secure: bool = False) -> Iterator[str]:
    """The given cluster, or a sandbox of ``bookies`` bookies in a temporary directory
    (``secure``: ``sandbox --secure``, and this process's clients use its TLS and token)."""
    if metadata_uri:
        yield metadata_uri
        return
    with tempfile.TemporaryDirectory(prefix="bkeeper-bench-") as tmp:
        config = SandboxConfig(
            data_dir=Path(tmp),
            bookies=bookies,
            zookeeper_port=free_port(),
            bookie_port_base=free_port_range(bookies),
            secure=secure,
        )
        with Sandbox(config) as box:
            if box.security is not None:
                token = box.security.token_file.read_text().strip()
                set_process_security(
                    TlsClientConfig(ca_file=box.security.ca.cert), ClientAuthConfig(token=token)
                )
            yield box.metadata_uri
