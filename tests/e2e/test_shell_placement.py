"""Racks from the operator's side, on real bookie processes and a real ZooKeeper: a bookie's
own ``-o network_location``, ``setrack``/``racks``/``deleterack``, ``listbookies``' location
column, and ``relocateledgers`` fixing a planted violation (dry run first); bad input is one
``error:`` line."""

from __future__ import annotations

import asyncio

import pytest

from bkeeper.client import BookKeeper, ClientConfig
from tests.e2e.test_shell_ops import as_json, cli, fails, ok

PASSWORD = b"racks"
ENTRIES = 40


@pytest.mark.parametrize(
    "real_cluster", [(2, ("-o", "network_location=/eu/rack-1"))], indirect=True
)
def test_bookies_publish_their_own_location(real_cluster) -> None:
    uri = real_cluster.uri
    ids = sorted(real_cluster.bookie_id(i) for i in range(2))
    rows = as_json(cli(uri, "shell", "racks", "--json"))
    assert [(r["bookie_id"], r["location"], r["mode"]) for r in rows] == [
        (b, "/eu/rack-1", "writable") for b in ids
    ]
    assert [r["location"] for r in as_json(cli(uri, "shell", "listbookies", "--json"))] == [
        "/eu/rack-1"
    ] * 2


async def write_planted(uri: str, ensemble: list[str]) -> int:
    async with BookKeeper(uri, ClientConfig(placement="random")) as bk:
        wh = await bk.create_ledger(2, 2, 2, password=PASSWORD, bookies=ensemble)
        for e in range(ENTRIES):
            await wh.append(b"entry-%d" % e)
        await wh.close()
        return wh.ledger_id


async def read_all(uri: str, ledger_id: int) -> tuple[list[bytes], list[str]]:
    async with BookKeeper(uri) as bk:
        meta = await bk.ledger_metadata(ledger_id)
        rh = await bk.open_ledger(ledger_id, PASSWORD, recovery=False)
        got = [bytes(e.payload) async for e in rh.read(0, ENTRIES - 1)]
        return got, [str(b) for b in meta.segments[0]]


@pytest.mark.parametrize("real_cluster", [4], indirect=True)
def test_setrack_then_relocateledgers_fixes_a_planted_violation(real_cluster) -> None:
    uri = real_cluster.uri
    b = [real_cluster.bookie_id(i) for i in range(4)]
    racks = {b[0]: "/r1", b[1]: "/r1", b[2]: "/r2", b[3]: "/r3"}
    for bookie, rack in racks.items():
        assert ok(cli(uri, "shell", "setrack", bookie, rack)).strip() == f"{bookie}: {rack}"
    assert "(unchanged)" in ok(cli(uri, "shell", "setrack", b[0], "/r1"))
    listed = {r["bookie_id"]: r["location"] for r in as_json(cli(uri, "shell", "racks", "--json"))}
    assert listed == racks
    # bad input: one line each
    assert "expected /rack or /region/rack" in fails(cli(uri, "shell", "setrack", b[0], "r1"), 2)
    assert "has no location set" in fails(cli(uri, "shell", "deleterack", "nobody:1"))
    assert "no ledger 999999" in fails(
        cli(uri, "shell", "relocateledgers", "--ledger-ids", "999999")
    )
    assert "comma-separated list" in fails(
        cli(uri, "shell", "relocateledgers", "--ledger-ids", "x"), 2
    )

    ledger_id = asyncio.run(write_planted(uri, [b[0], b[1]]))  # both on /r1
    plan = as_json(cli(uri, "shell", "relocateledgers", "--dry-run", "--json"))
    planned = [r for r in plan if r["ledger_id"] == ledger_id]
    assert [(r["state"], r["violating"]) for r in planned] == [("planned", [0])]
    ((moved_from, moved_to),) = planned[0]["moves"]["0"].items()
    assert moved_from in (b[0], b[1]) and moved_to in (b[2], b[3])
    assert asyncio.run(read_all(uri, ledger_id))[1] == [b[0], b[1]]  # a dry run changes nothing

    table = ok(cli(uri, "shell", "relocateledgers", "--ledger-ids", str(ledger_id)))
    assert "moved" in table
    got, ensemble = asyncio.run(read_all(uri, ledger_id))
    assert got == [b"entry-%d" % e for e in range(ENTRIES)]
    assert len({racks[x] for x in ensemble}) == 2
    again = as_json(cli(uri, "shell", "relocateledgers", "--json"))
    assert {r["state"] for r in again} == {"adheres"}
    assert ok(cli(uri, "shell", "deleterack", b[3])).strip() == f"{b[3]}: location removed"

    # the same ledger, E2/Qw2 -> E3/Qw3 online
    plan = as_json(cli(uri, "shell", "setreplication", str(ledger_id), "-e", "3", "-w", "3",
                       "-a", "2", "--dry-run", "--json"))  # fmt: skip
    assert (plan["state"], plan["entries"]) == ("planned", ENTRIES)
    line = ok(cli(uri, "shell", "setreplication", str(ledger_id), "-e", "3", "-w", "3", "-a", "2"))
    assert line.startswith(
        f"ledger {ledger_id}: 2/2/2 -> 3/3/2 (changed; {ENTRIES} entries copied)"
    )
    got, ensemble = asyncio.run(read_all(uri, ledger_id))
    assert got == [b"entry-%d" % e for e in range(ENTRIES)] and len(set(ensemble)) == 3
    assert "needs 2 more bookies" in fails(
        cli(uri, "shell", "setreplication", str(ledger_id), "-e", "5", "-w", "3", "-a", "2")
    )
    assert "no ledger 999999" in fails(
        cli(uri, "shell", "setreplication", "999999", "-e", "3", "-w", "3", "-a", "2")
    )
