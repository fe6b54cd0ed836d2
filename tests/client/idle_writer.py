"""A writer process for test_sync_client.py: it writes with ``bkeeper.sync``, says ``ready``,
and goes on when told (the test stops it in between, past its ZooKeeper session timeout).

Usage: ``python idle_writer.py URI``. Prints one JSON object per step on stdout.
"""

from __future__ import annotations

import json
import sys

from bkeeper.client.config import ClientConfig
from bkeeper.sync import BookKeeper

#: The shortest session the tests' ZooKeeper grants (2 ticks of 500 ms).
SESSION_TIMEOUT_MS = 1_000


def session_id(bk: BookKeeper) -> int:
    return bk._bk.cluster.store.session_id  # type: ignore[no-any-return]


def main(uri: str) -> None:
    config = ClientConfig(metadata_session_timeout_ms=SESSION_TIMEOUT_MS)
    with BookKeeper(uri, config, call_timeout_s=60) as bk:
        wh = bk.create_ledger(3, 3, 3, password=b"pw")  # every add needs the whole ensemble
        ids = [wh.append(b"before-0"), wh.append_async(b"before-1").result(60)]
        ids += wh.append_many([b"before-2", b"before-3"])
        step = {"ledger": wh.ledger_id, "ids": ids, "ensemble": list(wh.ensemble)}
        print(json.dumps({**step, "session": session_id(bk)}), flush=True)
        sys.stdin.readline()  # the test stops this process here, then wakes it and writes
        ids = [wh.append(b"after-0"), wh.append_async(b"after-1").result(60)]
        ensemble = list(wh.ensemble)
        wh.close()
        rh = bk.open_ledger(wh.ledger_id, b"pw")
        step = {
            "ids": ids,
            "ensemble": ensemble,
            "closed_at": wh.metadata.last_entry_id,
            "read": [entry.data.decode() for entry in rh.read()],
            "session": session_id(bk),
        }
        print(json.dumps(step), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
