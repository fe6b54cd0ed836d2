"""How a command is given a ledger's password: never on its command line, which every user of
the machine reads in ``ps`` (and ``/proc/<pid>/cmdline``).

- ``--password-file FILE``: the file's content, less one trailing newline;
- or the environment variable :data:`LEDGER_PASSWORD_ENV` (``BKEEPER_LEDGER_PASSWORD``);
- neither: the command's default (empty for ``shell readledger``, ``bench`` for ``bench
  read``). Both: an error (which one was meant is not guessed).

``--password`` is still recognized, only to say so in one line (exit status 2) rather than
click's bare "no such option".
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from bkeeper.cli._errors import CommandError

__all__ = ["LEDGER_PASSWORD_ENV", "PASSWORD_FILE_BYTES_MAX", "ledger_password", "password_options"]

LEDGER_PASSWORD_ENV = "BKEEPER_LEDGER_PASSWORD"
#: A password file longer than this is refused unread (a ledger password is a short secret).
PASSWORD_FILE_BYTES_MAX = 4096

F = TypeVar("F", bound=Callable[..., Any])


def _refuse_password(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        raise click.UsageError(
            f"--password is not taken: a password on the command line shows in ps; "
            f"give it by --password-file FILE or ${LEDGER_PASSWORD_ENV}",
            ctx,
        )


def password_options(default: str) -> Callable[[F], F]:
    """``--password-file`` (into the command's ``password_file`` argument) and the refused
    ``--password``; ``default`` says in the help what is used when neither is given."""

    def decorate(command: F) -> F:
        command = click.option(
            "--password-file",
            "password_file",
            metavar="FILE",
            help=f"File holding the ledger's password; or ${LEDGER_PASSWORD_ENV}; "
            f"neither: {default}.",
        )(command)
        return click.option(
            "--password",
            hidden=True,
            expose_value=False,
            is_eager=True,
            callback=_refuse_password,
        )(command)

    return decorate


def ledger_password(password_file: str | None, default: bytes = b"") -> bytes:
    """The password given by ``--password-file`` or the environment (module doc);
    ``CommandError`` (one line, never the password) if both or the file cannot be read."""
    from_env = os.environb.get(os.fsencode(LEDGER_PASSWORD_ENV), b"")
    if password_file is None:
        return from_env or default
    if from_env:
        raise CommandError(
            f"the ledger password is given twice (--password-file and ${LEDGER_PASSWORD_ENV}); "
            "give one"
        )
    try:
        with open(password_file, "rb") as file:
            data = file.read(PASSWORD_FILE_BYTES_MAX + 1)
    except OSError as exc:
        raise CommandError(
            f"--password-file {password_file}: cannot read it ({exc.strerror or exc})"
        ) from None
    if len(data) > PASSWORD_FILE_BYTES_MAX:
        raise CommandError(
            f"--password-file {password_file}: longer than {PASSWORD_FILE_BYTES_MAX} bytes; "
            "expected one line, the password"
        )
    if data.endswith(b"\r\n"):
        return data[:-2]
    return data[:-1] if data.endswith(b"\n") else data
