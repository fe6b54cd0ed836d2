"""The kv workload: ``bkeeper kv serve`` members under faults, clients recording every call.

* ``MEMBERS`` member processes of one store (``bkeeper kv serve``, session timeout
  ``SESSION_MS``, snapshots every ``SNAPSHOT_EVERY`` commands and small log ledgers, so that
  snapshots, truncation and restores happen during a run) on fixed HTTP ports (a restarted
  member keeps its URL). Even seeds run the members with a read lease of ``READ_LEASE_MS``
  (the default of ``kv serve``), odd seeds without one (a barrier per linearizable read).
* client tasks, each calling one operation at a time on ``KEYS`` keys: linearizable gets,
  puts (unique values), deletes and compare-and-sets (expecting the version it saw last).
  Clients share :class:`~bkeeper.kv.client.KvClient` s by threes (so their puts and deletes
  are coalesced into batches) and two use one without coalescing, whose HTTP requests wait
  ``PATIENT_ATTEMPT_S`` (longer than a pause), so that a request sent to a leader just
  before it was stopped is answered by it when it continues, a deposed leader then.
  ``ROAMING`` more tasks only read, each read sent to a member drawn at random (as behind a
  load balancer; a follower redirects) and given up after ``ROAM_TIMEOUT_S``: reads keep
  being sent to a stopped leader while another leader takes over and takes writes, and one
  sent then must not be answered from the old state when the stopped one continues. Each
  call is recorded as an ``invoke`` and an ``ok`` / ``info`` (:mod:`bkeeper.verify.check_kv`).
* :class:`KvNemesis` adds the members' faults to the cluster's (:mod:`bkeeper.verify.nemesis`):
  ``leader-kill`` (kill -9 the member leading now; heal: start it again), ``leader-pause``
  (SIGSTOP it, past the session timeout sometimes; heal: SIGCONT), and, with the members in
  network namespaces of their own (:mod:`bkeeper.verify.netns`), ``leader-partition`` (its
  link down: cut from everyone), ``leader-partition-zk`` (cut from ZooKeeper only: it keeps
  serving clients and writing to the bookies while its session expires and another member
  takes over) and ``leader-partition-bookies`` (cut from every bookie: it keeps leading and
  can write nothing); heal: join it again.

:meth:`KvWorkload.finish` runs once every fault is healed: every member must be running, a
linearizable read of every key (recorded: an acknowledged write lost makes the history
illegal), and every member must converge to the leader's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp

from bkeeper.common.errors import BKeeperError, StateMachineError
from bkeeper.common.loop import TASK_DUMP_SIGNAL
from bkeeper.kv import KvClient
from bkeeper.kv.client import auth_headers
from bkeeper.kv.server import log_name
from bkeeper.namedlog import LogConfig, NamedLogs
from bkeeper.testing.benchmarks import free_port
from bkeeper.verify.check import Verdict
from bkeeper.verify.history import History
from bkeeper.verify.nemesis import Nemesis
from bkeeper.verify.netns import Network
from bkeeper.verify.schedule import KV_NEMESES, MEMBER_PARTITIONS, Fault
from bkeeper.verify.workload import _pause, _why, start_client

__all__ = [
    "KEYS",
    "LISTED_BUT_GONE",
    "MEMBERS",
    "STALLED",
    "KvClients",
    "KvMember",
    "KvNemesis",
    "KvWorkload",
    "member_log_lines",
]

log = logging.getLogger(__name__)

STORE = "verify"
MEMBERS = 3
KEYS = 6
#: Client tasks: ``COALESCED_GROUPS`` clients shared by 3 tasks each, then 2 tasks on a
#: client that does not coalesce.
COALESCED_GROUPS = 2
ROAMING = 4
ROAM_TIMEOUT_S = 1.0
#: The members' ZooKeeper session timeout (the sandbox's ZooKeeper, tick 2 s, grants 4 s at
#: least).
SESSION_MS = 4_000
SNAPSHOT_EVERY = 500
READ_LEASE_MS = 500
ROLL_BYTES = 64 * 1024
#: Seconds a client call keeps trying (then its outcome is unknown), and per HTTP request.
CALL_TIMEOUT_S = 30.0
ATTEMPT_TIMEOUT_S = 3.0
PATIENT_ATTEMPT_S = 15.0
#: Seconds a member has to start serving, and the store to agree at the end.
START_TIMEOUT_S = 90.0
CONVERGE_TIMEOUT_S = 60.0
#: Seconds between refreshes of the log's ledger list (the ``corrupt`` nemesis picks from it).
LEDGERS_REFRESH_S = 2.0


class KvMember:
    """One ``bkeeper kv serve`` process (started, killed, started again on the same port),
    in ``network``'s namespace for it when given (else the host's)."""

    def __init__(
        self, uri: str, out: Path, index: int, read_lease_ms: int, network: Network | None = None
    ) -> None:
        self.uri, self.out, self.index = uri, out, index
        self.read_lease_ms = read_lease_ms
        self.port = free_port()
        self.namespace: str | None = None
        self.host = "127.0.0.1"
        if network is not None:
            where = network.member_host(index)
            self.namespace, self.host = network.namespace(where), network.host_ip(where)
        self.url = f"http://{self.host}:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        inside = [] if self.namespace is None else ["ip", "netns", "exec", self.namespace]
        return [
            *inside,
            sys.executable,
            "-m",
            "bkeeper",
            "kv",
            "serve",
            "--metadata",
            self.uri,
            "--name",
            STORE,
            "--member-id",
            f"m{self.index}",
            "--host",
            self.host,
            "--http-port",
            str(self.port),
            "--session-timeout-ms",
            str(SESSION_MS),
            "--snapshot-every",
            str(SNAPSHOT_EVERY),
            "--roll-bytes",
            str(ROLL_BYTES),
            "--read-lease-ms",
            str(self.read_lease_ms),
        ]

    def start(self) -> None:
        """Start it and wait until it serves (blocking)."""
        offset = self.out.stat().st_size if self.out.exists() else 0
        with open(self.out, "ab") as sink:
            self.proc = subprocess.Popen(self.command(), stdout=sink, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.out.read_bytes()[offset:].decode(errors="replace")
            if any(line.startswith("kv: member ") for line in text.splitlines()):
                return
            if self.proc.poll() is not None:
                raise BKeeperError(f"kv member {self.index} exited: {text.strip()[-300:]}")
            time.sleep(0.05)
        raise BKeeperError(f"kv member {self.index} did not serve within {START_TIMEOUT_S:g} s")

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if not self.running:
            raise BKeeperError(f"kv member {self.index} is not running")
        assert self.proc is not None
        self.proc.send_signal(sig)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def _status(session: aiohttp.ClientSession, url: str) -> dict[str, Any] | None:
    try:
        # The members inherit this process's environment, BKEEPER_AUTH_TOKEN_FILE included.
        timeout, headers = aiohttp.ClientTimeout(total=1), auth_headers()
        async with session.get(url + "/v1/status", timeout=timeout, headers=headers) as r:
            doc = await r.json()
            return doc if isinstance(doc, dict) else None
    except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
        return None


#: What a member's log says when a follower found its reader stuck
#: (``ReplicatedStateMachine`` replaces such a reader, and says where it waited).
STALLED = "follower stalled"
#: What it says when its reader met a ledger the log lists but that is gone (the reader
#: reads on after it; whatever the ledger held is lost).
LISTED_BUT_GONE = "is listed but gone"


def member_log_lines(path: Path, marker: str = STALLED) -> list[str]:
    """The lines of a member's log that hold ``marker`` (none when it has no log)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    return [line for line in text.splitlines() if marker in line]


