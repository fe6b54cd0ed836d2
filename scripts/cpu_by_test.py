"""Where a test run's CPU goes: every process's CPU, by kind and by the test that started it.

    python scripts/cpu_by_test.py sample OUT.json SECONDS &   # beside a run (e.g. .ci/run)
    python scripts/cpu_by_test.py report OUT.json [N]         # afterwards

``sample`` reads ``/proc/PID/stat`` of every process every 0.4 s for SECONDS, and once per
process its command line, its name and ``PYTEST_CURRENT_TEST`` from its environment (set by
pytest while a test runs, so inherited by every process a test starts). Processes that live
less than 0.4 s are missed, and a process's last 0.4 s may be: the figures are a lower
bound; one already running when sampling starts counts all its CPU since its start.
``report`` prints CPU seconds by kind of process, then by test file (the N largest).
A session-scoped process (a Spark JVM, a ZooKeeper) counts for the test that started it.
docs/benchmarks.md ("Bookie fork server") has one run's figures.
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys
import time
from pathlib import Path

Row = list  # [cpu seconds, command line, name, test id]


def sample(out: Path, seconds: float) -> None:
    hz = os.sysconf("SC_CLK_TCK")
    seen: dict[str, Row] = {}
    me = str(os.getpid())
    end = time.monotonic() + seconds
    rounds = 0
    while time.monotonic() < end:
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == me:
                continue
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue  # gone meanwhile
            fields = stat[stat.rindex(")") + 2 :].split()
            key = f"{pid}:{fields[19]}"  # the start time tells a reused pid apart
            cpu = (int(fields[11]) + int(fields[12])) / hz
            if key in seen:
                seen[key][0] = cpu
                continue
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
                name = Path(f"/proc/{pid}/comm").read_text().strip()
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            test = next(
                (e[20:].decode(errors="replace") for e in env
                 if e.startswith(b"PYTEST_CURRENT_TEST=")),
                "",
            )  # fmt: skip
            seen[key] = [cpu, cmd.decode(errors="replace")[:300], name, test]
        time.sleep(0.4)
        rounds += 1
        if rounds % 10 == 0:
            out.write_text(json.dumps(seen))
    out.write_text(json.dumps(seen))


def kind(cmd: str, name: str) -> str:
    if "forkserver.py" in cmd:
        return f"{name} (forked)" if name.startswith("bkeeper") else "fork server"
    first = cmd.split(" ", maxsplit=1)[0]
    if first.endswith("java") or "spark-class" in cmd:
        if "ZooKeeperServerMain" in cmd or "QuorumPeerMain" in cmd:
            return "java: zookeeper"
        if "spark" in cmd.lower():
            return "java: spark"
        return "java: other"
    if "pyspark.daemon" in cmd or "pyspark.sql" in cmd:
        return "pyspark python"
    if "import sys;exec" in cmd:
        return "pytest worker"
    found = re.search(r"-m bkeeper (\S+)|bin/bkeeper (\S+)", cmd)
    if found:
        return "bkeeper " + (found.group(1) or found.group(2))
    return name


def report(path: Path, top: int) -> None:
    rows: dict[str, Row] = json.loads(path.read_text())
    kinds: collections.Counter[str] = collections.Counter()
    counts: collections.Counter[str] = collections.Counter()
    files: collections.Counter[str] = collections.Counter()
    for cpu, cmd, name, test in rows.values():
        what = kind(cmd, name)
        kinds[what] += cpu
        counts[what] += 1
        files[test.split("::")[0] or "(no test)"] += cpu
    print(f"{sum(kinds.values()):.0f} CPU-s seen\n\n  CPU-s  procs  kind")
    for what, cpu in kinds.most_common(25):
        print(f"{cpu:7.1f} {counts[what]:6d}  {what}")
    print("\n  CPU-s  test file (processes it started)")
    for file, cpu in files.most_common(top):
        print(f"{cpu:7.1f}  {file}")


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "sample":
        sample(Path(sys.argv[2]), float(sys.argv[3]))
    elif len(sys.argv) >= 3 and sys.argv[1] == "report":
        report(Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 30)
    else:
        sys.exit(__doc__)
