"""The harness's side of a client process: each JSON line it writes becomes an operation of
the run's history under the child's name; a line that is not one is an error naming it."""

from __future__ import annotations

import io
import json

import pytest

from bkeeper.common.errors import BKeeperError
from bkeeper.verify.client_process import ClientProcess, StreamHistory
from bkeeper.verify.history import History


def test_what_the_child_writes_is_what_the_harness_records() -> None:
    out = io.StringIO()
    child = StreamHistory(out)
    child.add("writer-0", "invoke", "create", ledger=7)
    child.add("writer-0", "ok", "create", ledger=7)
    child.add("writer-0", "invoke", "append", ledger=7, entry=0, value="ab12")
    child.add("writer-1", "invoke", "create", ledger=8)  # killed before its answer
    history, created, sent = History(), [], []
    parent = ClientProcess(
        "zk://x/ledgers",
        1,
        "client-3",
        history,
        "/dev/null",
        on_created=created.append,
        on_create_sent=sent.append,
    )
    for line in out.getvalue().splitlines():
        parent.record_line(line.encode())
    got = [(op.process, op.type, op.f, op.ledger, op.entry, op.value) for op in history]
    assert got == [
        ("client-3/writer-0", "invoke", "create", 7, -1, ""),
        ("client-3/writer-0", "ok", "create", 7, -1, ""),
        ("client-3/writer-0", "invoke", "append", 7, 0, "ab12"),
        ("client-3/writer-1", "invoke", "create", 8, -1, ""),
    ]
    assert created == [7]
    assert sent == [7, 8]  # the run deletes both: 8 may exist though nobody heard of it
    assert len(child) == 0  # the child keeps nothing


@pytest.mark.parametrize(
    "line",
    [
        b"not json",
        json.dumps(
            {
                "process": "w",
                "type": "maybe",
                "f": "append",
                "ledger": 1,
                "entry": 2,
                "value": "",
                "error": "",
            }
        ).encode(),
        json.dumps({"process": "w", "type": "ok", "f": "append"}).encode(),
    ],
)
def test_a_line_that_is_not_an_operation_is_named(line: bytes) -> None:
    parent = ClientProcess(
        "zk://x/ledgers", 1, "client-0", History(), "/dev/null", on_created=print
    )
    with pytest.raises(BKeeperError, match="client process client-0 wrote a line that is not"):
        parent.record_line(line)