async def _standing(members: list[KvMember]) -> str:
    """Each member's role and last applied position, as its status says ("m0 leading at
    (L, E, I)"): where a member that did not converge stopped, beside the others."""
    async with aiohttp.ClientSession() as session:
        docs = await asyncio.gather(*(_status(session, m.url) for m in members))
    return ", ".join(
        f"m{m.index} " + ("no status" if d is None else f"{d.get('role')} at {d.get('applied')}")
        for m, d in zip(members, docs, strict=True)
    )


async def leading_member(members: list[KvMember]) -> KvMember | None:
    """The member that says it leads now (None: none does, or none answered)."""
    async with aiohttp.ClientSession() as session:
        for member in members:
            if member.running:
                doc = await _status(session, member.url)
                if doc is not None and doc.get("leading"):
                    return member
    return None


class KvClients:
    """The calling side of the kv workload (module doc): the client tasks on ``urls`` until
    ``stop`` is set, each call recorded into ``history``. ``connector``: the clients' HTTP
    connector (the simulator's goes through its network). Client ids come from ``seed``."""

    def __init__(
        self,
        urls: list[str],
        history: History,
        seed: int,
        connector: Callable[[], aiohttp.BaseConnector] | None = None,
        pause_s: float = 0.0,
    ) -> None:
        """``pause_s``: each task's pause after each call (none: calls back to back)."""
        self.urls = urls
        self.pause_s = pause_s
        self.history = history
        self.seed = seed
        self.connector = connector
        self._ids = random.Random(seed * 1_000 + 999)

    async def run(self, stop: asyncio.Event) -> None:
        groups = [self._client(coalesce=True) for _ in range(COALESCED_GROUPS)]
        plain = self._client(coalesce=False)
        try:
            async with asyncio.TaskGroup() as tasks:
                n = 0
                for client in groups:
                    for _ in range(3):
                        tasks.create_task(self._calls(client, n, stop))
                        n += 1
                for _ in range(2):
                    tasks.create_task(self._calls(plain, n, stop))
                    n += 1
                for _ in range(ROAMING):
                    tasks.create_task(self._roam(n, stop))
                    n += 1
        finally:
            for client in [*groups, plain]:
                await client.aclose()

    def _client(self, *, coalesce: bool) -> KvClient:
        attempt_s = ATTEMPT_TIMEOUT_S if coalesce else PATIENT_ATTEMPT_S
        return KvClient(
            self.urls,
            timeout_s=CALL_TIMEOUT_S,
            attempt_timeout_s=attempt_s,
            pause_s=0.05,
            coalesce_writes=coalesce,
            client_id=f"verify-{self._ids.getrandbits(64):016x}",
            connector=self.connector,
        )

    async def _roam(self, n: int, stop: asyncio.Event) -> None:
        rng = random.Random(self.seed * 1_000 + n)
        name = f"kv-{n}"
        while not stop.is_set():
            key = f"k{rng.randrange(KEYS)}"
            self.history.add(name, "invoke", "get", value=json.dumps(["get", key]))
            try:  # a client of its own: one that followed a redirect goes to the leader first
                async with KvClient(
                    [rng.choice(self.urls)],
                    timeout_s=ROAM_TIMEOUT_S,
                    attempt_timeout_s=ROAM_TIMEOUT_S,
                    pause_s=0.05,
                    client_id=f"{name}-{rng.getrandbits(64):016x}",
                    connector=self.connector,
                ) as one:
                    item = await one.get(key)
            except StateMachineError as exc:
                self.history.add(name, "info", "get", error=_why(exc))
                continue
            self.history.add(name, "ok", "get", value=json.dumps([item.value, item.version]))
            if self.pause_s:
                await _pause(stop, self.pause_s)

    async def _calls(self, kv: KvClient, n: int, stop: asyncio.Event) -> None:
        rng = random.Random(self.seed * 1_000 + n)
        name, seq = f"kv-{n}", 0
        seen: dict[str, int] = {}  # key -> the version this client saw last
        while not stop.is_set():
            key = f"k{rng.randrange(KEYS)}"
            kind = rng.choices(("get", "put", "cas", "delete"), (40, 30, 22, 8))[0]
            value = f"{n}-{seq}"
            seq += 1
            expected = seen.get(key, 0) if rng.random() < 0.8 else rng.randrange(4)
            inps: dict[str, list[Any]] = {
                "get": ["get", key],
                "put": ["put", key, value],
                "delete": ["delete", key],
                "cas": ["cas", key, expected, value],
            }
            inp = inps[kind]
            self.history.add(name, "invoke", kind, value=json.dumps(inp))
            try:
                if kind == "get":
                    item = await kv.get(key)
                    out: Any = [item.value, item.version]
                    seen[key] = item.version
                elif kind == "put":
                    out = seen[key] = await kv.put(key, value)
                elif kind == "delete":
                    out = await kv.delete(key)
                    seen[key] = 0
                else:
                    applied, version = await kv.cas(key, expected, value)
                    out, seen[key] = [applied, version], version
            except StateMachineError as exc:
                self.history.add(name, "info", kind, error=_why(exc))
                continue
            self.history.add(name, "ok", kind, value=json.dumps(out))
            if self.pause_s:
                await _pause(stop, self.pause_s)


