"""Fixtures of the security tests: a private CA and certificates (``openssl``), a token
secret, and real ``bkeeper bookie`` processes started with security options."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bkeeper.testing.bookie_process import wait_ready
from bkeeper.testing.certs import CertFiles, make_ca, make_cert

SECRET = b"s" * 16 + os.urandom(24)


@dataclass(frozen=True)
class Pki:
    ca: CertFiles
    bookie: CertFiles
    client: CertFiles
    rogue_ca: CertFiles
    rogue_client: CertFiles
    elsewhere: CertFiles  # signed by ca, for "bookie.invalid" only
    secret_file: str


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory, subprocesses: None) -> Pki:
    """Certificates made by ``openssl`` processes (so its users are integration tests)."""
    where = tmp_path_factory.mktemp("pki")
    ca = make_ca(where, "ca")
    rogue = make_ca(where, "rogue-ca")
    secret_file = where / "token.secret"
    secret_file.write_bytes(SECRET.hex().encode())
    secret_file.chmod(0o600)
    return Pki(
        ca=ca,
        bookie=make_cert(where, ca, "bookie"),
        client=make_cert(where, ca, "client"),
        rogue_ca=rogue,
        rogue_client=make_cert(where, rogue, "rogue-client"),
        elsewhere=make_cert(where, ca, "elsewhere", hosts=("bookie.invalid",)),
        secret_file=str(secret_file),
    )


@dataclass
class BookieProcess:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def spawn_bookie(where: Path, *args: str) -> BookieProcess:
    """A bookie process with ``args`` on a port of its own choosing."""
    where.mkdir(parents=True, exist_ok=True)
    log_path = where / "bookie.log"
    command = [sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(where / "data")]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [*command, "--port", "0", *args], stdout=log, stderr=subprocess.STDOUT
        )
    return BookieProcess(proc, wait_ready(proc, log_path, 0), log_path)


def stop(bookies: list[BookieProcess]) -> None:
    for b in bookies:
        b.proc.terminate()
    for b in bookies:
        try:
            b.proc.wait(30)
        except subprocess.TimeoutExpired:
            b.proc.kill()
            b.proc.wait()


@pytest.fixture(scope="module")
def bookie_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    started: list[BookieProcess] = []
    root = tmp_path_factory.mktemp("bookies")

    def start(*args: str) -> BookieProcess:
        bookie = spawn_bookie(root / f"b{len(started)}", *args)
        started.append(bookie)
        return bookie

    yield start
    stop(started)
