"""The ``bkeeper`` command line: one group with sub-commands.

This package is the only place that reads argv, config files and the environment. Commands
are thin: parse, call the library, print. Errors print as one readable line (exit 1);
``--verbose`` adds the traceback.
"""

from __future__ import annotations

import logging
import sys
import traceback
from typing import Any

import click

from bkeeper import __version__
from bkeeper.cli._security import apply_client_security, client_security_options
from bkeeper.common.errors import BKeeperError

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
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
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if not verbose:  # kazoo narrates every connection attempt; bkeeper.meta logs state changes
        logging.getLogger("kazoo").setLevel(logging.CRITICAL)
        # py4j (Spark's bridge, in the commands that run Spark) logs each connection it
        # closes at INFO: four lines under a benchmark's table
        logging.getLogger("py4j").setLevel(logging.WARNING)


def _register_commands() -> None:
    from bkeeper.cli import (
        autorecovery,
        bench,
        bookie,
        dashboard,
        dice,
        kv,
        log,
        log_subscriptions,
        meta,
        sandbox,
        security,
        shell,
        verify,
        zookeeper,
    )

    cli.add_command(autorecovery.autorecovery)
    cli.add_command(bench.bench)
    cli.add_command(bookie.bookie)
    cli.add_command(dashboard.dashboard)
    cli.add_command(dice.dice)
    cli.add_command(kv.kv)
    for command in log_subscriptions.COMMANDS:
        log.log.add_command(command)
    cli.add_command(log.log)
    cli.add_command(meta.meta)
    cli.add_command(sandbox.sandbox)
    cli.add_command(security.security)
    cli.add_command(shell.shell)
    cli.add_command(verify.verify)
    cli.add_command(verify.verify_client)
    cli.add_command(zookeeper.zookeeper)


def main(argv: list[str] | None = None) -> Any:
    """Entry point of the console script; turns every failure into one line on stderr."""
    _register_commands()
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
