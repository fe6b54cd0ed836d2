"""``bkeeper bench kv``: the replicated key-value store (its targets: docs/benchmarks.md).

Starts a sandbox (3 bookies, ZooKeeper) and ``--members`` ``bkeeper kv serve`` processes,
then measures with the Python client: a single put and a linearizable get at a time
(latency), a stale get from a follower, puts with ``--in-flight`` outstanding (throughput,
several client processes' worth of connections in one client), the time from kill -9 of the
leader to the first put through a new one, and (``--restart-keys N``) the time a restarted
member takes to serve a store of N keys (snapshot + tail).

It lives in the CLI because it needs both :mod:`bkeeper.testing` (the sandbox) and
:mod:`bkeeper.kv` (the client), which are sibling layers.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any

import aiohttp
import click

from bkeeper.cli.bench._common import shows_elapsed
from bkeeper.common.loop import run_event_loop
from bkeeper.common.tasks import within
from bkeeper.kv import KvClient
from bkeeper.kv.client import auth_headers
from bkeeper.testing.benchmarks import free_port, free_port_range, percentiles
from bkeeper.testing.sandbox import Sandbox, SandboxConfig

__all__ = ["kv_bench"]

SESSION_MS = 4_000
#: Keys per batch when loading ``--restart-keys``.
LOAD_BATCH = 1_000


class _Member:
    def __init__(
        self,
        uri: str,
        log: Path,
        index: int,
        snapshot_every: int,
        read_lease_ms: int,
        leader_probe_ms: int,
    ) -> None:
        self.uri, self.log, self.index, self.snapshot_every = uri, log, index, snapshot_every
        self.read_lease_ms, self.leader_probe_ms = read_lease_ms, leader_probe_ms
        self.url = ""
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        offset = self.log.stat().st_size if self.log.exists() else 0
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bkeeper",
                    "kv",
                    "serve",
                    "--metadata",
                    self.uri,
                    "--name",
                    "bench",
                    "--member-id",
                    f"m{self.index}",
                    "--session-timeout-ms",
                    str(SESSION_MS),
                    "--snapshot-every",
                    str(self.snapshot_every),
                    "--read-lease-ms",
                    str(self.read_lease_ms),
                    "--leader-probe-ms",
                    str(self.leader_probe_ms),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = self.log.read_bytes()[offset:].decode(errors="replace")
            for line in text.splitlines():
                if line.startswith("kv: member ") and " at " in line:
                    self.url = line.rpartition(" at ")[2].strip()
                    return
            if self.proc.poll() is not None:
                raise click.ClickException(f"kv member {self.index} exited: {text[-500:]}")
            time.sleep(0.05)
        raise click.ClickException(f"kv member {self.index} did not start within 60 s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def _status(session: aiohttp.ClientSession, url: str) -> Any:
    try:
        timeout = aiohttp.ClientTimeout(total=1)
        # The members inherit this process's environment, BKEEPER_AUTH_TOKEN_FILE included.
        headers = auth_headers()
        async with session.get(url + "/v1/status", timeout=timeout, headers=headers) as response:
            return await response.json()
    except (aiohttp.ClientError, TimeoutError, OSError):
        return None


async def _leader(members: list[_Member], timeout_s: float = 60) -> _Member:
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            for member in members:
                if member.proc is None or member.proc.poll() is not None:
                    continue
                doc = await _status(session, member.url)
                if doc is not None and doc["leading"]:
                    return member
            await asyncio.sleep(0.05)
    raise click.ClickException("no kv member leads")


def _ms(samples: array[float]) -> str:
    p = percentiles(samples)
    return f"p50 {p['p50'] * 1e3:.2f} ms, p99 {p['p99'] * 1e3:.2f} ms, max {p['max'] * 1e3:.2f} ms"


async def _run(
    members: list[_Member],
    serial: int,
    in_flight: int,
    duration_s: float,
    restart_keys: int,
    failovers: int,
) -> None:
    perf = time.perf_counter
    leader = await _leader(members)
    follower = next(m for m in members if m is not leader)
    async with KvClient([leader.url]) as kv, KvClient([follower.url]) as stale:
        for i in range(100):  # warm up connections and code paths
            await kv.put(f"warm{i}", "x")
            await kv.get(f"warm{i}")
        samples: array[float] = array("d")
        for i in range(serial):
            start = perf()
            await kv.put(f"s{i % 1000}", "v" * 100)
            samples.append(perf() - start)
        click.echo(f"serial put (100 B):        {_ms(samples)}  ({serial} puts)")
        samples = array("d")
        for i in range(serial):
            start = perf()
            await kv.get(f"s{i % 1000}")
            samples.append(perf() - start)
        click.echo(f"linearizable get:          {_ms(samples)}  ({serial} gets)")
        samples = array("d")
        for i in range(serial):
            start = perf()
            await stale.get(f"s{i % 1000}", stale=True)
            samples.append(perf() - start)
        click.echo(f"stale get (a follower):    {_ms(samples)}  ({serial} gets)")

        for coalesce in (True, False):
            async with KvClient([leader.url], coalesce_writes=coalesce) as writer:
                rate, latencies = await _pump(writer, in_flight, duration_s)
            how = "coalesced into batches" if coalesce else "one HTTP request per put"
            click.echo(f"puts, {in_flight} in flight, {how}: {rate:,.0f} puts/s ({_ms(latencies)})")

        if restart_keys:
            loaded = 0
            start = perf()
            while loaded < restart_keys:
                count = min(LOAD_BATCH, restart_keys - loaded)
                ops = [
                    {"op": "put", "key": f"r{loaded + j:08d}", "value": "v" * 32}
                    for j in range(count)
                ]
                await kv.txn(ops)
                loaded += count
            click.echo(f"loaded {restart_keys:,} keys in {perf() - start:.1f} s (batches of 1,000)")

    if restart_keys:
        victim = next(m for m in members if m is not leader)
        assert victim.proc is not None
        victim.proc.kill()
        victim.proc.wait()
        async with aiohttp.ClientSession() as session:
            target = await _status(session, leader.url)
            start = perf()
            await asyncio.to_thread(victim.start)
            while True:  # caught up: the leader's state, at the leader's position
                doc = await _status(session, victim.url)
                if doc is not None and (doc["applied"], doc["keys"]) == (
                    target["applied"],
                    target["keys"],
                ):
                    break
                await asyncio.sleep(0.05)
        click.echo(
            f"restart of a member holding {restart_keys:,} keys: serving after "
            f"{perf() - start:.2f} s (process start, snapshot restore, tail; "
            f"snapshots restored: {doc['snapshots_restored']})"
        )

    killed: _Member | None = None
    for _ in range(failovers):
        if killed is not None:  # the member killed last time serves again (it follows)
            await asyncio.to_thread(killed.start)
            await _leader(members)
        killed = await _failover(members)


async def _failover(members: list[_Member]) -> _Member:
    """Kill -9 the leader; time the put through a new leader, and its parts: until another
    member names a new leader (the old one's session expired and it was elected), until it
    leads (fenced the old ledger, caught up, waited out the read lease), until the put."""
    perf = time.perf_counter
    leader = await _leader(members)
    assert leader.proc is not None
    others = [m for m in members if m is not leader]
    marks: dict[str, float] = {}

    async def watch() -> None:
        async with aiohttp.ClientSession() as session:
            while "leading" not in marks:
                for member in others:
                    doc = await _status(session, member.url)
                    if doc is None:
                        continue
                    if doc.get("leader") not in (None, leader.url):
                        marks.setdefault("elected", perf())
                    if doc.get("leading"):
                        marks.setdefault("elected", perf())
                        marks.setdefault("leading", perf())
                await asyncio.sleep(0.01)

    leader.proc.kill()
    leader.proc.wait()
    start = perf()
    watcher = asyncio.create_task(watch())
    async with KvClient([m.url for m in others], timeout_s=120, attempt_timeout_s=2) as kv:
        await kv.put("after-kill", "x")
    done = perf()
    await within(watcher, 30)
    elected, leading = marks["elected"] - start, marks["leading"] - start
    click.echo(
        f"kill -9 of the leader: a put through a new leader after {done - start:.2f} s "
        f"(session timeout {SESSION_MS / 1000:.1f} s; new leader named after {elected:.2f} s, "
        f"leading after {leading:.2f} s)"
    )
    return leader


async def _pump(kv: KvClient, in_flight: int, duration_s: float) -> tuple[float, array[float]]:
    """Puts from ``in_flight`` concurrent callers for ``duration_s``: puts/s and latencies."""
    perf = time.perf_counter
    done = 0
    latencies: array[float] = array("d")
    deadline = perf() + duration_s

    async def caller(worker: int) -> None:
        nonlocal done
        n = 0
        while perf() < deadline:
            start = perf()
            await kv.put(f"p{worker}-{n % 100}", "v" * 100)
            latencies.append(perf() - start)
            n += 1
            done += 1

    began = perf()
    await asyncio.gather(*(caller(w) for w in range(in_flight)))
    return done / (perf() - began), latencies


@click.command("kv")
@click.option("--members", default=3, show_default=True, type=click.IntRange(1, 9))
@click.option("--serial", default=2000, show_default=True, type=click.IntRange(1))
@click.option("--in-flight", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--duration", default=10.0, show_default=True, type=click.FloatRange(0.1))
@click.option(
    "--restart-keys",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Load this many keys, then time a follower's restart (0: skip).",
)
@click.option("--snapshot-every", default=100_000, show_default=True, type=click.IntRange(0))
@click.option(
    "--read-lease-ms",
    default=500,
    show_default=True,
    type=click.IntRange(0, 10_000),
    help="The members' read lease (0: a barrier per linearizable read).",
)
@click.option(
    "--leader-probe-ms",
    default=100,
    show_default=True,
    type=click.IntRange(0, 60_000),
    help="The members' crash detector (0: off: fail-over waits for the session to expire).",
)
@click.option(
    "--failovers",
    default=1,
    show_default=True,
    type=click.IntRange(1, 100),
    help="Times the leader is killed -9 (the killed one restarted in between).",
)
@shows_elapsed("kv")
def kv_bench(
    members: int,
    serial: int,
    in_flight: int,
    duration: float,
    restart_keys: int,
    snapshot_every: int,
    read_lease_ms: int,
    leader_probe_ms: int,
    failovers: int,
) -> None:
    """The replicated key-value store: latency, throughput, fail-over, restart."""
    with tempfile.TemporaryDirectory(prefix="bkeeper-bench-kv-") as tmp:
        config = SandboxConfig(
            data_dir=Path(tmp),
            bookies=3,
            zookeeper_port=free_port(),
            bookie_port_base=free_port_range(3),
            autorecovery=False,
        )
        with Sandbox(config) as box:
            group = [
                _Member(
                    box.metadata_uri,
                    Path(tmp) / f"kv-{i}.log",
                    i,
                    snapshot_every,
                    read_lease_ms,
                    leader_probe_ms,
                )
                for i in range(members)
            ]
            try:
                for member in group:
                    member.start()
                click.echo(f"{members} kv members on 3 bookies (E3/Qw3/Qa2), pid {os.getpid()}")
                run_event_loop(_run(group, serial, in_flight, duration, restart_keys, failovers))
            finally:
                for member in group:
                    if member.proc is not None and member.proc.poll() is None:
                        os.kill(member.proc.pid, signal.SIGCONT)
                    member.stop()
