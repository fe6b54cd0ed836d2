"""The credentials of ``bkeeper sandbox --secure``, made once under ``<data dir>/security``
and kept across restarts (ZooKeeper's ACLs name the digest identity, the cookies the bookies):

- ``ca.pem`` / ``ca.key``: a private CA; ``bookie.pem`` / ``bookie.key``: the bookies'
  certificate (for ``localhost`` and ``127.0.0.1``), signed by it;
- ``token.secret``: the bookies' token secret; ``client.token``: a token for the subject
  ``sandbox`` (valid :data:`TOKEN_TTL_S`; remade when it has expired);
- ``zk.digest``: the ZooKeeper digest identity ``bkeeper:<random>``.

Every secret file has mode 600. For trying things, not for production (docs/security.md).
"""

from __future__ import annotations

import base64
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from bkeeper.common.auth import TokenSecrets, make_token, read_token_secret_file, verify_token
from bkeeper.common.errors import AuthenticationError
from bkeeper.testing.certs import CertFiles, make_ca, make_cert

__all__ = ["TOKEN_TTL_S", "SandboxSecurity"]

#: How long the sandbox's client token is valid.
TOKEN_TTL_S = 30 * 86_400
#: A token with less than this left is made again at start.
_TOKEN_RENEW_S = 86_400


def _private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(data)


@dataclass(frozen=True)
class SandboxSecurity:
    ca: CertFiles
    bookie: CertFiles
    token_secret_file: Path
    token_file: Path
    digest_file: Path

    @classmethod
    def prepare(cls, where: Path) -> SandboxSecurity:
        """The sandbox's credentials under ``where``, made where missing."""
        where.mkdir(parents=True, exist_ok=True)
        where.chmod(0o700)
        ca = CertFiles(str(where / "ca.pem"), str(where / "ca.key"))
        if not Path(ca.cert).exists():
            ca = make_ca(where, "ca")
        bookie = CertFiles(str(where / "bookie.pem"), str(where / "bookie.key"))
        if not Path(bookie.cert).exists():
            bookie = make_cert(where, ca, "bookie")
        secret_file = where / "token.secret"
        if not secret_file.exists():
            _private(secret_file, base64.b64encode(secrets.token_bytes(48)) + b"\n")
        # The file may hold 2 secrets during a rotation (make-secret --add): the newest signs.
        secrets_ = read_token_secret_file(str(secret_file))
        token_file = where / "client.token"
        if not _token_fresh(secrets_, token_file):
            token = make_token(secrets_.newest, "sandbox", TOKEN_TTL_S)
            _private(token_file, token.encode() + b"\n")
        digest_file = where / "zk.digest"
        if not digest_file.exists():
            _private(digest_file, f"bkeeper:{secrets.token_urlsafe(24)}\n".encode())
        return cls(ca, bookie, secret_file, token_file, digest_file)

    def bookie_args(self) -> list[str]:
        """TLS (required) and token authentication for a bookie."""
        return [
            "--tls-cert",
            self.bookie.cert,
            "--tls-key",
            self.bookie.key,
            "--tls-required",
            "--auth-token-secret-file",
            str(self.token_secret_file),
        ]

    def client_args(self) -> list[str]:
        """The ``bkeeper`` group options that make a command a client of the sandbox."""
        return ["--client-tls-ca", self.ca.cert, "--auth-token-file", str(self.token_file)]

    def client_env(self) -> dict[str, str]:
        """The environment that makes a ``bkeeper`` command a client of the sandbox."""
        return {"BKEEPER_TLS_CA": self.ca.cert, "BKEEPER_AUTH_TOKEN_FILE": str(self.token_file)}


def _token_fresh(secret: TokenSecrets, token_file: Path) -> bool:
    if not token_file.exists():
        return False
    try:
        claims = verify_token(secret, token_file.read_bytes().strip(), time.time())
    except AuthenticationError:
        return False
    return claims.expires_at_s - time.time() > _TOKEN_RENEW_S
