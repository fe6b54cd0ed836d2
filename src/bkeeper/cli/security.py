"""``bkeeper security``: make the secrets and tokens of token authentication
(docs/security.md).

- ``make-secret FILE``: 48 random bytes, base64, in a new file of mode 600 (never printed).
- ``make-token --secret-file F --subject S --ttl-s N [--out FILE]``: a token for ``S``
  valid ``N`` seconds, to ``--out`` (a new file, mode 600) or standard output.
"""

from __future__ import annotations

import base64
import os
import secrets

import click

from bkeeper.cli._security import read_secret_file
from bkeeper.common.auth import make_token
from bkeeper.common.errors import ConfigError

__all__ = ["security"]

#: Random bytes of a secret made by ``make-secret``.
SECRET_BYTES = 48


def _write_private(path: str, data: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError as exc:
        raise ConfigError(f"{path}: exists already (not overwritten)") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "wb") as file:
        file.write(data)


@click.group()
def security() -> None:
    """Secrets and tokens of token authentication (docs/security.md)."""


@security.command("make-secret")
@click.argument("path")
def make_secret(path: str) -> None:
    """Write a new token secret to PATH (mode 600): give it to every bookie with
    --auth-token-secret-file."""
    _write_private(path, base64.b64encode(secrets.token_bytes(SECRET_BYTES)) + b"\n")
    click.echo(f"secret written to {path}", err=True)


@security.command("make-token")
@click.option("--secret-file", required=True, help="The bookies' token secret (mode 600).")
@click.option("--subject", required=True, help="The identity the token names.")
@click.option("--ttl-s", default=86_400, show_default=True, type=click.IntRange(1))
@click.option("--out", default="", help="Write the token to this new file (mode 600).")
def make_token_command(secret_file: str, subject: str, ttl_s: int, out: str) -> None:
    """Make a token for SUBJECT valid TTL_S seconds, signed with the secret."""
    token = make_token(read_secret_file(secret_file, "--secret-file"), subject, ttl_s)
    if out:
        _write_private(out, token.encode() + b"\n")
        click.echo(f"token for {subject!r} written to {out}", err=True)
    else:
        click.echo(token)
