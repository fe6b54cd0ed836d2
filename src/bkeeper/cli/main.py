"""The ``bkeeper`` command line: one group with sub-commands.

This package is the only place that reads argv, config files and the environment. Commands
are thin: parse, call the library, print. Errors print as one readable line (exit 1);
``--verbose`` adds the traceback.

Start-up is kept short (docs/benchmarks.md, "CLI start-up"): :data:`COMMANDS` names each
sub-command, its ``module:attribute`` and the short help of the listing, and a command's
module is imported only when that command runs (:mod:`bkeeper.cli._lazy`), so
``bkeeper --help`` loads click and this module, not the client, the server, rich or aiohttp.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any

import click

from bkeeper import __version__
from bkeeper.cli._lazy import LazyCommand, LazyGroup
from bkeeper.cli._logging import configure_logging
from bkeeper.cli._security import apply_client_security, client_security_options
from bkeeper.common.errors import BKeeperError

__all__ = ["COMMANDS", "LOG_COMMANDS", "cli", "log", "main"]

#: The sub-commands of ``bkeeper``: name, ``module:attribute``, the listing's short help
#: (the command's first help sentence; tests/cli/test_startup.py checks they agree).
COMMANDS = (
    LazyCommand(
        "autorecovery",
        "bkeeper.cli.autorecovery:autorecovery",
        "Run auto-recovery (auditor candidate and replication worker) until SIGTERM.",
    ),
    LazyCommand("bench", "bkeeper.cli.bench:bench", "Benchmarks."),
    LazyCommand("bookie", "bkeeper.cli.bookie:bookie", "Run one bookie."),
    LazyCommand(
        "dashboard",
        "bkeeper.cli.dashboard:dashboard",
        "Serve a web page showing the cluster: bookies, throughput, ledgers, recovery.",
    ),
    LazyCommand(
        "dice",
        "bkeeper.cli.dice:dice",
        "Roll a die once per period as the elected leader, or follow the leader's rolls.",
    ),
    LazyCommand(
        "kv",
        "bkeeper.cli.kv:kv",
        "A replicated key-value store on named logs (leader election, linearizable reads).",
    ),
    LazyCommand("meta", "bkeeper.cli.meta:meta", "Cluster metadata: format it, inspect it."),
    LazyCommand(
        "sandbox",
        "bkeeper.cli.sandbox:sandbox",
        "Start a local cluster: ZooKeeper plus bookies, data kept under --data-dir.",
    ),
    LazyCommand(
        "security",
        "bkeeper.cli.security:security",
        "Secrets and tokens of token authentication (docs/security.md).",
    ),
    LazyCommand("shell", "bkeeper.cli.shell:shell", "Cluster administration."),
    LazyCommand(
        "verify",
        "bkeeper.cli.verify:verify",
        "Run WORKLOAD against a fresh local cluster (ZooKeeper + bookies, each a process), or "
        "the cluster at --metadata, while faults are injected on a schedule derived from the "
        "seed; check the recorded history; print a summary table.",
    ),
    LazyCommand(
        "verify-client",
        "bkeeper.cli.verify:verify_client",
        "(Internal) a client process of ``bkeeper verify``: ledger writers reporting each "
        "operation as a JSON line on standard output until standard input closes.",
        hidden=True,
    ),
    LazyCommand(
        "zookeeper",
        "bkeeper.cli.zookeeper:zookeeper",
        "Run a standalone ZooKeeper bound to 127.0.0.1 (needs java; jars from pyspark or a "
        "system ZooKeeper).",
    ),
)


def _log_row(name: str, target: str, short_help: str) -> LazyCommand:
    return LazyCommand(name, f"bkeeper.cli.{target}", short_help)


#: The sub-commands of ``bkeeper log``, from ``bkeeper.cli.log`` and
#: ``bkeeper.cli.log_subscriptions`` (whose imports load the client and the named logs:
#: ``bkeeper log --help`` loads neither).
LOG_COMMANDS = (
    _log_row(
        "create",
        "log:create",
        "Create an empty log, with the settings given stored in it (every writer of the log "
        "applies them, in any process; change them with bkeeper log config).",
    ),
    _log_row(
        "list",
        "log:list_logs",
        "A table of the logs: their ledgers (count, first..last), their settings (retention, "
        "roll size and age, ensemble/write/ack quorums; -: not set) and subscriptions.",
    ),
    _log_row(
        "config",
        "log:config",
        "Show the settings stored with log NAME, or change them (printing each setting "
        "changed, before -> after).",
    ),
    _log_row(
        "append",
        "log:append",
        "Append RECORDS (or, without any, one record per line of standard input, or with "
        "--file the whole of a file as one record).",
    ),
    _log_row(
        "read",
        "log:read",
        "Print the records from --from to the end of the log as it is now, then stop.",
    ),
    _log_row(
        "tail",
        "log:tail",
        "Print records as they are appended, until Ctrl-C (never fences the writer).",
    ),
    _log_row(
        "truncate",
        "log:truncate",
        "Delete the ledgers that hold only records before --before.",
    ),
    _log_row("delete", "log:delete", "Delete the log and all its ledgers."),
    _log_row(
        "lag",
        "log:lag",
        "How far a Spark stream that is not running is behind: records (``~``: estimated, "
        "when a log is far behind), the age of its oldest unread record, entries and bytes "
        "from where its last committed batch left each log up to the log's head now.",
    ),
    _log_row(
        "subscribe",
        "log_subscriptions:subscribe",
        "Create SUBSCRIPTION on log NAME, consuming from --from (a subscription that exists "
        "already keeps its position).",
    ),
    _log_row(
        "consume",
        "log_subscriptions:consume",
        "Print the subscription's next records (position, time, key, payload), as its "
        "consumer; with --ack (the default) they count as consumed once printed: each batch "
        "of records ready at once is printed, then acknowledged.",
    ),
    _log_row(
        "ack",
        "log_subscriptions:ack_command",
        "Acknowledge POSITION (LEDGER:ENTRY[:INDEX], as append, read and consume print it) "
        "and every record before it (or, with --individual, that record alone).",
    ),
    _log_row(
        "subscriptions",
        "log_subscriptions:subscriptions",
        "The subscriptions of log NAME: position, consumer, backlog.",
    ),
    _log_row(
        "unsubscribe",
        "log_subscriptions:unsubscribe",
        "Delete SUBSCRIPTION of log NAME (retention stops keeping records for it).",
    ),
)

#: ``bkeeper log``: the group of ``bkeeper.cli.log`` (its help and no options, as
#: tests/cli/test_startup.py checks) with :data:`LOG_COMMANDS` imported as they run.
log = LazyGroup(
    "log",
    help="Named logs: ordered lists of ledgers with one writer at a time.",
    lazy_commands=LOG_COMMANDS,
)


@click.group(
    cls=LazyGroup,
    lazy_commands=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and debug logging.")
@click.version_option(__version__, prog_name="bkeeper")
@client_security_options
@click.pass_context
def cli(
    ctx: click.Context,
    verbose: bool,
    client_tls_ca: str,
    client_tls_cert: str,
    client_tls_key: str,
    client_tls_no_hostname_check: bool,
    auth_token_file: str,
) -> None:
    """bkeeper: Apache BookKeeper rebuilt in Python."""
    apply_client_security(
        client_tls_ca,
        client_tls_cert,
        client_tls_key,
        client_tls_no_hostname_check,
        auth_token_file,
    )
    ctx.ensure_object(dict)
    ctx.obj["verbose"] = verbose
    configure_logging(verbose, ctx.invoked_subcommand)


cli.add_command(log)


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the console script; turns every failure into one line on stderr."""
    verbose = "-v" in (argv or sys.argv) or "--verbose" in (argv or sys.argv)
    try:
        return cli.main(args=argv, prog_name="bkeeper", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
        click.echo(f"error: {exc.format_message()}{hint}", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except (BKeeperError, OSError) as exc:
        _fail(exc, verbose, str(exc))
    except Exception as exc:  # a bug: still one line, the traceback with --verbose
        _fail(exc, verbose, f"unexpected {type(exc).__name__}: {exc} (--verbose shows where)")
    return None


def _fail(exc: BaseException, verbose: bool, message: str) -> None:
    if verbose:
        traceback.print_exception(exc)
    if not message.strip():  # an exception without a message (TimeoutError()): name it
        message = f"{type(exc).__name__} (--verbose shows where)"
    click.echo(f"error: {message}", err=True)
    sys.exit(1)
