"""Security options of the command line (docs/security.md).

- Bookie (``bkeeper bookie``, ``bkeeper sandbox``): ``--tls-cert``, ``--tls-key``,
  ``--tls-ca``, ``--tls-client-auth``, ``--tls-required``, ``--auth-token-secret-file``,
  ``--auth-token-secret-refresh-ms``, ``--auth-allowed-subject``.
- Every client of the ``bkeeper`` command (group options, or their environment variables,
  which processes started by a command inherit): ``--client-tls-ca`` (``BKEEPER_TLS_CA``),
  ``--client-tls-cert`` / ``--client-tls-key`` (``BKEEPER_TLS_CERT`` / ``BKEEPER_TLS_KEY``),
  ``--client-tls-no-hostname-check`` (``BKEEPER_TLS_NO_HOSTNAME_CHECK=1``),
  ``--auth-token-file`` (``BKEEPER_AUTH_TOKEN_FILE``). They become the process's client
  defaults (:func:`bkeeper.client.config.set_process_security`).

Secret files are read here (the bookie also re-reads its token secret file when it changes:
``bkeeper.server.security``) and must not be readable by others: a token or secret file with
group or other permissions is refused. A token secret file holds one secret a line, at most
two (the old and the new one of a rotation; docs/security.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from bkeeper.common.errors import ConfigError

if TYPE_CHECKING:  # imported where used: every command parses these options, few use them
    from bkeeper.common.auth import ServerAuthConfig
    from bkeeper.common.tls import TlsServerConfig

__all__ = [
    "apply_client_security",
    "bookie_security_options",
    "build_bookie_security",
    "client_security_options",
]

F = TypeVar("F", bound=Callable[..., Any])


def bookie_security_options(command: F) -> F:
    """The bookie's TLS and auth options."""
    from bkeeper.common.auth import TOKEN_SECRET_REFRESH_MS_DEFAULT

    options = [
        click.option("--tls-cert", default="", help="TLS: the bookie's PEM certificate chain."),
        click.option("--tls-key", default="", help="TLS: the bookie's PEM private key."),
        click.option(
            "--tls-ca", default="", help="TLS: PEM CA certificates that sign client certificates."
        ),
        click.option(
            "--tls-client-auth",
            is_flag=True,
            help="Mutual TLS: clients must present a certificate signed by --tls-ca.",
        ),
        click.option(
            "--tls-required",
            is_flag=True,
            help="TLS-only: every request before START_TLS is answered EUA.",
        ),
        click.option(
            "--auth-token-secret-file",
            default="",
            help="Turn on authentication with the token plugin: the file (mode 600) holds "
            "the secret that signs tokens, one a line, at most 2 during a rotation; the "
            "bookie re-reads it when it changes ('bkeeper security make-token' makes tokens).",
        ),
        click.option(
            "--auth-token-secret-refresh-ms",
            type=click.IntRange(1),
            default=TOKEN_SECRET_REFRESH_MS_DEFAULT,
            show_default=True,
            help="Look whether the token secret file changed at most this often.",
        ),
        click.option(
            "--auth-allowed-subject",
            multiple=True,
            help="Only tokens for this subject are accepted (repeatable; default: any).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def build_bookie_security(
    kwargs: dict[str, Any],
) -> tuple[TlsServerConfig | None, ServerAuthConfig | None]:
    """Pop the bookie's security options from a command's ``kwargs`` and build them."""
    from bkeeper.common.auth import TOKEN_PLUGIN, ServerAuthConfig, read_token_secret_file
    from bkeeper.common.tls import TlsServerConfig

    cert, key, ca = kwargs.pop("tls_cert"), kwargs.pop("tls_key"), kwargs.pop("tls_ca")
    client_auth, required = kwargs.pop("tls_client_auth"), kwargs.pop("tls_required")
    secret_file = kwargs.pop("auth_token_secret_file")
    refresh_ms = kwargs.pop("auth_token_secret_refresh_ms")
    subjects = kwargs.pop("auth_allowed_subject")
    tls = None
    if cert or key or ca or client_auth or required:
        tls = TlsServerConfig(cert, key, ca, client_auth=client_auth, required=required)
    auth = None
    if secret_file:
        secrets = read_token_secret_file(secret_file, "--auth-token-secret-file")
        auth = ServerAuthConfig(
            TOKEN_PLUGIN,
            secrets,
            frozenset(subjects),
            token_secret_file=os.path.abspath(secret_file),
            token_secret_refresh_ms=refresh_ms,
        )
    elif subjects:
        raise ConfigError("--auth-allowed-subject: needs --auth-token-secret-file")
    return tls, auth


def client_security_options(command: F) -> F:
    """The client security options of the ``bkeeper`` group (module doc)."""
    options = [
        click.option(
            "--client-tls-ca",
            envvar="BKEEPER_TLS_CA",
            default="",
            help="Clients connect to bookies with TLS, trusting these PEM CA certificates "
            "[env BKEEPER_TLS_CA].",
        ),
        click.option(
            "--client-tls-cert",
            envvar="BKEEPER_TLS_CERT",
            default="",
            help="Client certificate for mutual TLS [env BKEEPER_TLS_CERT].",
        ),
        click.option(
            "--client-tls-key",
            envvar="BKEEPER_TLS_KEY",
            default="",
            help="Client key for mutual TLS [env BKEEPER_TLS_KEY].",
        ),
        click.option(
            "--client-tls-no-hostname-check",
            envvar="BKEEPER_TLS_NO_HOSTNAME_CHECK",
            is_flag=True,
            help="Do not check that a bookie's certificate names its host "
            "[env BKEEPER_TLS_NO_HOSTNAME_CHECK=1].",
        ),
        click.option(
            "--auth-token-file",
            envvar="BKEEPER_AUTH_TOKEN_FILE",
            default="",
            help="Clients authenticate to bookies with the token in this file (mode 600) "
            "[env BKEEPER_AUTH_TOKEN_FILE].",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def apply_client_security(
    ca: str, cert: str, key: str, no_hostname_check: bool, token_file: str
) -> None:
    """Make the group's client options the process's client defaults.

    Without any, and with no client loaded yet, there is nothing to do: the defaults are
    none already, and the client is not imported for a command that may not use it.
    """
    if not (ca or cert or key or token_file) and "bkeeper.client.config" not in sys.modules:
        return
    from bkeeper.client.config import set_process_security
    from bkeeper.common.auth import read_token_file
    from bkeeper.common.tls import TlsClientConfig

    tls = None
    if ca or cert or key:
        tls = TlsClientConfig(ca, cert, key, verify_hostname=not no_hostname_check)
    auth = None
    if token_file:
        auth = read_token_file(token_file, "--auth-token-file")
    set_process_security(tls, auth)
