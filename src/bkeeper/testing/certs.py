"""Test and sandbox certificates: a private CA and certificates it signs, made with the
``openssl`` command (no Python dependency). PEM files, RSA 2048, valid 30 days.

Not for production: the CA's key sits next to the certificates, unencrypted. docs/security.md
says how to make real ones.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from bkeeper.common.errors import ConfigError

__all__ = ["CertFiles", "make_ca", "make_cert"]

_DAYS = "30"


@dataclass(frozen=True)
class CertFiles:
    """A certificate and its key (PEM)."""

    cert: str
    key: str


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise ConfigError("openssl: the openssl command is needed to make certificates")
    done = subprocess.run(
        [exe, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        raise ConfigError(f"openssl {args[0]} failed: {last}")


def make_ca(directory: str | Path, name: str = "bkeeper-test-ca") -> CertFiles:
    """A self-signed CA ``name`` in ``directory`` (``<name>.pem``, ``<name>.key``)."""
    where = Path(directory)
    where.mkdir(parents=True, exist_ok=True)
    cert, key = where / f"{name}.pem", where / f"{name}.key"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        _DAYS,
        "-keyout",
        str(key),
        "-out",
        str(cert),
        "-subj",
        f"/CN={name}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=where,
    )
    key.chmod(0o600)
    return CertFiles(str(cert), str(key))


def make_cert(
    directory: str | Path,
    ca: CertFiles,
    name: str,
    hosts: tuple[str, ...] = ("localhost", "127.0.0.1"),
) -> CertFiles:
    """A certificate for ``name`` signed by ``ca``, valid for ``hosts`` (DNS names and IP
    addresses, as subject alternative names) and for both server and client use."""
    where = Path(directory)
    where.mkdir(parents=True, exist_ok=True)
    cert, key, csr = where / f"{name}.pem", where / f"{name}.key", where / f"{name}.csr"
    ext = where / f"{name}.ext"
    names = ",".join(
        f"IP:{h}" if h.replace(".", "").isdigit() or ":" in h else f"DNS:{h}" for h in hosts
    )
    ext.write_text(
        f"subjectAltName={names}\nextendedKeyUsage=serverAuth,clientAuth\n"
        "basicConstraints=CA:FALSE\n"
    )
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(csr),
        "-subj",
        f"/CN={name}",
        cwd=where,
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        ca.cert,
        "-CAkey",
        ca.key,
        "-CAcreateserial",
        "-out",
        str(cert),
        "-days",
        _DAYS,
        "-extfile",
        str(ext),
        cwd=where,
    )
    key.chmod(0o600)
    csr.unlink()
    ext.unlink()
    return CertFiles(str(cert), str(key))
