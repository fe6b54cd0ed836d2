"""Rotating the token secret of a running cluster, with real processes (ZooKeeper, 3 bookies)
and clients writing throughout; no bookie restarts (docs/security.md, "Rotating the token
secret"):

1. a client with a token of the OLD secret writes;
2. ``bkeeper security make-secret --add`` puts a NEW secret in the file, copied to every
   bookie; the bookies re-read it ("token secrets reloaded: 2"), a client with a token of the
   NEW secret connects and writes, and a new client with an OLD token still connects;
3. ``bkeeper security drop-old-secret``, copied to every bookie: a new connection with an
   OLD token is refused (one clear error), the NEW client goes on, and connections admitted
   before stay admitted;

and every acknowledged entry is read back."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bkeeper.client import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.common.auth import ClientAuthConfig, make_token, read_token_secret_file
from bkeeper.common.errors import AuthenticationError, BKeeperError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.testing.bookie_process import wait_ready
from bkeeper.testing.zookeeper import ZooKeeperServer

#: The bookies look at their secret file at most this often.
REFRESH_MS = 200
PASSWORD = b"rotation"


@dataclass
class Bookie:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    secret_file: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def bkeeper(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "bkeeper", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout + done.stderr


def install(source: Path, target: Path) -> None:
    """Copy the secret file to a bookie's as an operator should: a new file renamed over."""
    temporary = target.with_name(target.name + ".new")
    shutil.copyfile(source, temporary)
    temporary.chmod(0o600)
    os.replace(temporary, target)


@pytest.fixture
async def cluster_uri(zookeeper: ZooKeeperServer) -> AsyncIterator[str]:
    uri = zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
    yield uri


@pytest.fixture
def master_secret(tmp_path: Path) -> Path:
    path = tmp_path / "master.secret"
    bkeeper("security", "make-secret", str(path))
    return path


@pytest.fixture
def bookies(tmp_path: Path, cluster_uri: str, master_secret: Path) -> Iterator[list[Bookie]]:
    started: list[Bookie] = []
    try:
        for n in range(3):
            where = tmp_path / f"bookie{n}"
            where.mkdir()
            secret_file = where / "token.secret"
            install(master_secret, secret_file)
            log_path = where / "bookie.log"
            command = [
                sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(where / "data"),
                "--port", "0", "--metadata", cluster_uri,
                "--auth-token-secret-file", str(secret_file),
                "--auth-token-secret-refresh-ms", str(REFRESH_MS),
            ]  # fmt: skip
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            started.append(Bookie(proc, 0, log_path, secret_file))
        for b in started:  # started together, waited for in turn
            b.port = wait_ready(b.proc, b.log_path, 0)
        yield started
    finally:
        for b in started:
            b.proc.terminate()
        for b in started:
            try:
                b.proc.wait(30)
            except subprocess.TimeoutExpired:
                b.proc.kill()
                b.proc.wait()


def client(uri: str, token: str) -> BookKeeper:
    return BookKeeper(uri, ClientConfig(auth=ClientAuthConfig(token=token)))


@dataclass
class Writer:
    """Appends to one ledger until stopped; remembers what was acknowledged."""

    bk: BookKeeper
    name: str
    ledger_id: int = -1
    acknowledged: dict[int, bytes] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, started: asyncio.Event) -> None:
        handle = await self.bk.create_ledger(3, 3, 2, password=PASSWORD)
        self.ledger_id = handle.ledger_id
        n = 0
        try:
            while not self.stop.is_set():
                data = f"{self.name}-{n}".encode()
                try:
                    entry_id = await handle.append(data)
                except BKeeperError as exc:  # kept: the test says what failed
                    self.errors.append(exc)
                    return
                self.acknowledged[entry_id] = data
                n += 1
                started.set()
                await asyncio.sleep(0.01)
        finally:
            await handle.close()

    def count(self) -> int:
        return len(self.acknowledged)


async def grows(writer: Writer, by: int = 5) -> None:
    """Wait (bounded) until ``writer`` has ``by`` more entries acknowledged."""
    target = writer.count() + by
    for _ in range(1000):
        if writer.errors:
            raise AssertionError(f"{writer.name} failed: {writer.errors[0]!r}")
        if writer.count() >= target:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{writer.name} stalled at {writer.count()} entries")


