"""A run with a violation keeps its cluster's logs: each process's log copied out of the
temporary directory, only its end when it is long."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bkeeper.common.errors import MetadataError
from bkeeper.testing.sandbox import SandboxConfig
from bkeeper.verify import run
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


class _SandboxThatFails:
    """Starts as far as writing its processes' logs, then fails as a ZooKeeper error does."""

    def __init__(self, config: SandboxConfig) -> None:
        self.data_dir = config.data_dir

    def start(self) -> None:
        (self.data_dir / "bookie-0.log").write_text("bookie-0 was here\n")
        raise MetadataError("ZooKeeper: no node /ledgers/available (NoNodeError)")

    def stop(self) -> None:
        pass


def test_a_run_the_harness_could_not_finish_keeps_its_logs_and_a_summary_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run, "Sandbox", _SandboxThatFails)
    config = run.VerifyConfig(nemeses=(), duration_s=1.0, out_dir=tmp_path / "out")
    with pytest.raises(MetadataError, match="NoNodeError"):
        run.run_once(config, 20246)
    logs = tmp_path / "out" / "seed-20246" / "logs"
    assert (logs / "bookie-0.log").read_text() == "bookie-0 was here\n"
    lines = (tmp_path / "out" / run.SUMMARY_NAME).read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"seed": 20246, "harness_error": "ZooKeeper: no node /ledgers/available (NoNodeError)"}
    ]
