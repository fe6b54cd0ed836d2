"""The blocking client (``bkeeper.sync``) against real bookie processes (issue 20, item 4).

Every call of the asyncio handles has its blocking twin; the facade only bridges threads. A
writer that sits stopped past its ZooKeeper session timeout goes on writing, changing its
ensemble and closing; a call that outlives ``call_timeout_s`` raises ``CallTimeoutError``
and leaves the client usable.
"""

from __future__ import annotations

import concurrent.futures
import json
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import CallTimeoutError, NoSuchEntryError
from bkeeper.meta.ledger_metadata import LedgerState
from bkeeper.sync import BookKeeper
from tests.client.idle_writer import SESSION_TIMEOUT_MS

ANSWER_TIMEOUT_S = 60.0


def _answer(proc: subprocess.Popen[str], log: Path) -> dict[str, Any]:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], ANSWER_TIMEOUT_S)
    line = proc.stdout.readline() if ready else ""
    assert line, f"the writer said nothing (exit {proc.poll()}): {log.read_text()}"
    answer: dict[str, Any] = json.loads(line)
    return answer


def _wait_for(condition: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout_s} s"
        time.sleep(0.05)


@pytest.mark.parametrize("real_cluster", [4], indirect=True)
def test_a_writer_stopped_past_its_session_timeout_goes_on(real_cluster, tmp_path: Path) -> None:
    """Its own cluster: it kills a bookie."""
    log = tmp_path / "writer.log"
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name("idle_writer.py")), real_cluster.uri],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        before = _answer(proc, log)
        assert before["ids"] == [0, 1, 2, 3]
        proc.send_signal(signal.SIGSTOP)
        # While the writer is stopped a bookie of its ensemble dies: the first append after
        # waking needs an ensemble change, a metadata write, right as the session is found
        # expired.
        dead = real_cluster.index_of(before["ensemble"][0])
        real_cluster.signal(dead, signal.SIGKILL)
        time.sleep(3 * SESSION_TIMEOUT_MS / 1000)  # the scenario: stopped past the timeout
        proc.send_signal(signal.SIGCONT)
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        after = _answer(proc, log)
        assert proc.wait(ANSWER_TIMEOUT_S) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()
    assert after["session"] != before["session"], "the session should have expired"
    assert after["ids"] == [4, 5]
    spare = ({real_cluster.bookie_id(i) for i in range(4)} - set(before["ensemble"])).pop()
    assert after["ensemble"] == [spare, *before["ensemble"][1:]]
    assert after["closed_at"] == 5
    assert after["read"] == ["before-0", "before-1", "before-2", "before-3", "after-0", "after-1"]
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize("real_cluster", [4], indirect=True)
def test_every_call_and_the_call_timeout(real_cluster) -> None:
    """Its own cluster: it stops two bookies. Four: E3 with a spare (issue 41)."""
    uri = real_cluster.uri
    # No ensemble change while bookies are stopped below: only the call timeout can end
    # the append.
    config = ClientConfig(add_timeout_ms=120_000, explicit_lac_interval_ms=50)
    with (
        BookKeeper(uri, config, call_timeout_s=2) as writer,
        BookKeeper(uri, call_timeout_s=60) as reader,
    ):
        wh = writer.create_ledger(3, 3, 2, digest="crc32c", password=b"pw")
        assert wh.append(b"e0") == 0
        future = wh.append_async(b"e1")
        assert isinstance(future, concurrent.futures.Future)
        assert future.result(60) == 1
        assert wh.append_many([b"e2", b"e3"]) == [2, 3]
        assert wh.force() == 3
        assert (wh.last_add_confirmed, wh.length, wh.pending_adds) == (3, 8, 0)
        assert wh.metadata.state is LedgerState.OPEN
        assert len(wh.ensemble) == 3

        rh = reader.open_ledger(wh.ledger_id, b"pw", recovery=False)
        assert not rh.is_closed and rh.last_add_confirmed == -1
        # Entry 3 carries LAC 1: append_many sent it along with entry 2, before any ack.
        assert rh.read_last_add_confirmed() == 1
        _wait_for(lambda: rh.read_explicit_last_add_confirmed() == 3, "explicit LAC 3")
        assert [e.data for e in rh.read()] == [b"e0", b"e1", b"e2", b"e3"]
        assert rh.read_entry(2).data == b"e2"
        assert rh.wait_last_add_confirmed(3, timeout_ms=200) == 3  # nothing new: times out
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            polled = pool.submit(rh.wait_last_add_confirmed, 3, 30_000)
            assert wh.append(b"e4") == 4
            assert polled.result(60) == 4
        assert wh.append(b"e5") == 5
        with pytest.raises(NoSuchEntryError, match="beyond the LAC 4"):
            list(rh.read(0, 5))
        assert [e.data for e in rh.read_unconfirmed(5, 5)] == [b"e5"]

        stopped = [real_cluster.index_of(b) for b in wh.ensemble[:2]]
        for index in stopped:
            real_cluster.signal(index, signal.SIGSTOP)
        try:
            with pytest.raises(CallTimeoutError) as raised:
                wh.append(b"e6")
        finally:
            for index in stopped:
                real_cluster.signal(index, signal.SIGCONT)
        assert str(raised.value) == (
            "WriteHandle.append did not finish within 2 s (call_timeout_s); it was cancelled "
            "and its outcome is unknown"
        )
        assert isinstance(raised.value, TimeoutError) and raised.value.retriable
        # The client is whole: the add went on and the next one follows it.
        assert wh.append(b"e7") == 7
        wh.close()
        assert wh.metadata.state is LedgerState.CLOSED
        assert wh.metadata.last_entry_id == 7

        rh = reader.open_ledger(wh.ledger_id, b"pw")
        assert rh.is_closed and rh.last_add_confirmed == 7 and rh.length == 16
        assert [e.data for e in rh.read()] == [b"e%d" % i for i in range(8)]
        rh.close()


def test_append_many_past_the_pipeline_window(shared_cluster) -> None:
    """More records than ``pending_adds_max``: sent as batches of at most that many, ids in
    order."""
    with BookKeeper(shared_cluster.uri, ClientConfig(pending_adds_max=4)) as bk:
        wh = bk.create_ledger(3, 3, 2, password=b"pw")
        records = [b"r%d" % i for i in range(10)]
        assert wh.append_many(records) == list(range(10))
        assert wh.append_many([b"r10"]) == [10]
        wh.close()
        rh = bk.open_ledger(wh.ledger_id, b"pw")
        assert [e.data for e in rh.read()] == [*records, b"r10"]
