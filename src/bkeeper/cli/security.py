"""``bkeeper security``: make the secrets and tokens of token authentication, and rotate the
secret (docs/security.md, "Rotating the token secret").

- ``make-secret FILE``: 48 random bytes, base64, in a new file of mode 600 (never printed).
- ``make-secret --add FILE``: append a new secret to an existing secret file holding one
  (bookies then admit tokens signed by either; refused when it holds 2 already).
- ``drop-old-secret FILE``: keep only the newest secret of a file holding 2.
- ``make-token --secret-file F --subject S --ttl-s N [--out FILE]``: a token for ``S``
  valid ``N`` seconds, signed with the file's newest (last) secret, to ``--out`` (a new
  file, mode 600) or standard output.

A secret file is changed by writing a new file beside it and renaming it over the old one
(a bookie re-reading it never sees half of it).
"""

from __future__ import annotations

import base64
import os
import secrets

import click

from bkeeper.common.auth import SECRETS_MAX, TokenSecrets, make_token, read_token_secret_file
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
        file.flush()
        os.fsync(file.fileno())


def _replace_private(path: str, data: bytes) -> None:
    """Replace ``path`` by a file (mode 600) holding ``data``, atomically (rename)."""
    temporary = f"{path}.new-{os.getpid()}"
    _write_private(temporary, data)
    try:
        os.replace(temporary, path)
    except OSError as exc:
        os.unlink(temporary)
        raise ConfigError(f"{path}: {exc.strerror or exc}") from exc


def _new_secret() -> bytes:
    return base64.b64encode(secrets.token_bytes(SECRET_BYTES))


def _secret_file_content(held: TokenSecrets) -> bytes:
    return b"".join(secret + b"\n" for secret in held.secrets)


@click.group()
def security() -> None:
    """Secrets and tokens of token authentication (docs/security.md)."""


@security.command("make-secret")
@click.option(
    "--add",
    is_flag=True,
    help="Append a new secret to the existing secret file PATH (a rotation's first step): "
    "bookies then admit tokens signed by the old or the new one; new tokens are signed "
    "with the new one.",
)
@click.argument("path")
def make_secret(path: str, add: bool) -> None:
    """Write a new token secret to PATH (mode 600): give it to every bookie with
    --auth-token-secret-file."""
    if not add:
        _write_private(path, _new_secret() + b"\n")
        click.echo(f"secret written to {path}", err=True)
        return
    held = read_token_secret_file(path, "secret file")
    if len(held) >= SECRETS_MAX:
        raise ConfigError(
            f"secret file {path}: holds {len(held)} secrets already, the most a bookie takes; "
            f"drop the old one first: bkeeper security drop-old-secret {path}"
        )
    _replace_private(path, _secret_file_content(TokenSecrets(*held.secrets, _new_secret())))
    click.echo(
        f"new secret added to {path} ({len(held) + 1} secrets): copy the file to every "
        "bookie, then make new tokens",
        err=True,
    )


@security.command("drop-old-secret")
@click.argument("path")
def drop_old_secret(path: str) -> None:
    """Keep only the newest secret of PATH (a rotation's last step): tokens signed by the
    old one are refused on new connections once the bookies have re-read the file."""
    held = read_token_secret_file(path, "secret file")
    if len(held) < 2:
        raise ConfigError(f"secret file {path}: holds one secret only, none to drop")
    _replace_private(path, _secret_file_content(TokenSecrets(held.newest)))
    click.echo(
        f"old secret dropped from {path} (1 secret left): copy the file to every bookie",
        err=True,
    )


@security.command("make-token")
@click.option("--secret-file", required=True, help="The bookies' token secret (mode 600).")
@click.option("--subject", required=True, help="The identity the token names.")
@click.option("--ttl-s", default=86_400, show_default=True, type=click.IntRange(1))
@click.option("--out", default="", help="Write the token to this new file (mode 600).")
def make_token_command(secret_file: str, subject: str, ttl_s: int, out: str) -> None:
    """Make a token for SUBJECT valid TTL_S seconds, signed with the newest (last) secret
    of the secret file."""
    held = read_token_secret_file(secret_file, "--secret-file")
    token = make_token(held.newest, subject, ttl_s)
    if out:
        _write_private(out, token.encode() + b"\n")
        click.echo(f"token for {subject!r} written to {out}", err=True)
    else:
        click.echo(token)