class KvWorkload:
    """The workload of one run (module doc): :meth:`start_members` (blocking), :meth:`run`
    until ``stop`` is set, :meth:`finish`, :meth:`stop_members`. With ``network`` (which has
    namespaces for :data:`MEMBERS` members), each member runs in its own namespace."""

    def __init__(
        self, uri: str, history: History, seed: int, out_dir: Path, network: Network | None = None
    ) -> None:
        self.uri = uri
        self.history = history
        self.seed = seed
        self.network = network
        lease_ms = 0 if seed % 2 else READ_LEASE_MS
        self.members = [
            KvMember(uri, out_dir / f"member-{i}.log", i, lease_ms, network) for i in range(MEMBERS)
        ]
        self.created: list[int] = []  # the log's ledgers (the corrupt nemesis picks from them)
        self.urls = [m.url for m in self.members]
        self.clients = KvClients(self.urls, history, seed)

    def start_members(self) -> None:
        for member in self.members:
            member.start()

    def stop_members(self) -> None:
        for member in self.members:
            member.stop()

    async def run(self, stop: asyncio.Event) -> None:
        async with asyncio.TaskGroup() as tasks:
            tasks.create_task(self.clients.run(stop))
            tasks.create_task(self._refresh_ledgers(stop))

    async def _refresh_ledgers(self, stop: asyncio.Event) -> None:
        async with await start_client(self.uri) as bk:
            named = NamedLogs(bk, LogConfig()).log(log_name(STORE))
            while not stop.is_set():
                with contextlib.suppress(BKeeperError):
                    ids = [x.ledger_id for x in (await named.metadata()).ledgers]
                    self.created[:] = ids
                await _pause(stop, LEDGERS_REFRESH_S)

    async def finish(self, verdict: Verdict) -> list[int]:
        """The end of a run (module doc): violations into ``verdict``; the log's ledgers."""
        for member in self.members:
            if not member.running:
                verdict.violate(f"kv member {member.index} is not running at the end")
        async with KvClient(self.urls, timeout_s=START_TIMEOUT_S) as kv:
            truth: dict[str, tuple[str | None, int]] = {}
            try:
                for n in range(KEYS):
                    key = f"k{n}"
                    self.history.add("final", "invoke", "get", value=json.dumps(["get", key]))
                    item = await kv.get(key)
                    self.history.add(
                        "final", "ok", "get", value=json.dumps([item.value, item.version])
                    )
                    if item.value is not None:
                        truth[key] = (item.value, item.version)
            except StateMachineError as exc:
                verdict.violate(f"the store did not answer a linearizable read at the end: {exc}")
                return []
            live = [m for m in self.members if m.running]  # the others: violations above
            seen = await asyncio.gather(*(_converged(m, truth) for m in live))
            where = await _standing(live) if any(state != truth for state in seen) else ""
            for member, state in zip(live, seen, strict=True):
                if state != truth:
                    verdict.violate(
                        f"kv member {member.index} did not converge to the leader's state "
                        f"within {CONVERGE_TIMEOUT_S:g} s ({where}): {state} != {truth}"
                    )
                    # where it waits, into its log (bkeeper.common.loop)
                    with contextlib.suppress(BKeeperError):
                        member.signal(TASK_DUMP_SIGNAL)
            if any(state != truth for state in seen):
                await asyncio.sleep(1.0)  # the dumps are written before the members stop
        for member in self.members:
            stalls = member_log_lines(member.out)
            if stalls:
                verdict.violate(
                    f"kv member {member.index}: its reader returned nothing while the log held "
                    f"more, {len(stalls)} time(s), and was replaced (member-{member.index}.log"
                    f" says where it waited): {stalls[0][:400]}"
                )
            gone = member_log_lines(member.out, LISTED_BUT_GONE)
            if gone:
                verdict.violate(
                    f"kv member {member.index}: its reader met a ledger the log lists but that "
                    f"is gone, {len(gone)} time(s): {gone[0][:400]}"
                )
        async with await start_client(self.uri) as bk:
            named = NamedLogs(bk, LogConfig()).log(log_name(STORE))
            return [x.ledger_id for x in (await named.metadata()).ledgers]


