"""``bkeeper sandbox``: ZooKeeper, N bookies and the dashboard on this machine, until Ctrl-C or
SIGTERM. It prints where each child process logs, and watches them: a child that exits is
reported at once (how, and the end of its log) and started again, a bounded number of times
(:mod:`bkeeper.testing.supervision`), unless ``--no-restart``.

Standard output holds what a script takes, everything else goes to standard error: first
``metadata URI: URI`` (the line scripts and tests read), then one ``export NAME=VALUE`` line
per variable of the clients' environment (``BKEEPER_METADATA``; with ``--secure`` also the TLS
CA and the token file), quoted for a POSIX shell: pasted into a shell, or taken with
``grep '^export '``, they make every ``bkeeper`` command (and the Spark data source) a client
of the sandbox. They hold paths only, never a secret."""

from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path
from types import FrameType

import click

from bkeeper.cli._errors import CommandError
from bkeeper.cli._settings import (
    Settings,
    build_autorecovery_config,
    build_configs,
    read_settings,
    settings_options,
)
from bkeeper.common.clock import SystemClock
from bkeeper.testing.sandbox import DEFAULT_BOOKIES, Sandbox, SandboxConfig
from bkeeper.testing.sandbox_supervisor import SandboxSupervisor
from bkeeper.testing.supervision import RestartPolicy

__all__ = ["export_lines", "sandbox"]

#: Options the sandbox sets itself, differently for each bookie.
_PER_BOOKIE = frozenset({"host", "port", "bookie_id", "metadata_uri", "http_port", "http_host"})
#: Directory options: each bookie gets a subdirectory ``bookie-<n>`` of every directory given.
_DIRS = ("ledger_dirs", "journal_dirs")


