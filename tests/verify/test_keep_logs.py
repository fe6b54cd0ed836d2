"""A run with a violation keeps its cluster's logs: each process's log copied out of the
temporary directory, only its end when it is long."""

from __future__ import annotations

from pathlib import Path

from bkeeper.verify.run import keep_logs


def test_the_logs_are_copied_and_a_long_one_cut_to_its_end(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster"
    (cluster / "zookeeper").mkdir(parents=True)
    (cluster / "bookie-0").mkdir()
    (cluster / "bookie-0.log").write_bytes(b"short\n")
    (cluster / "autorecovery-0.log").write_bytes(b"0123456789abcdef")
    (cluster / "zookeeper" / "zookeeper.log").write_bytes(b"zk\n")
    (cluster / "bookie-0" / "not-a-log").write_bytes(b"data")
    keep_logs(cluster, tmp_path / "out" / "logs", bytes_max=10)
    kept = {p.name: p.read_bytes() for p in (tmp_path / "out" / "logs").iterdir()}
    assert kept == {
        "bookie-0.log": b"short\n",
        "autorecovery-0.log": b"6789abcdef",
        "zookeeper.log": b"zk\n",
    }
