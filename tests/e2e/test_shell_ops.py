"""The operator's shell (docs/operations.md "Shell") against real bookie processes and a real
ZooKeeper: listbookies, bookieinfo, clusterinfo, whatisinstanceid, endpointinfo,
bookiesanity, initnewcluster, nukeexistingcluster, cookie_get / cookie_delete / updatecookie,
bookieformat, ledger ID and readledger --bookie; and each one's answer to bad input (one
``error:`` line, exit status 1, or 2 for a bad option).

The commands run in this process (tests/cli/runner.py); a few run as ``python -m bkeeper``
(a success, a failure, a usage error, a bookie that refuses to start) so that the real
process's start-up and exit statuses stay tested."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bkeeper.client import BookKeeper
from bkeeper.meta.bookie_info import BookieServiceInfo
from bkeeper.meta.cluster import ClusterMetadata
from tests.cli.runner import run_cli, run_cli_async
from tests.e2e.helpers import bkeeper

HTTP = (3, ("--http-port", "0"))


def cli(uri: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``bkeeper ARGS --metadata URI`` in this process."""
    return run_cli(*args, "--metadata", uri)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m bkeeper ARGS`` (no --metadata added)."""
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return result.stdout


def as_json(result: subprocess.CompletedProcess[str]) -> object:
    return json.loads(ok(result))


def fails(result: subprocess.CompletedProcess[str], code: int = 1) -> str:
    """The one ``error:`` line of a command that failed with ``code``."""
    lines = result.stderr.strip().splitlines()
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize("real_cluster", [HTTP], indirect=True)
def test_cluster_listings_sanity_and_cookies(real_cluster) -> None:
    uri = real_cluster.uri
    ids = sorted(real_cluster.bookie_id(i) for i in range(3))

    listing = as_json(bkeeper(uri, "shell", "listbookies", "--json"))  # a real process
    assert [row["bookie_id"] for row in listing] == ids
    assert {row["mode"] for row in listing} == {"writable"}
    assert [row["address"] for row in listing] == ids
    assert all(row["http"].startswith("http://127.0.0.1:") for row in listing)
    assert as_json(cli(uri, "shell", "listbookies", "--ro", "--json")) == []
    assert len(as_json(cli(uri, "shell", "listbookies", "--all", "--json"))) == 3
    table = ok(cli(uri, "shell", "listbookies", "--rw"))
    assert all(bookie in table for bookie in ids)
    both = bkeeper(uri, "shell", "listbookies", "--rw", "--ro")  # a real process
    assert both.returncode == 2 and "give at most one of --rw, --ro and --all" in both.stderr

    info = as_json(cli(uri, "shell", "bookieinfo", "--json"))
    assert [row["bookie_id"] for row in info] == ids
    for row in info:
        assert row["error"] is None
        assert 0 < row["free_bytes"] <= row["total_bytes"]

    instance_id = ok(cli(uri, "shell", "whatisinstanceid")).strip()
    uuid.UUID(instance_id)
    summary = as_json(cli(uri, "shell", "clusterinfo", "--json"))
    assert summary == {
        "auditorElected": False,
        "auditorId": "",
        "clusterUnderReplicated": False,
        "ledgerReplicationEnabled": True,
        "totalBookiesCount": 3,
        "writableBookiesCount": 3,
        "readonlyBookiesCount": 0,
        "unavailableBookiesCount": 0,
        "instanceId": instance_id,
        "writableBookies": ids,
        "readonlyBookies": [],
        "unavailableBookies": [],
        "underReplicatedLedgersCount": 0,
        "underReplicatedLedgersCountCapped": False,
        "lostBookieRecoveryDelaySeconds": None,
    }
    assert "none elected" in ok(cli(uri, "shell", "clusterinfo"))

    endpoints = as_json(cli(uri, "shell", "endpointinfo", "--bookie", ids[0], "--json"))
    rpc = next(e for e in endpoints["endpoints"] if e["protocol"] == "bookie-rpc")
    assert f"{rpc['host']}:{rpc['port']}" == ids[0]
    http = next(e for e in endpoints["endpoints"] if e["id"] == "httpserver")
    assert http["protocol"] == "http" and http["port"] > 0
    assert fails(bkeeper(uri, "shell", "endpointinfo", "--bookie", "nope:1")) == (  # real
        f"error: bookie nope:1 is not registered at {uri} "
        "(bkeeper shell listbookies --all shows those that are)"
    )

    sane = ok(cli(uri, "shell", "bookiesanity", "--bookie", ids[1], "--entries", "20"))
    assert sane.startswith(f"bookie {ids[1]} is sane: 20 entries written to ledger ")
    assert as_json(cli(uri, "shell", "listledgers", "--json")) == []  # it deleted it
    assert "is not registered" in fails(cli(uri, "shell", "bookiesanity", "--bookie", "x:1"))

    # A stopped bookie: unavailable (its cookie stays); its cookie can be read and deleted.
    stopped = real_cluster.bookie_id(2)
    assert real_cluster.stop(2) == 0
    summary = as_json(cli(uri, "shell", "clusterinfo", "--json"))
    assert (summary["writableBookiesCount"], summary["unavailableBookies"]) == (2, [stopped])
    assert len(as_json(cli(uri, "shell", "bookieinfo", "--json"))) == 2
    cookie = as_json(cli(uri, "shell", "cookie_get", stopped, "--json"))
    assert cookie["bookieId"] == stopped and cookie["instanceId"] == instance_id
    data_dir = os.path.abspath(real_cluster.data_dir / "bookie-2")
    assert cookie["ledgerDirs"] == [data_dir] and cookie["journalDirs"] == [data_dir]
    running = real_cluster.bookie_id(0)
    assert fails(cli(uri, "shell", "cookie_delete", running, "--force")) == (
        f"error: bookie {running} is registered (running): stop it before deleting its cookie"
    )
    assert ok(cli(uri, "shell", "cookie_delete", stopped, "--force")).strip() == (
        f"deleted the cookie of {stopped} from {uri}"
    )
    assert fails(cli(uri, "shell", "cookie_get", stopped)) == (
        f"error: bookie {stopped} has no cookie in the metadata store"
    )
    assert fails(cli(uri, "shell", "cookie_delete", stopped, "--force")) == (
        f"error: bookie {stopped} has no cookie in the metadata store"
    )
    summary = as_json(cli(uri, "shell", "clusterinfo", "--json"))
    assert (summary["totalBookiesCount"], summary["unavailableBookiesCount"]) == (2, 0)


@pytest.mark.parametrize("real_cluster", [1], indirect=True)
async def test_bookieinfo_names_the_bookies_that_do_not_answer(real_cluster) -> None:
    uri = real_cluster.uri
    with socket.socket() as silent, socket.socket() as closed:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # connections complete (the backlog) and are never answered
        closed.bind(("127.0.0.1", 0))  # bound but not listening: connections are refused
        async with await ClusterMetadata.open(uri) as cluster:
            registry = cluster.registry
            for_bookie = BookieServiceInfo.for_bookie
            async with (
                await registry.register("silent:1", for_bookie(*silent.getsockname())),
                await registry.register("gone:1", for_bookie(*closed.getsockname())),
            ):
                result = await run_cli_async(
                    "shell", "bookieinfo", "--json", "--timeout", "1", "--metadata", uri
                )
    rows = {row["bookie_id"]: row for row in json.loads(result.stdout)}
    assert rows["silent:1"]["error"] == "no answer in 1 s"
    assert rows["gone:1"]["error"].startswith("unreachable: ")
    assert rows[real_cluster.bookie_id(0)]["error"] is None
    assert fails(result) == "error: 2 of 3 bookies did not answer: gone:1, silent:1"


async def _ledger_on(uri: str, ensemble: int, quorum: int, entries: int) -> tuple[int, tuple]:
    async with BookKeeper(uri) as bk:
        handle = await bk.create_ledger(ensemble, quorum, quorum, password=b"pw")
        for i in range(entries):
            await handle.append(b"entry-%d" % i)
        await handle.close()
        return handle.ledger_id, handle.metadata.segments[0]


def _held_by(position: int, entries: int, ensemble: int, quorum: int) -> list[int]:
    """Entry ids whose write set (round robin from entry % E) includes ``position``."""
    return [e for e in range(entries) if (position - e) % ensemble < quorum]


def test_readledger_from_one_bookie_ledger_index_and_bookieformat(
    real_cluster, tmp_path: Path
) -> None:
    uri = real_cluster.uri
    pw_file = str(tmp_path / "ledger.password")
    Path(pw_file).write_text("pw\n")
    ledger_id, ensemble = asyncio.run(_ledger_on(uri, 3, 2, 30))
    index = real_cluster.index_of(ensemble[0])
    bookie = ensemble[0]
    held = _held_by(0, 30, 3, 2)
    assert len(held) == 20

    read = ok(
        cli(
            uri,
            "shell",
            "readledger",
            str(ledger_id),
            "--password-file",
            pw_file,
            "--bookie",
            bookie,
        )
    )
    assert read.splitlines() == [f"{e}\tentry-{e}" for e in held]
    part = ok(
        cli(
            uri,
            "shell",
            "readledger",
            str(ledger_id),
            "--password-file",
            pw_file,
            "--bookie",
            bookie,
            "--from",
            "3",
            "--to",
            "5",
        )
    )
    assert part.splitlines() == [f"{e}\tentry-{e}" for e in held if 3 <= e <= 5]
    assert fails(
        cli(
            uri,
            "shell",
            "readledger",
            str(ledger_id),
            "--password-file",
            pw_file,
            "--bookie",
            "elsewhere:1",
        )
    ).startswith(f"error: bookie elsewhere:1 holds no entry of ledger {ledger_id} in 0..29 ")

    assert as_json(cli(uri, "shell", "listledgers", "--meta", "--json")) == [
        {"ledger": ledger_id, "state": "CLOSED", "ensemble_size": 3, "write_quorum": 2,
         "ack_quorum": 2, "last_entry": 29, "digest": "CRC32C",
         "length": sum(len(b"entry-%d" % i) for i in range(30))}
    ]  # fmt: skip

    shown = as_json(cli(uri, "shell", "ledgermetadata", str(ledger_id), "--json"))
    assert shown["segments"] == [{"first_entry": 0, "ensemble": list(ensemble)}]
    assert (shown["ledger"], shown["state"], shown["last_entry"]) == (ledger_id, "CLOSED", 29)
    assert (shown["custom_metadata"], shown["format_version"]) == ({}, 3)

    # The bookie's index, read from its data directory once it stopped (SIGTERM checkpoints).
    assert real_cluster.stop(index) == 0
    data_dir = str(real_cluster.data_dir / f"bookie-{index}")
    dump = as_json(run_cli("shell", "ledger", str(ledger_id), "--data-dir", data_dir, "--json"))
    assert (dump["ledger"], dump["entries_total"], dump["entries_left_out"]) == (ledger_id, 20, 0)
    assert (dump["first_entry"], dump["last_entry"]) == (held[0], held[-1])
    assert [e["entry"] for e in dump["entries"]] == held
    assert (dump["fenced"], dump["limbo"], dump["master_key_bytes"]) == (False, False, 20)
    assert all(e["log"] and os.path.exists(e["log"]) for e in dump["entries"])
    offsets = [(e["log_id"], e["offset"]) for e in dump["entries"]]
    assert len(set(offsets)) == 20
    limited = as_json(
        run_cli("shell", "ledger", str(ledger_id), "--data-dir", data_dir, "--json", "--limit", "5")
    )
    assert ([e["entry"] for e in limited["entries"]], limited["entries_left_out"]) == (held[:5], 15)
    assert "entry locations" in ok(
        run_cli("shell", "ledger", str(ledger_id), "--data-dir", data_dir)
    )
    absent = fails(run_cli("shell", "ledger", "999999", "--data-dir", data_dir))
    assert absent.startswith(f"error: ledger 999999 is not in the index of {data_dir} ")
    assert fails(
        run_cli("shell", "ledger", "1", "--data-dir", str(real_cluster.data_dir / "no"))
    ) == (f"error: {real_cluster.data_dir / 'no'}: no such directory")

    # bookieformat wipes the stopped bookie (refused while it runs: see the other bookies).
    running = real_cluster.data_dir / f"bookie-{(index + 1) % 3}"
    refused = fails(cli(uri, "shell", "bookieformat", "--data-dir", str(running), "--force"))
    assert refused.endswith("is registered (running): stop it before formatting it")
    no_tty = cli(uri, "shell", "bookieformat", "--data-dir", data_dir)
    assert no_tty.returncode == 2 and "pass --force" in no_tty.stderr
    assert os.listdir(os.path.join(data_dir, "current")) != []
    formatted = ok(cli(uri, "shell", "bookieformat", "--data-dir", data_dir, "--force"))
    assert formatted.startswith(f"formatted bookie {bookie}: ")
    assert os.listdir(os.path.join(data_dir, "current")) == []
    # Its cookie in the metadata says it had data: it refuses to start empty, which would
    # answer "no such entry" for entries it acknowledged.
    port = str(real_cluster.ports[index])
    empty = fails(run("bookie", "--data-dir", data_dir, "--port", port, "--metadata", uri))
    assert empty == (
        f"error: bookie {bookie} has a cookie in the metadata store but none in {data_dir}: "
        "its data is gone (formatted or lost), and it would answer 'no such entry' for "
        "entries it acknowledged; start it on its old data, or delete its cookie "
        "(bkeeper shell cookie_delete) to join as a new, empty bookie"
    )
    assert ok(cli(uri, "shell", "cookie_delete", bookie, "--force"))
    real_cluster.start(index)
    # Its copy is gone: readledger --bookie says so (the ledger still reads from the others).
    lost = fails(
        cli(
            uri,
            "shell",
            "readledger",
            str(ledger_id),
            "--password-file",
            pw_file,
            "--bookie",
            bookie,
        )
    )
    assert lost.startswith(
        f"error: bookie {bookie} failed 20 of the 20 entries of ledger {ledger_id} it should hold: "
    )
    whole = ok(cli(uri, "shell", "readledger", str(ledger_id), "--password-file", pw_file))
    assert len(whole.splitlines()) == 30


async def _wait_auditor(uri: str, auditor: str) -> None:
    """Until ``auditor`` is the elected auditor (bounded only against a hang)."""
    async with await ClusterMetadata.open(uri) as cluster:
        deadline = time.monotonic() + 120
        while await cluster.underreplication.current_auditor() != auditor:
            assert time.monotonic() < deadline, f"{auditor} was never elected"
            await asyncio.sleep(0.05)


def test_initnewcluster_and_nukeexistingcluster(zookeeper, tmp_path: Path) -> None:
    uri = zookeeper.uri(f"/{uuid.uuid4().hex[:12]}/ledgers")
    root = uri[uri.index("/", len("zk://")) :]
    assert fails(cli(uri, "shell", "whatisinstanceid")).startswith(f"error: no cluster at {uri}")
    created = ok(cli(uri, "shell", "initnewcluster")).strip()
    assert created.startswith(f"created a cluster at {uri}: instance id ")
    instance_id = created.rsplit(" ", 1)[1]
    assert ok(cli(uri, "shell", "whatisinstanceid")).strip() == instance_id
    assert fails(cli(uri, "shell", "initnewcluster")) == (
        f"error: {uri} holds a cluster already (instance id {instance_id}); "
        "bkeeper shell nukeexistingcluster deletes one"
    )

    # Refusals: no id nor --force; a wrong root; a wrong instance id; a registered bookie.
    neither = cli(uri, "shell", "nukeexistingcluster", "--root", root)
    assert neither.returncode == 2 and "give either --instance-id ID or --force" in neither.stderr
    assert fails(cli(uri, "shell", "nukeexistingcluster", "--root", "/x", "--force")) == (
        f"error: --root /x is not the root of {uri} ({root})"
    )
    wrong = fails(cli(uri, "shell", "nukeexistingcluster", "--root", root, "--instance-id", "a"))
    assert wrong == (
        f"error: --instance-id a is not the instance id of the cluster at {uri} ({instance_id})"
    )
    bookie = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bkeeper",
            "bookie",
            "--data-dir",
            str(tmp_path / "b"),
            "--port",
            "0",
            "--metadata",
            uri,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert bookie.stdout is not None
        ready = next(line for line in bookie.stdout if " ready on " in line)
        bookie_id = ready.split()[1]
        busy = fails(cli(uri, "shell", "nukeexistingcluster", "--root", root, "--force"))
        assert busy == (
            f"error: 1 bookies are registered ({bookie_id}): stop every bookie before deleting "
            "the cluster"
        )
    finally:
        bookie.terminate()
        assert bookie.wait(60) == 0
    recovery = subprocess.Popen(
        [sys.executable, "-m", "bkeeper", "autorecovery", "--id", "ar-1", "--metadata", uri],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        asyncio.run(_wait_auditor(uri, "ar-1"))
        assert fails(cli(uri, "shell", "nukeexistingcluster", "--root", root, "--force")) == (
            "error: auto-recovery runs (ar-1 is the auditor): stop every 'bkeeper autorecovery' "
            "process before deleting the cluster"
        )
    finally:
        recovery.terminate()
        assert recovery.wait(60) == 0

    nuked = ok(
        cli(uri, "shell", "nukeexistingcluster", "--root", root, "--instance-id", instance_id)
    )
    assert nuked.startswith(f"deleted the cluster at {uri}: ") and nuked.strip().endswith("nodes")
    assert fails(cli(uri, "shell", "clusterinfo")).startswith(f"error: no cluster at {uri} ")
    assert fails(cli(uri, "shell", "nukeexistingcluster", "--root", root, "--force")) == (
        f"error: no cluster at {uri}: nothing to delete"
    )
    again = ok(cli(uri, "shell", "initnewcluster")).strip()
    assert again.rsplit(" ", 1)[1] != instance_id


@pytest.mark.parametrize("real_cluster", [2], indirect=True)
def test_updatecookie_gives_a_stopped_bookie_a_new_id(real_cluster) -> None:
    uri = real_cluster.uri
    old = real_cluster.bookie_id(1)
    data_dir = str(real_cluster.data_dir / "bookie-1")
    assert fails(
        cli(uri, "shell", "updatecookie", "--data-dir", data_dir, "--bookie-id", "renamed")
    ) == (f"error: bookie {old} is registered (running): stop it before changing its id")
    listed = as_json(cli(uri, "shell", "updatecookie", "--data-dir", data_dir, "--list", "--json"))
    assert (listed["agree"], listed["differences"]) == (True, [])
    assert listed["local"]["bookieId"] == listed["stored"]["bookieId"] == old
    assert listed["local"]["ledgerDirs"] == [os.path.abspath(data_dir)]
    assert real_cluster.stop(1) == 0
    moved = ok(cli(uri, "shell", "updatecookie", "--data-dir", data_dir, "--bookie-id", "renamed"))
    assert moved.strip() == (
        f"bookie {old} of {data_dir} is now renamed: start it with --bookie-id renamed"
    )
    assert fails(cli(uri, "shell", "cookie_get", old)).endswith(
        "has no cookie in the metadata store"
    )
    assert as_json(cli(uri, "shell", "cookie_get", "renamed", "--json"))["bookieId"] == "renamed"
    real_cluster.start(1, "--bookie-id", "renamed")
    listing = as_json(cli(uri, "shell", "listbookies", "--json"))
    assert sorted(row["bookie_id"] for row in listing) == sorted(
        [real_cluster.bookie_id(0), "renamed"]
    )
    assert real_cluster.stop(1) == 0
    deleted = ok(cli(uri, "shell", "updatecookie", "--data-dir", data_dir, "--delete", "--force"))
    assert deleted.strip() == f"deleted the cookie of renamed from {data_dir} and {uri}"
    assert not os.path.exists(os.path.join(data_dir, "current", "VERSION"))
    assert fails(cli(uri, "shell", "cookie_get", "renamed")).endswith(
        "has no cookie in the metadata store"
    )
    usage = cli(uri, "shell", "updatecookie", "--data-dir", data_dir)
    assert (
        usage.returncode == 2 and "give one of --bookie-id ID, --list and --delete" in usage.stderr
    )
    never = real_cluster.data_dir / "never-started"
    never.mkdir()
    assert fails(cli(uri, "shell", "updatecookie", "--data-dir", str(never), "--list")) == (
        f"error: {never} has no cookie ({never}/current/VERSION): never started"
    )