@click.command()
@click.option(
    "--bookies",
    default=DEFAULT_BOOKIES,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Bookies to run: one more than the default ensemble (3), so that the loss of one "
    "can be re-replicated (docs/operations.md, Spare bookies).",
)
@click.option("--data-dir", default="./bkeeper-data", show_default=True, type=click.Path())
@click.option("--zookeeper-port", default=2181, show_default=True, type=click.IntRange(1, 65535))
@click.option("--bookie-port", default=3181, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--http-port",
    default=8080,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Admin HTTP port of bookie 0 (bookie i: this + i; docs/admin.md).",
)
@click.option(
    "--dashboard-port",
    default=8090,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="Port of the web dashboard (docs/operations.md, Dashboard).",
)
@click.option(
    "--dashboard/--no-dashboard",
    default=True,
    show_default=True,
    help="Run `bkeeper dashboard` on the sandbox (http://127.0.0.1:DASHBOARD_PORT/).",
)
@click.option(
    "--autorecovery/--no-autorecovery",
    default=True,
    show_default=True,
    help="Run auto-recovery inside every bookie (one of them is elected auditor); "
    "-o sets its options (docs/autorecovery.md).",
)
@click.option(
    "--restart/--no-restart",
    default=True,
    show_default=True,
    help="Start a child process that exits (a bookie, ZooKeeper, the dashboard) again, at "
    f"most {RestartPolicy.restarts_max} times in {RestartPolicy.window_s:g} s; "
    "--no-restart leaves it down.",
)
@click.option(
    "--secure",
    is_flag=True,
    help="TLS (required), token authentication and ZooKeeper ACLs, with credentials made "
    "under DATA_DIR/security; prints the environment that makes bkeeper commands and "
    "Spark jobs its clients (docs/security.md, A sandbox).",
)
@settings_options("every bookie")
def sandbox(
    bookies: int,
    data_dir: str,
    zookeeper_port: int,
    bookie_port: int,
    http_port: int,
    dashboard_port: int,
    dashboard: bool,
    autorecovery: bool,
    restart: bool,
    secure: bool,
    options: tuple[str, ...],
    conf: str | None,
) -> None:
    """Start a local cluster: ZooKeeper plus bookies, data kept under --data-dir."""
    settings = read_settings(conf, options)
    owned = sorted(set(settings.bookie) & _PER_BOOKIE)
    if owned:
        raise click.UsageError(
            f"{', '.join(owned)}: set by the sandbox for each bookie, not by -o or --conf"
        )
    build_configs("-", settings)  # checked before anything starts, as each bookie checks them
    if autorecovery:
        build_autorecovery_config(settings)
    elif settings.autorecovery:
        raise click.UsageError(
            f"{', '.join(sorted(settings.autorecovery))}: auto-recovery options, "
            "but --no-autorecovery"
        )
    dirs = {key: _paths(settings.storage.get(key, ())) for key in _DIRS}
    shared = {k: v for k, v in settings.storage.items() if k not in _DIRS}
    settings = Settings(shared, settings.bookie, settings.autorecovery)
    home = os.environ.get("ZOOKEEPER_HOME")
    config = SandboxConfig(
        data_dir=Path(data_dir).resolve(),
        bookies=bookies,
        zookeeper_port=zookeeper_port,
        bookie_port_base=bookie_port,
        http_port_base=http_port,
        zookeeper_home=Path(home) if home else None,
        bookie_args=tuple(settings.args()),
        ledger_dirs=dirs["ledger_dirs"],
        journal_dirs=dirs["journal_dirs"],
        autorecovery=autorecovery,
        dashboard_port=dashboard_port if dashboard else None,
        secure=secure,
    )
    stop = StopFlag()
    signal.signal(signal.SIGTERM, stop.on_signal)
    signal.signal(signal.SIGINT, stop.on_signal)
    box = Sandbox(config)
    busy = box.ports_in_use()
    if busy:
        taken = ", ".join(f"{port} ({what})" for what, port in busy)
        noun, verb = ("port", "is") if len(busy) == 1 else ("ports", "are")
        raise CommandError(
            f"{noun} {taken} {verb} in use by another process; choose free ports with "
            "--zookeeper-port, --bookie-port, --http-port and --dashboard-port"
        )
    click.echo(f"starting ZooKeeper and {bookies} bookies under {config.data_dir} ...", err=True)
    with box:
        click.echo(f"cluster: {box.metadata_uri} (instance {box.instance_id})", err=True)
        for index in range(bookies):
            host, port = box.bookie_address(index)
            admin = box.admin_address(index)
            scheme = "http" if box.security is None else "https"  # TLS: the admin port's too
            on = "" if admin is None else f" (admin {scheme}://{admin[0]}:{admin[1]})"
            click.echo(f"bookie {index}: {host}:{port}{on}", err=True)
        if autorecovery:
            click.echo("auto-recovery: in every bookie (one is elected auditor)", err=True)
        if box.dashboard_url is not None:
            login = ""
            if box.security is not None:
                login = f" (log in with the token in {box.security.token_file})"
            click.echo(f"dashboard: {box.dashboard_url}{login}", err=True)
        for child in box.children():
            click.echo(f"log of {child}: {box.child_log(child)}", err=True)
        policy = RestartPolicy(restart=restart)
        supervisor = SandboxSupervisor(
            box, policy, _say, SystemClock(), start_timeout_s=config.start_timeout_s
        )
        click.echo(_restart_line(policy), err=True)
        click.echo(f"metadata URI: {box.metadata_uri}")
        if secure:
            click.echo("secure: TLS required, token authentication, ZooKeeper ACLs", err=True)
        click.echo(
            "the environment of its clients (paste these export lines into a shell; "
            "paths only, no secret):",
            err=True,
        )
        for line in export_lines(box.client_env):
            click.echo(line)
        click.echo("sandbox ready; Ctrl-C stops it", err=True)
        while not stop.wait(SandboxSupervisor.POLL_S):
            supervisor.poll()
        supervisor.stopping()
        click.echo("stopping ...", err=True)
    click.echo("sandbox stopped", err=True)


class StopFlag:
    """What SIGTERM and Ctrl-C set: a plain flag, polled. A signal handler must take no
    lock: it runs in the main thread between two bytecodes, and ``threading.Event.set``
    there deadlocks when the signal lands while ``Event.wait`` holds the event's lock (a
    sandbox then ignored SIGTERM for good: seen once in CI)."""

    #: How often :meth:`wait` looks at the flag.
    POLL_S = 0.2

    def __init__(self) -> None:
        self.asked = False

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.asked = True

    def wait(self, timeout_s: float | None = None) -> bool:
        """Whether a signal asked for the stop, once it did or ``timeout_s`` (None: no
        limit) passed."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while not self.asked:
            left = self.POLL_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(self.POLL_S, left))
        return True


def export_lines(env: dict[str, str]) -> list[str]:
    """``export NAME=VALUE`` for each variable, each value quoted for a POSIX shell (a data
    directory with spaces; a URI's ``?``, which a shell would take for a glob)."""
    return [f"export {name}={shlex.quote(value)}" for name, value in env.items()]


def _say(line: str) -> None:
    click.echo(line, err=True)


def _restart_line(policy: RestartPolicy) -> str:
    if not policy.restart:
        return "restarts: off (--no-restart); a child process that exits stays down"
    return (
        "restarts: a child process that exits is started again, at most "
        f"{policy.restarts_max} times in {policy.window_s:g} s"
    )


def _paths(value: object) -> tuple[Path, ...]:
    assert isinstance(value, tuple)  # a list of paths, as the settings read it
    return tuple(Path(d).resolve() for d in value)