async def wait_logged(bookies: list[Bookie], text: str) -> None:
    for _ in range(600):
        if all(text in b.log() for b in bookies):
            return
        await asyncio.sleep(0.05)
    missing = [b.port for b in bookies if text not in b.log()]
    raise AssertionError(f"{text!r} not logged by the bookies on ports {missing}")


async def write_some(uri: str, token: str, entries: int = 5) -> int:
    async with client(uri, token) as bk:
        handle = await bk.create_ledger(3, 3, 2, password=PASSWORD)
        for n in range(entries):
            await handle.append(f"short-{n}".encode())
        await handle.close()
        return handle.ledger_id


async def start_writer(bk: BookKeeper, name: str) -> tuple[Writer, asyncio.Task[None]]:
    writer = Writer(bk, name)
    started = asyncio.Event()
    task = asyncio.create_task(writer.run(started))
    async with asyncio.timeout(30):
        await started.wait()
    return writer, task


async def test_rotation_without_downtime(
    bookies: list[Bookie], cluster_uri: str, master_secret: Path
) -> None:
    pids = [b.proc.pid for b in bookies]
    old_secret = read_token_secret_file(str(master_secret)).newest
    old_token = make_token(old_secret, "old-client", 3600)
    short_lived: list[int] = []

    async with client(cluster_uri, old_token) as old_bk:
        old_writer, old_task = await start_writer(old_bk, "old")

        # 1. Add the new secret; every bookie re-reads its copy of the file.
        assert "2 secrets" in bkeeper("security", "make-secret", "--add", str(master_secret))
        for b in bookies:
            install(master_secret, b.secret_file)
        await wait_logged(bookies, "token secrets reloaded: 2")  # before a new token is used
        new_secret = read_token_secret_file(str(master_secret)).newest
        assert new_secret != old_secret
        new_token = bkeeper(
            "security", "make-token", "--secret-file", str(master_secret),
            "--subject", "new-client", "--ttl-s", "3600",
        ).split()[0]  # fmt: skip
        async with client(cluster_uri, new_token) as new_bk:
            new_writer, new_task = await start_writer(new_bk, "new")
            await grows(old_writer)
            # A new client with an old token still connects during the rotation.
            short_lived.append(await write_some(cluster_uri, old_token))

            # 2. Drop the old secret; bookies re-read; old tokens refused on new connections.
            bkeeper("security", "drop-old-secret", str(master_secret))
            for b in bookies:
                install(master_secret, b.secret_file)
            await wait_logged(bookies, "token secrets reloaded: 1")  # before the refusal
            with pytest.raises(AuthenticationError) as refused:
                async with asyncio.timeout(60):
                    await write_some(cluster_uri, old_token)
            message = str(refused.value)
            assert "\n" not in message and "token" in message, message
            assert old_token.split(".")[-1] not in message
            assert any("bad token signature" in b.log() for b in bookies)
            # The new client goes on, new connections too; the old writer's connections were
            # admitted before the drop and stay so.
            await grows(new_writer)
            short_lived.append(await write_some(cluster_uri, new_token))
            await grows(old_writer)

            for writer in (old_writer, new_writer):
                writer.stop.set()
            await asyncio.gather(old_task, new_task)
            assert not old_writer.errors and not new_writer.errors

            # Nothing acknowledged is lost (read back with the new token).
            for writer in (old_writer, new_writer):
                handle = await new_bk.open_ledger(writer.ledger_id, PASSWORD)
                read = {e.entry_id: e.data async for e in handle.read()}
                await handle.close()
                assert read == writer.acknowledged, writer.name
                assert len(read) >= 10
            for ledger_id in short_lived:
                handle = await new_bk.open_ledger(ledger_id, PASSWORD)
                assert [e.data async for e in handle.read()] == [
                    f"short-{n}".encode() for n in range(5)
                ]
                await handle.close()

    # No bookie restarted; no secret or token in any log.
    assert [b.proc.pid for b in bookies] == pids
    assert all(b.proc.poll() is None for b in bookies)
    for b in bookies:
        text = b.log()
        for secret in (old_secret, new_secret):
            assert secret.decode() not in text
        for token in (old_token, new_token):
            assert token.split(".")[-1] not in text
