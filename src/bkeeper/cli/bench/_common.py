"""What the ``bkeeper bench`` commands share: the results table, progress, the cluster
options and a cluster of their own when none is given."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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
]

MIB = 1024 * 1024
#: Width of the tables when the output is not a terminal (a file, a pipe, a test).
PIPE_WIDTH = 160

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
        table.add_column(column, justify="right" if column != "workload" else "left")
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


def progress() -> Progress:
    """A progress bar on standard error, gone when done. It redraws only when told (each
    ``update(..., refresh=True)``): a refresh thread would take CPU from what is measured."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        auto_refresh=False,
    )


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
