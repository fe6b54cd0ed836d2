"""Where a client's credentials are, as file paths, and the client security made from them.

:class:`ClientCredentials` names the files only (the TLS CA, the client's certificate and
key for mutual TLS, the token file) and whether the bookie's host name is checked, with,
for each, the option or variable that set it (errors name it). It holds no secret, so it can
be shown, pickled and sent to another process (a Spark executor): the files are read where
the client runs, by :meth:`ClientCredentials.tls` and :meth:`ClientCredentials.auth`, and
must exist there.

:func:`credentials_from_environment` reads them from the variables every ``bkeeper`` command
takes too (docs/security.md): ``BKEEPER_TLS_CA``, ``BKEEPER_TLS_CERT``, ``BKEEPER_TLS_KEY``,
``BKEEPER_TLS_NO_HOSTNAME_CHECK`` (``1``) and ``BKEEPER_AUTH_TOKEN_FILE``; ``BKEEPER_METADATA``
is the metadata URI. The caller hands it the environment (this module reads none itself).

A token file must not be readable by group or others, nor empty, nor larger than
:data:`~bkeeper.common.auth.PRIVATE_FILE_BYTES_MAX` (:func:`~bkeeper.common.auth.read_token_file`);
the token never appears in an error.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from bkeeper.common.auth import ClientAuthConfig, read_token_file
from bkeeper.common.errors import ConfigError
from bkeeper.common.tls import TlsClientConfig

__all__ = [
    "ENV_AUTH_TOKEN_FILE",
    "ENV_METADATA",
    "ENV_TLS_CA",
    "ENV_TLS_CERT",
    "ENV_TLS_KEY",
    "ENV_TLS_NO_HOSTNAME_CHECK",
    "ClientCredentials",
    "credentials_from_environment",
    "parse_yes_no",
]

ENV_METADATA = "BKEEPER_METADATA"
ENV_TLS_CA = "BKEEPER_TLS_CA"
ENV_TLS_CERT = "BKEEPER_TLS_CERT"
ENV_TLS_KEY = "BKEEPER_TLS_KEY"
ENV_TLS_NO_HOSTNAME_CHECK = "BKEEPER_TLS_NO_HOSTNAME_CHECK"
ENV_AUTH_TOKEN_FILE = "BKEEPER_AUTH_TOKEN_FILE"

#: The fields of :class:`ClientCredentials` and the variable each is read from.
_ENVIRONMENT = {
    "tls_ca_file": ENV_TLS_CA,
    "tls_cert_file": ENV_TLS_CERT,
    "tls_key_file": ENV_TLS_KEY,
    "auth_token_file": ENV_AUTH_TOKEN_FILE,
}
#: Values of a yes/no variable (as the ``bkeeper`` command's flags read them).
_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"", "0", "false", "f", "no", "n", "off"})


def parse_yes_no(text: str, what: str) -> bool:
    """``1``/``true``/``yes``/``on`` or ``0``/``false``/``no``/``off`` (any case)."""
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"{what}: {text!r} is not 1 or 0 (true or false)")


@dataclass(frozen=True)
class ClientCredentials:
    """The files of a client's TLS and token authentication (module doc). Empty paths: not
    set. TLS is on when the CA or a client certificate is set; a token file turns on the
    token plugin."""

    tls_ca_file: str = ""
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_hostname_check: bool = True
    auth_token_file: str = ""
    #: ``(field, what set it)`` for the fields set: an option's or a variable's name.
    named_by: tuple[tuple[str, str], ...] = ()

    def check(self) -> ClientCredentials:
        """These credentials if they make sense together, else ``ConfigError``."""
        if self.tls_key_file and not self.tls_cert_file:
            raise ConfigError(
                f"{self.name_of('tls_key_file')} is set but no client certificate is: "
                "mutual TLS needs the client's certificate and its key"
            )
        return self

    def name_of(self, field: str) -> str:
        """What set ``field`` (for errors), or the field's name."""
        return dict(self.named_by).get(field, field)

    @property
    def is_empty(self) -> bool:
        return not (self.tls_ca_file or self.tls_cert_file or self.auth_token_file)

    def over(self, fallback: ClientCredentials) -> ClientCredentials:
        """These credentials, with each field not set here taken from ``fallback``."""
        mine = dict(self.named_by)
        chosen = {f: getattr(self, f) for f in _ENVIRONMENT if f in mine}
        chosen |= {f: getattr(fallback, f) for f in _ENVIRONMENT if f not in mine}
        check = self if "tls_hostname_check" in mine else fallback
        named = dict(fallback.named_by) | mine
        return replace(
            self,
            **chosen,
            tls_hostname_check=check.tls_hostname_check,
            named_by=tuple(sorted(named.items())),
        )

    def tls(self) -> TlsClientConfig | None:
        """The client's TLS, its files loaded once here so that a missing or bad one is an
        error naming what set it; None without a CA or a client certificate."""
        self.check()
        if not (self.tls_ca_file or self.tls_cert_file):
            return None
        for field in ("tls_ca_file", "tls_cert_file", "tls_key_file"):
            path = getattr(self, field)
            if path and not os.path.isfile(path):
                raise ConfigError(f"{self.name_of(field)} {path}: no such file on this machine")
        config = TlsClientConfig(
            self.tls_ca_file,
            self.tls_cert_file,
            self.tls_key_file,
            verify_hostname=self.tls_hostname_check,
        )
        try:
            config.context()
        except ConfigError as exc:
            chain = self.name_of("tls_cert_file")
            if self.tls_key_file:
                chain += f" / {self.name_of('tls_key_file')}"
            text = str(exc).replace("client_tls.ca_file", self.name_of("tls_ca_file"))
            raise ConfigError(text.replace("client_tls.cert_file/key_file", chain)) from exc
        return config

    def auth(self) -> ClientAuthConfig | None:
        """The token plugin with the token file's token (read now); None without one."""
        if not self.auth_token_file:
            return None
        return read_token_file(self.auth_token_file, self.name_of("auth_token_file"))


def credentials_from_environment(environ: Mapping[str, str]) -> ClientCredentials:
    """The credentials the ``BKEEPER_TLS_*`` and ``BKEEPER_AUTH_TOKEN_FILE`` variables of
    ``environ`` name (module doc); empty when none is set."""
    chosen: dict[str, str] = {}
    named: list[tuple[str, str]] = []
    for field, variable in _ENVIRONMENT.items():
        value = environ.get(variable, "")
        if value:
            chosen[field] = value
            named.append((field, variable))
    no_check = environ.get(ENV_TLS_NO_HOSTNAME_CHECK)
    check = True
    if no_check is not None:
        check = not parse_yes_no(no_check, ENV_TLS_NO_HOSTNAME_CHECK)
        named.append(("tls_hostname_check", ENV_TLS_NO_HOSTNAME_CHECK))
    return ClientCredentials(**chosen, tls_hostname_check=check, named_by=tuple(sorted(named)))
