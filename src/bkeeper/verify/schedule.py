"""The faults of one run, derived from its seed alone (pure: the same seed, the same faults).

A schedule is a sequence of faults that do not overlap: each starts ``gap`` seconds after the
previous one healed (``gap`` drawn in ``GAP_S``), holds for a time drawn from its kind's range
and is then healed, so that at most one fault is active at once and a run ends healthy. Each
fault picks a kind among the nemeses asked for and a target among the bookies (none for
``zk``, ``zk-pause``, ``client-kill`` and the kv workload's). Holds are chosen to cross the
interesting thresholds: a pause longer than the ZooKeeper session timeout sometimes (of a
bookie, or of ZooKeeper itself: sessions then expire together when it continues), a kill
long enough for the auditor to see it go. A ``slow-disk`` fault also draws how long each of
the bookie's fsyncs is held up.

The kv workload adds faults of the store's members (:data:`KV_NEMESES`, no target: the
member leading when the fault starts): ``leader-kill`` (kill -9, restarted at heal),
``leader-pause`` (SIGSTOP, past the members' session timeout sometimes; SIGCONT at heal) and
the partitions of a running leader (:data:`MEMBER_PARTITIONS`, the members in network
namespaces): ``leader-partition`` (cut from every other process), ``leader-partition-zk``
(from ZooKeeper only: it goes on serving clients and writing to the bookies while its
session expires and another member takes over) and ``leader-partition-bookies`` (from the
bookies only: it keeps its session and leadership but can write nothing).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from bkeeper.common.errors import ConfigError

__all__ = [
    "CLUSTER_NEMESES",
    "EXTERNAL_NEMESES",
    "GAP_S",
    "HOLD_S",
    "KV_NEMESES",
    "MEMBER_PARTITIONS",
    "NEMESES",
    "PARTITIONS",
    "SLOW_SYNC_MS",
    "Fault",
    "make_schedule",
    "nemeses_of",
    "parse_nemeses",
]

#: Every nemesis of the cluster, by name.
NEMESES = (
    "kill",
    "pause",
    "partition",
    "partition-zk",
    "partition-clients",
    "disk-full",
    "corrupt",
    "corrupt-entry-log",
    "slow-disk",
    "zk",
    "zk-pause",
    "client-kill",
)
#: The partitions of the kv workload's leading member (its members in network namespaces).
MEMBER_PARTITIONS = frozenset(
    {"leader-partition", "leader-partition-zk", "leader-partition-bookies"}
)
#: The nemeses of the kv workload's members (only with ``--workload kv``).
KV_NEMESES = (
    "leader-kill",
    "leader-pause",
    "leader-partition",
    "leader-partition-zk",
    "leader-partition-bookies",
)
#: The nemeses that are not aimed at a bookie.
CLUSTER_NEMESES = frozenset({"zk", "zk-pause", "client-kill", *KV_NEMESES})
#: The nemeses that work only on verify's own processes, none of the cluster's: what a run
#: against a cluster given with ``--metadata`` can have.
EXTERNAL_NEMESES = ("client-kill",)
#: The nemeses that need the bookies in network namespaces (:mod:`bkeeper.verify.netns`).
PARTITIONS = frozenset({"partition", "partition-zk", "partition-clients"})

#: Seconds each kind of fault lasts (low, high), drawn uniformly.
HOLD_S: dict[str, tuple[float, float]] = {
    "kill": (0.5, 4.0),  # down, then restarted with its data
    "pause": (1.0, 14.0),  # SIGSTOP..SIGCONT: past the ZooKeeper session timeout (10 s) sometimes
    "partition": (1.0, 8.0),  # the bookie's port unreachable both ways
    "partition-zk": (2.0, 16.0),  # the bookie cut from ZooKeeper only: its session may expire
    "partition-clients": (1.0, 8.0),  # the bookie cut from the clients only
    "disk-full": (2.0, 6.0),  # its ledger/journal filesystem full
    "corrupt": (0.5, 2.0),  # stopped while bits of its journal are flipped, then restarted
    "corrupt-entry-log": (0.5, 2.0),  # likewise, bits of its entry logs
    "slow-disk": (2.0, 10.0),  # each fsync of the bookie held up (SLOW_SYNC_MS)
    "zk": (0.5, 4.0),  # ZooKeeper killed -9, then restarted
    "zk-pause": (2.0, 16.0),  # ZooKeeper stopped: past the session timeout, a storm of expiries
    "client-kill": (0.5, 4.0),  # a client process killed -9 mid-write, then a new one started
    "leader-kill": (0.5, 4.0),  # the leading kv member killed -9, then restarted
    # SIGSTOP..SIGCONT: past the members' session timeout (4 s) and the fail-over after it
    # (5 to 7 s) often, so that a new leader takes writes while the old one is stopped
    "leader-pause": (0.5, 12.0),
    # the leader cut off while it runs: past the session timeout (4 s) and the fail-over often
    "leader-partition": (1.0, 12.0),  # from everyone
    "leader-partition-zk": (2.0, 12.0),  # from ZooKeeper only: it serves on, deposed meanwhile
    "leader-partition-bookies": (1.0, 10.0),  # from the bookies only: it leads, writes nothing
}

#: Milliseconds each fsync of a ``slow-disk`` bookie waits (low, high), drawn uniformly.
SLOW_SYNC_MS = (20, 500)

#: Seconds between a fault's heal and the next fault (low, high).
GAP_S = (0.5, 3.0)


@dataclass(frozen=True)
class Fault:
    """``kind`` starts ``at_s`` seconds into the run on bookie ``target`` (None: not a bookie
    fault) and is healed ``hold_s`` seconds later; ``sync_delay_ms``: how long each fsync
    waits (``slow-disk`` only, else 0)."""

    at_s: float
    kind: str
    target: int | None
    hold_s: float
    sync_delay_ms: int = 0

    @property
    def heal_s(self) -> float:
        return self.at_s + self.hold_s

    def describe(self) -> str:
        where = "" if self.target is None else f" bookie {self.target}"
        how = f" ({self.sync_delay_ms} ms per fsync)" if self.kind == "slow-disk" else ""
        return f"{self.at_s:7.2f}s {self.kind}{where}{how} for {self.hold_s:.2f}s"


def nemeses_of(workload: str) -> tuple[str, ...]:
    """The nemeses a workload can have ("all" means these)."""
    return NEMESES + KV_NEMESES if workload == "kv" else NEMESES


def parse_nemeses(
    text: str, workload: str = "ledger", *, external: bool = False
) -> tuple[str, ...]:
    """``kill,pause,...`` -> the names, checked ("all": every one ``workload`` can have;
    ``external``: on a cluster given with ``--metadata``, only :data:`EXTERNAL_NEMESES`);
    ``ConfigError`` naming an unknown one, a kv one for another workload, or one that needs
    the cluster's processes where they are not verify's."""
    known = nemeses_of(workload)
    allowed = tuple(n for n in known if n in EXTERNAL_NEMESES) if external else known
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return allowed
    if not names:
        raise ConfigError(f"nemesis: none given (choose from {', '.join(allowed)})")
    for name in names:
        if name in KV_NEMESES and workload != "kv":
            raise ConfigError(f"nemesis: {name!r} needs --workload kv")
        if name not in known:
            raise ConfigError(f"nemesis: {name!r} is not one of {', '.join(known)}, all")
        if name not in allowed:
            raise ConfigError(
                f"nemesis: {name!r} works on the cluster's own processes or disks, so it "
                f"needs a cluster of verify's own (no --metadata); on a cluster given with "
                f"--metadata: {', '.join(allowed) or 'none'}"
            )
    return tuple(dict.fromkeys(names))


def make_schedule(
    seed: int, nemeses: Sequence[str], duration_s: float, bookies: int
) -> tuple[Fault, ...]:
    """The faults of a run of ``duration_s`` seconds (the last one healed by then)."""
    if not nemeses:
        return ()
    rng = random.Random(seed)
    faults: list[Fault] = []
    now = rng.uniform(*GAP_S)
    while True:
        kind = rng.choice(list(nemeses))
        hold = round(rng.uniform(*HOLD_S[kind]), 3)
        target = None if kind in CLUSTER_NEMESES else rng.randrange(bookies)
        delay_ms = rng.randint(*SLOW_SYNC_MS) if kind == "slow-disk" else 0
        if now + hold > duration_s:
            return tuple(faults)
        faults.append(Fault(round(now, 3), kind, target, hold, delay_ms))
        now += hold + rng.uniform(*GAP_S)