async def _converged(
    member: KvMember, truth: dict[str, tuple[str | None, int]]
) -> dict[str, tuple[str | None, int]] | None:
    """The member's whole store (a stale read) once it equals ``truth``, or the last one
    read when ``CONVERGE_TIMEOUT_S`` ran out (None: it never answered)."""
    deadline = time.monotonic() + CONVERGE_TIMEOUT_S
    seen: dict[str, tuple[str | None, int]] | None = None
    while seen != truth and time.monotonic() < deadline:
        if seen is not None:
            await asyncio.sleep(0.2)
        with contextlib.suppress(StateMachineError):
            async with KvClient([member.url], timeout_s=5) as one:
                items = await one.range("", stale=True)
            seen = {i.key: (i.value, i.version) for i in items}
    return seen


#: What each partition of a member cuts it off from (its log line).
_CUT_FROM = {
    "leader-partition": "every other process",
    "leader-partition-zk": "ZooKeeper",
    "leader-partition-bookies": "the bookies",
}


class KvNemesis:
    """The cluster's nemesis plus the members' faults (:data:`KV_NEMESES`)."""

    def __init__(self, base: Nemesis, workload: KvWorkload) -> None:
        self.base = base
        self.workload = workload
        self._victims: dict[Fault, KvMember] = {}

    async def inject(self, fault: Fault) -> str:
        if fault.kind not in KV_NEMESES:
            return await self.base.inject(fault)
        member = await leading_member(self.workload.members)
        role = "leading"
        if member is None:  # an election under way: a member chosen by the schedule's time
            live = [m for m in self.workload.members if m.running]
            if not live:
                raise BKeeperError("no kv member is running")
            member, role = live[int(fault.at_s * 1000) % len(live)], "none leading"
        self._victims[fault] = member
        if fault.kind == "leader-kill":
            await asyncio.to_thread(member.kill)
            return f"kv member {member.index} ({role}) killed"
        if fault.kind in MEMBER_PARTITIONS:
            await asyncio.to_thread(self._partition, fault.kind, member, True)
            return f"kv member {member.index} ({role}) cut off from {_CUT_FROM[fault.kind]}"
        member.signal(signal.SIGSTOP)
        return f"kv member {member.index} ({role}) stopped (SIGSTOP)"

    async def heal(self, fault: Fault) -> str:
        if fault.kind not in KV_NEMESES:
            return await self.base.heal(fault)
        member = self._victims.pop(fault)
        if fault.kind == "leader-kill":
            await asyncio.to_thread(member.start)
            return f"kv member {member.index} started again"
        if fault.kind in MEMBER_PARTITIONS:
            await asyncio.to_thread(self._partition, fault.kind, member, False)
            return f"kv member {member.index} joined to {_CUT_FROM[fault.kind]} again"
        member.signal(signal.SIGCONT)
        return f"kv member {member.index} continued (SIGCONT)"

    def _partition(self, kind: str, member: KvMember, cut: bool) -> None:
        """Cut ``member`` off (``cut``) or join it again, as ``kind`` says (blocking)."""
        network = self.workload.network
        if network is None:
            raise BKeeperError("the kv members are not in network namespaces: no partition")
        host = network.member_host(member.index)
        if kind == "leader-partition":
            (network.isolate if cut else network.heal)(host)
            return
        peers = ["zookeeper"]
        if kind == "leader-partition-bookies":
            peers = [f"bookie-{j}" for j in range(network.bookies)]
        for peer in peers:
            (network.cut if cut else network.uncut)(host, peer)
