"""The client a Spark read or write makes, from its options: ``metadata`` and the
``client.<field>`` settings, and the credential files (``tls.*``, ``auth.tokenFile``), each
not given taken from the driver's environment (:mod:`bkeeper.spark.options`, Security).
Only paths travel to executors; :func:`client_config` reads the files where the client is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

from bkeeper.client.config import ClientConfig
from bkeeper.client.credentials import (
    ENV_METADATA,
    ClientCredentials,
    credentials_from_environment,
)
from bkeeper.common.errors import ConfigError
from bkeeper.spark.option_values import bool_option, option_text

__all__ = [
    "CREDENTIALS",
    "CREDENTIAL_OPTIONS",
    "client_config",
    "client_settings",
    "metadata_uri",
]

#: The ``client`` setting that carries the credentials' paths (not a ``ClientConfig`` field).
CREDENTIALS = "credentials"
#: The security options and the :class:`ClientCredentials` field each sets.
CREDENTIAL_OPTIONS = {
    "tls.caFile": "tls_ca_file",
    "tls.certFile": "tls_cert_file",
    "tls.keyFile": "tls_key_file",
    "auth.tokenFile": "auth_token_file",
}


def client_config(client: tuple[tuple[str, Any], ...]) -> ClientConfig:
    """The client of these ``client`` settings: its TLS and token are made here from the
    credentials' files (read now, so on the executor that makes the client)."""
    settings = dict(client)
    credentials = settings.pop(CREDENTIALS, None)
    if isinstance(credentials, ClientCredentials):
        settings["tls"] = credentials.tls()
        settings["auth"] = credentials.auth()
    return ClientConfig(**settings)


def metadata_uri(options: Mapping[str, str], environ: Mapping[str, str]) -> str:
    uri = option_text(options, "metadata")
    name = "option metadata"
    if uri is None and environ.get(ENV_METADATA):
        uri, name = environ[ENV_METADATA], f"{ENV_METADATA} (the driver's environment)"
    if not uri:
        raise ConfigError(
            f"option metadata is required (or {ENV_METADATA} in the driver's environment): "
            "the cluster's metadata URI, e.g. zk://127.0.0.1:2181/ledgers"
        )
    if not uri.startswith(("zk://", "memory://")):
        raise ConfigError(f"{name}: {uri!r} is not a zk:// or memory:// URI")
    return uri


def _credentials(options: Mapping[str, str], environ: Mapping[str, str]) -> ClientCredentials:
    """The security options, each one not given taken from the environment (module doc).
    An option given empty turns its variable off."""
    chosen: dict[str, Any] = {}
    named: list[tuple[str, str]] = []
    for option, field_name in CREDENTIAL_OPTIONS.items():
        value = option_text(options, option)
        if value is not None:
            chosen[field_name] = value.strip()
            named.append((field_name, f"option {option}"))
    if option_text(options, "tls.hostnameCheck") is not None:
        chosen["tls_hostname_check"] = bool_option(options, "tls.hostnameCheck", True)
        named.append(("tls_hostname_check", "option tls.hostnameCheck"))
    given = ClientCredentials(**chosen, named_by=tuple(sorted(named)))
    return given.over(credentials_from_environment(environ)).check()


#: ``ClientConfig`` fields no ``client.<field>`` option sets.
_NOT_OPTIONS = ("racks", "protocol", "tls", "auth")


def client_settings(
    options: Mapping[str, str], environ: Mapping[str, str]
) -> tuple[tuple[str, Any], ...]:
    """``client.<field>`` options, typed like the ``ClientConfig`` field they set."""
    known = {f.name: f for f in fields(ClientConfig)}
    chosen: list[tuple[str, Any]] = []
    for key, text in options.items():
        if not key.lower().startswith("client."):
            continue
        name = key[len("client.") :].lower()
        if name in ("tls", "auth"):
            raise ConfigError(
                f"option {key}: set TLS and the token with the options tls.caFile, "
                "tls.certFile, tls.keyFile, tls.hostnameCheck and auth.tokenFile"
            )
        if name not in known or name in _NOT_OPTIONS:
            simple = sorted(n for n in known if n not in _NOT_OPTIONS)
            raise ConfigError(f"option {key}: unknown client setting; use one of {simple}")
        if name == "placement":
            chosen.append((name, str(text)))
            continue
        try:
            chosen.append((name, int(text)))
        except ValueError:
            raise ConfigError(f"option {key}: {text!r} is not an integer") from None
    ClientConfig(**dict(chosen))  # validates ranges now, on the driver
    credentials = _credentials(options, environ)
    if not credentials.is_empty:
        chosen.append((CREDENTIALS, credentials))
    return tuple(sorted(chosen))
