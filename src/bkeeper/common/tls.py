"""TLS settings of bookies and clients, and the ``ssl`` contexts built from them.

TLS on the bookie port is negotiated as Apache BookKeeper does it: on the same port, the
client sends a v3 ``START_TLS`` request, the bookie answers EOK, and both sides then run the
TLS handshake on the connection (see ``bkeeper.server.connection`` and
``bkeeper.client.handshake``). Certificates and keys are PEM files (BookKeeper's
``tlsKeyStoreType=PEM``: ``tlsCertificatePath``, ``tlsKeyStore``, ``tlsTrustStore``).

- :class:`TlsServerConfig`: the bookie's certificate chain and key; ``ca_file`` (PEM) with
  ``client_auth`` makes it mutual TLS (a client without a certificate signed by that CA fails
  the handshake: BookKeeper's ``tlsClientAuthentication``); ``required`` makes the bookie
  TLS-only (every request before ``START_TLS`` completes is answered EUA).
- :class:`TlsClientConfig`: the CA that signed the bookies' certificates (empty: the
  system's trust store), the client's own certificate and key for mutual TLS, and
  ``verify_hostname`` (BookKeeper's ``tlsHostnameVerificationEnabled``; the name checked is
  the host the client connects to, from the bookie's registration).

Both refuse protocols below TLS 1.2. Files are read when the context is built (at bookie
start, at client creation); a file that cannot be loaded is a :class:`ConfigError` naming the
field and the file.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from bkeeper.common.errors import ConfigError

__all__ = ["TlsClientConfig", "TlsServerConfig", "describe_tls_error"]


def _load_chain(context: ssl.SSLContext, cert_file: str, key_file: str, owner: str) -> None:
    try:
        context.load_cert_chain(cert_file, key_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"{owner}.cert_file/key_file: cannot load {cert_file!r} / {key_file or cert_file!r}:"
            f" {_reason(exc)}"
        ) from exc


def _load_ca(context: ssl.SSLContext, ca_file: str, owner: str) -> None:
    try:
        context.load_verify_locations(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{owner}.ca_file: cannot load {ca_file!r}: {_reason(exc)}") from exc


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason).lower().replace("_", " ")
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def describe_tls_error(exc: BaseException) -> str:
    """One line for a failed handshake (``certificate verify failed: ...``), no traceback."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        return _reason(exc)
    if isinstance(exc, ConnectionError | EOFError):
        return f"connection closed during the TLS handshake ({type(exc).__name__})"
    if isinstance(exc, TimeoutError):
        return "no TLS handshake within the timeout"
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True)
class TlsServerConfig:
    """A bookie's TLS (module doc). ``cert_file`` and ``key_file`` are required."""

    cert_file: str
    key_file: str
    ca_file: str = ""
    client_auth: bool = False
    required: bool = False
    handshake_timeout_ms: int = 10_000

    def __post_init__(self) -> None:
        if not self.cert_file:
            raise ConfigError("tls.cert_file: a PEM certificate chain is required")
        if not self.key_file:
            raise ConfigError("tls.key_file: a PEM private key is required")
        if self.client_auth and not self.ca_file:
            raise ConfigError(
                "tls.ca_file: client_auth (mutual TLS) needs the CA that signs client certificates"
            )
        if not isinstance(self.handshake_timeout_ms, int) or self.handshake_timeout_ms <= 0:
            raise ConfigError(
                f"tls.handshake_timeout_ms: must be a positive integer, got "
                f"{self.handshake_timeout_ms!r}"
            )

    def context(self) -> ssl.SSLContext:
        """The server-side context; :class:`ConfigError` if a file cannot be loaded."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        _load_chain(context, self.cert_file, self.key_file, "tls")
        if self.ca_file:
            _load_ca(context, self.ca_file, "tls")
        context.verify_mode = ssl.CERT_REQUIRED if self.client_auth else ssl.CERT_NONE
        return context


@dataclass(frozen=True)
class TlsClientConfig:
    """A client's TLS (module doc): every connection to a bookie starts with START_TLS."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    verify_hostname: bool = True
    handshake_timeout_ms: int = 10_000

    def __post_init__(self) -> None:
        if self.key_file and not self.cert_file:
            raise ConfigError("client_tls.cert_file: key_file is set but cert_file is not")
        if not isinstance(self.handshake_timeout_ms, int) or self.handshake_timeout_ms <= 0:
            raise ConfigError(
                f"client_tls.handshake_timeout_ms: must be a positive integer, got "
                f"{self.handshake_timeout_ms!r}"
            )

    def context(self) -> ssl.SSLContext:
        """The client-side context; :class:`ConfigError` if a file cannot be loaded."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.verify_hostname
        context.verify_mode = ssl.CERT_REQUIRED
        if self.ca_file:
            _load_ca(context, self.ca_file, "client_tls")
        else:
            context.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if self.cert_file:
            _load_chain(context, self.cert_file, self.key_file, "client_tls")
        return context
