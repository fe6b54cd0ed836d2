"""``bkeeper shell listfilesondisc / lastmark / readjournal / localconsistencycheck`` on data
directories written by a real Storage, and on a running bookie process."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import pytest
from click.testing import CliRunner, Result

from bkeeper.cli.shell import shell
from bkeeper.common.errors import TooManyRequestsError
from bkeeper.storage import OsFileSystem, Storage, StorageConfig
from bkeeper.storage.checkpoint_file import read_checkpoint
from bkeeper.storage.index_file import index_file_generation, index_file_name, load_index

KEY = b"k" * 20
_HEAD = struct.Struct(">qqqq")


def _body(ledger_id: int, entry_id: int) -> bytes:
    payload = f"entry {ledger_id}/{entry_id} ".encode() * 4
    return _HEAD.pack(ledger_id, entry_id, entry_id - 1, len(payload)) + payload


def _config(data_dir: Path) -> StorageConfig:
    return StorageConfig(
        data_dir=str(data_dir),
        journal_max_group_wait_ms=0.0,
        write_cache_bytes_max=64 * 1024,
        entry_log_bytes_max=32 * 1024,
    )


def _add(storage: Storage, ledger_id: int, entries: range) -> None:
    for entry_id in entries:
        for _ in range(100):
            try:
                storage.add_entry(ledger_id, entry_id, KEY, _body(ledger_id, entry_id))
                break
            except TooManyRequestsError:  # the write cache is full: flush it
                storage.checkpoint()
        else:
            raise AssertionError("the write cache stayed full")


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A bookie data directory: ledgers 1 to 3 (200 entries each) checkpointed into several
    entry logs, then ledger 4 (50 entries) only in the journal, left by a process that
    died (so the journal is kept)."""
    path = tmp_path / "bookie"
    _fill(_config(path))
    return path


def _fill(config: StorageConfig) -> None:
    durable = {"half": threading.Event(), "force": threading.Event()}

    def on_durable(tokens: list[object], error: BaseException | None) -> None:
        assert error is None, error
        for token in tokens:
            if token in durable:
                durable[token].set()  # type: ignore[index]

    storage = Storage.open(config, on_durable=on_durable)
    for ledger_id in (1, 2, 3):
        _add(storage, ledger_id, range(200))
    storage.checkpoint()
    # Ledger 4 in two journal groups whatever the machine's speed: the second half is added
    # once the first is durable (a slow journal thread used to take all 50 in one group).
    _add(storage, 4, range(25))
    storage.force_ledger(4, token="half")
    assert durable["half"].wait(30)
    _add(storage, 4, range(25, 50))
    storage.force_ledger(4, token="force")
    assert durable["force"].wait(30)
    storage.checkpoint()  # ledger 4 indexed too; the journal file holding it stays
    storage.abort()


def run(*args: str) -> Result:
    return CliRunner().invoke(shell, list(args), catch_exceptions=False)


def run_json(*args: str) -> dict[str, object]:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    parsed: dict[str, object] = json.loads(result.stdout)
    return parsed


def _index(data_dir: Path) -> dict[tuple[int, int], int]:
    ledgers = data_dir / "current" / "ledgers"
    fs = OsFileSystem()
    root = read_checkpoint(fs, str(ledgers / "checkpoint"))
    assert root is not None
    index = load_index(fs, str(ledgers / index_file_name(root.index_generation)), root.index_bytes)
    return {(lid, e): loc for lid, s in index.items() for e, loc in s.locations.items()}


def test_listfilesondisc_lists_every_file_with_its_size(data_dir: Path) -> None:
    listed = run_json("listfilesondisc", "--data-dir", str(data_dir))
    files = listed["files"]
    assert isinstance(files, list)
    assert {f["path"]: f["bytes"] for f in files} == {
        str(p): p.stat().st_size for p in data_dir.rglob("*") if p.is_file()
    }
    kinds = {f["kind"] for f in files}
    assert kinds == {"journal", "entrylog", "index", "checkpoint"}
    logs = run_json("listfilesondisc", "--data-dir", str(data_dir), "--entrylog")["files"]
    assert isinstance(logs, list) and len(logs) >= 2
    assert {f["kind"] for f in logs} == {"entrylog"}
    # Logs that rolled end with their ledgers map; the last one was open when the process died.
    assert [f["ledgers_map"] for f in logs] == [True] * (len(logs) - 1) + [False]
    table = run("listfilesondisc", "--data-dir", str(data_dir))
    assert table.exit_code == 0 and "0000000000000001.log" in table.stdout
    assert "current (named by the checkpoint)" in table.stdout


def test_lastmark_prints_the_checkpoint(data_dir: Path) -> None:
    root = read_checkpoint(OsFileSystem(), str(data_dir / "current" / "ledgers" / "checkpoint"))
    assert root is not None
    mark = run_json("lastmark", "--data-dir", str(data_dir))["checkpoint"]
    assert isinstance(mark, dict)
    assert (mark["journal_file_id"], mark["journal_offset"]) == tuple(root.mark)
    assert (mark["index_generation"], mark["index_bytes"], mark["limbo"]) == (
        root.index_generation,
        root.index_bytes,
        False,
    )
    table = run("lastmark", "--data-dir", str(data_dir))
    assert f"offset {root.mark.offset:,}" in table.stdout


def test_readjournal_prints_groups_and_records(data_dir: Path) -> None:
    journal = data_dir / "current" / "journal"
    (name,) = [n for n in os.listdir(journal) if os.path.getsize(journal / n) > 16]
    file_id = str(int(name[:16], 16))
    read = run_json(
        "readjournal", "--data-dir", str(data_dir), file_id, "--entries", "--limit", "0"
    )
    records = read["records_shown"]
    assert isinstance(records, list) and read["damage"] == [] and read["left_out"] == 0
    adds = [(r["ledger"], r["entry"]) for r in records if r["kind"] == "ADD_ENTRY"]
    assert (4, 0) in adds and (4, 49) in adds
    assert any(r["kind"] == "FORCE_LEDGER" and r["ledger"] == 4 for r in records)
    by_path = run_json("readjournal", str(journal / name), "--limit", "2")
    assert by_path["groups"] == read["groups"] and len(by_path["groups_shown"]) == 2  # type: ignore[arg-type]


def test_localconsistencycheck_passes_then_names_a_damaged_entry_log(data_dir: Path) -> None:
    report = run_json("localconsistencycheck", "--data-dir", str(data_dir))
    assert report["consistent"] is True and report["entries"] == 650
    table = run("localconsistencycheck", "--data-dir", str(data_dir))
    assert table.exit_code == 0
    assert f"consistent: every location leads to its entry ({data_dir})" in table.stdout

    location = _index(data_dir)[(2, 120)]
    log = data_dir / "current" / "ledgers" / f"{location >> 32:016x}.log"
    with open(log, "r+b") as handle:
        handle.seek((location & 0xFFFFFFFF) + 8 + 40)
        handle.write(b"\xde\xad")
    damaged = run("localconsistencycheck", "--data-dir", str(data_dir), "--json")
    assert damaged.exit_code == 1
    parsed = json.loads(damaged.stdout)
    assert parsed["consistent"] is False and parsed["problems_total"] == 1
    assert parsed["problems"][0]["log"] == str(log)
    assert damaged.stderr.count("\n") == 1
    assert damaged.stderr.startswith("error: the index and the entry logs of ")
    assert f"ledger 2 entry 120 in {log} at offset {location & 0xFFFFFFFF}" in damaged.stderr


def test_readlog_prints_records_and_the_ledgers_map(data_dir: Path) -> None:
    index = _index(data_dir)
    in_log = sorted((loc & 0xFFFFFFFF, lid, e) for (lid, e), loc in index.items() if loc >> 32 == 1)
    read = run_json("readlog", "--data-dir", str(data_dir), "1", "--limit", "0")
    shown = read["records_shown"]
    assert isinstance(shown, list) and read["damage"] is None and read["map_differences"] == []
    assert [(r["offset"], r["ledger"], r["entry"]) for r in shown] == in_log
    assert all(r["checksum_ok"] for r in shown)
    ledgers_map = read["ledgers_map"]
    assert (
        isinstance(ledgers_map, dict) and ledgers_map["ledgers"] == read["record_bytes_by_ledger"]
    )

    ledger_id, entry_id = in_log[3][1], in_log[3][2]
    one = run_json(
        "readlog", "--data-dir", str(data_dir), "1", "--ledger", str(ledger_id), "--entry",
        str(entry_id), "--body",
    )  # fmt: skip
    (row,) = one["records_shown"]  # type: ignore[misc]
    assert (row["ledger"], row["entry"]) == (ledger_id, entry_id)
    assert bytes.fromhex(row["body_hex"]) == _body(ledger_id, entry_id)[32:]
    table = run("readlog", "--data-dir", str(data_dir), "1", "--limit", "5")
    assert table.exit_code == 0 and "ledgers map" in table.stdout
    assert f"{len(in_log):,} records; {len(in_log) - 5:,} not shown (--limit)" in table.stdout


def test_readlog_reports_a_damaged_record_and_fails(data_dir: Path) -> None:
    location = _index(data_dir)[(1, 30)]
    log = data_dir / "current" / "ledgers" / f"{location >> 32:016x}.log"
    offset = location & 0xFFFFFFFF
    with open(log, "r+b") as handle:
        handle.seek(offset + 8 + 40)
        handle.write(b"\x00\x00")
    result = run("readlog", str(log), "--json")
    assert result.exit_code == 1
    damage = json.loads(result.stdout)["damage"]
    assert (damage["offset"], damage["reason"]) == (offset, "entry record fails its checksum")
    assert result.stderr == (
        f"error: {log}: damaged record at offset {offset}: entry record fails its checksum\n"
    )


def test_readjournal_reports_damage_and_fails(data_dir: Path) -> None:
    journal = data_dir / "current" / "journal"
    (name,) = [n for n in os.listdir(journal) if os.path.getsize(journal / n) > 16]
    with open(journal / name, "r+b") as handle:
        handle.seek(200)
        handle.write(b"\xff\xff")
    result = run("readjournal", str(journal / name))
    assert result.exit_code == 1
    assert "damage" in result.stdout and "checksum mismatch" in result.stdout
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {journal / name}: 1 damaged spot(s), the first at")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "shell", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_missing_or_foreign_directory_is_one_line_and_exit_1(
    subprocesses: None, tmp_path: Path
) -> None:
    missing = str(tmp_path / "nothing")
    for command in ("listfilesondisc", "lastmark", "localconsistencycheck"):
        result = _cli(command, "--data-dir", missing)
        assert (result.returncode, result.stdout) == (1, "")
        assert result.stderr == f"error: {missing}: no such directory\n"
    result = _cli("readlog", "--data-dir", missing, "1")
    assert (result.returncode, result.stderr) == (1, f"error: {missing}: no such directory\n")
    result = _cli("readjournal", "--data-dir", str(tmp_path), "1")
    assert result.returncode == 1
    assert result.stderr == (
        f"error: {tmp_path} is not a bookie data directory "
        "(no current/journal and current/ledgers in it; give --ledger-dir and --journal-dir "
        "if the bookie was started with them)\n"
    )


@pytest.mark.parametrize("real_cluster", [(3, ("-o", "checkpoint_interval_ms=100"))], indirect=True)
def test_on_a_running_bookie_then_stopped(real_cluster) -> None:
    """The commands read a running bookie's files (its checkpoint moves meanwhile), then the
    same bookie stopped."""
    written = subprocess.run(
        [sys.executable, "-m", "bkeeper", "shell", "simpletest", "--entries", "300", "--keep",
         "--metadata", real_cluster.uri],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    data = str(real_cluster.data_dir / "bookie-0")
    deadline = time.monotonic() + 60
    while True:  # until a checkpoint has indexed the 300 entries
        report = run_json("localconsistencycheck", "--data-dir", data)
        assert report["consistent"] is True, report
        if report["entries"] == 300:
            break
        assert time.monotonic() < deadline, report
        time.sleep(0.05)
    assert run("listfilesondisc", "--data-dir", data).exit_code == 0
    assert run_json("lastmark", "--data-dir", data)["checkpoint"] is not None

    assert real_cluster.stop(0) == 0
    report = run_json("localconsistencycheck", "--data-dir", data)
    assert (report["consistent"], report["entries"], report["ledgers"]) == (True, 300, 1)
    mark = run_json("lastmark", "--data-dir", data)["checkpoint"]
    assert isinstance(mark, dict)
    journal = run("readjournal", "--data-dir", data, str(mark["journal_file_id"]))
    assert journal.exit_code == 0, journal.output


# -- a bookie with two ledger dirs and two journal dirs --------------------------------------
class Multi(NamedTuple):
    """A data dir whose bookie has its first ledger and journal dirs in it (named by the
    checkpoint relative to it) and its second ones on another disk (named absolute)."""

    data_dir: Path
    ledger_dirs: tuple[Path, Path]
    journal_dirs: tuple[Path, Path]

    def key(self, directory: Path) -> str:
        inside = directory.is_relative_to(self.data_dir)
        return str(directory.relative_to(self.data_dir)) if inside else str(directory)


@pytest.fixture
def multi(tmp_path: Path) -> Multi:
    """As :func:`data_dir`, written by a storage with two ledger dirs and two journal dirs:
    ledgers 2 and 4 in the first journal, 1 and 3 in the second."""
    data = tmp_path / "bookie"
    dirs = Multi(
        data,
        (data / "current" / "ledgers", tmp_path / "disk2" / "ledgers"),
        (data / "current" / "journal", tmp_path / "disk2" / "journal"),
    )
    config = replace(
        _config(data),
        ledger_dirs=tuple(map(str, dirs.ledger_dirs)),
        journal_dirs=tuple(map(str, dirs.journal_dirs)),
    )
    _fill(config)
    return dirs


def _numbered(directory: Path, suffix: str) -> list[int]:
    return sorted(int(p.name[:16], 16) for p in directory.iterdir() if p.name.endswith(suffix))


def _file(multi: Multi, kind: str, path: Path, number: int, current: bool) -> dict[str, object]:
    return {
        "kind": kind,
        "dir": multi.key(path.parent),
        "number": number,
        "name": path.name,
        "path": str(path),
        "bytes": path.stat().st_size,
        "current": current,
    }


def test_several_dirs_listfilesondisc_lists_every_dir(multi: Multi) -> None:
    first_ledgers = multi.ledger_dirs[0]
    root = read_checkpoint(OsFileSystem(), str(first_ledgers / "checkpoint"))
    assert root is not None
    expected: list[dict[str, object]] = []
    for directory, (key, mark) in zip(multi.journal_dirs, root.marks, strict=True):
        assert key == multi.key(directory)
        for file_id in _numbered(directory, ".txn"):
            path = directory / f"{file_id:016x}.txn"
            expected.append(_file(multi, "journal", path, file_id, file_id == mark.file_id))
    logs = sorted((i, d) for d in multi.ledger_dirs for i in _numbered(d, ".log"))
    assert {d for _, d in logs} == set(multi.ledger_dirs)  # logs in both ledger dirs
    for log_id, directory in logs:
        log = _file(multi, "entrylog", directory / f"{log_id:016x}.log", log_id, False)
        # rolled logs end with their ledgers map; the last was open when the process died
        expected.append({**log, "ledgers_map": log_id != logs[-1][0]})
    for name in sorted(os.listdir(first_ledgers)):
        generation = index_file_generation(name)
        if generation is not None:
            current = generation == root.index_generation
            expected.append(_file(multi, "index", first_ledgers / name, generation, current))
    expected.append(_file(multi, "checkpoint", first_ledgers / "checkpoint", -1, True))
    listed = run("listfilesondisc", "--data-dir", str(multi.data_dir), "--json")
    assert (listed.exit_code, listed.stderr) == (0, "")
    assert json.loads(listed.stdout) == {
        "data_dir": str(multi.data_dir),
        "ledger_dirs": list(map(str, multi.ledger_dirs)),
        "journal_dirs": list(map(str, multi.journal_dirs)),
        "files": expected,
    }
    table = run("listfilesondisc", "--data-dir", str(multi.data_dir))
    assert table.exit_code == 0
    assert "│ journal    │ current/journal " in table.stdout
    assert "│ checkpoint │ current/ledgers " in table.stdout


def test_several_dirs_lastmark_has_a_mark_per_journal(multi: Multi) -> None:
    first_ledgers = multi.ledger_dirs[0]
    root = read_checkpoint(OsFileSystem(), str(first_ledgers / "checkpoint"))
    assert root is not None
    journals = [
        {
            "dir": str(directory),
            "key": multi.key(directory),
            "file_id": mark.file_id,
            "offset": mark.offset,
            "file": str(directory / f"{mark.file_id:016x}.txn"),
        }
        for directory, (_, mark) in zip(multi.journal_dirs, root.marks, strict=True)
    ]
    assert run_json("lastmark", "--data-dir", str(multi.data_dir)) == {
        "data_dir": str(multi.data_dir),
        "checkpoint": {
            "checkpoint": str(first_ledgers / "checkpoint"),
            "journal_file_id": root.marks[0].position.file_id,
            "journal_offset": root.marks[0].position.offset,
            "journal_file": journals[0]["file"],
            "journals": journals,
            "index_generation": root.index_generation,
            "index_bytes": root.index_bytes,
            "index_file": str(first_ledgers / index_file_name(root.index_generation)),
            "ledger_dirs": list(map(str, multi.ledger_dirs)),
            "limbo": False,
            "clean_stop": root.clean,
        },
    }
    table = run("lastmark", "--data-dir", str(multi.data_dir))
    assert "│ journal mark (current/journal) " in table.stdout  # (the other's dir is long)
    assert table.stdout.count("│ journal mark") == 2
    for _, mark in root.marks:
        value = f"file {mark.file_id} ({mark.file_id:016x}.txn) offset {mark.offset:,}"
        assert value in table.stdout


def test_several_dirs_readjournal_needs_a_journal_dir_for_an_id_in_both(multi: Multi) -> None:
    first, second = multi.journal_dirs
    file_id = max(set(_numbered(first, ".txn")) & set(_numbered(second, ".txn")))
    ambiguous = run("readjournal", "--data-dir", str(multi.data_dir), str(file_id))
    assert (ambiguous.exit_code, ambiguous.stdout) == (1, "")
    assert ambiguous.stderr == (
        f"error: journal file id {file_id} is ambiguous: in dirs {first} and {second}; "
        "give --journal-dir or the file's path\n"
    )
    ledgers = {}
    for directory in multi.journal_dirs:
        read = run_json(
            "readjournal", "--journal-dir", str(directory), str(file_id), "--entries", "--limit",
            "0",
        )  # fmt: skip
        assert read["path"] == str(directory / f"{file_id:016x}.txn") and read["damage"] == []
        records = read["records_shown"]
        assert isinstance(records, list)
        ledgers[directory] = {r["ledger"] for r in records if r["kind"] == "ADD_ENTRY"}
    # a ledger's records go to the journal of its id modulo the number of journals (the
    # journals did not roll: one file each, the checkpoint's marks inside it)
    assert ledgers == {first: {2, 4}, second: {1, 3}}


def test_several_dirs_readlog_finds_a_log_in_the_second_ledger_dir(multi: Multi) -> None:
    second = multi.ledger_dirs[1]
    log_id = _numbered(second, ".log")[0]
    index = _index(multi.data_dir)
    in_log = sorted(
        (loc & 0xFFFFFFFF, lid, e) for (lid, e), loc in index.items() if loc >> 32 == log_id
    )
    read = run_json("readlog", "--data-dir", str(multi.data_dir), str(log_id), "--limit", "0")
    path = second / f"{log_id:016x}.log"
    assert (read["path"], read["log_id"], read["bytes"]) == (
        str(path),
        log_id,
        path.stat().st_size,
    )
    shown = read["records_shown"]
    assert isinstance(shown, list) and read["damage"] is None
    assert [(r["offset"], r["ledger"], r["entry"]) for r in shown] == in_log
    missing = run("readlog", "--data-dir", str(multi.data_dir), "999")
    assert missing.stderr == (
        f"error: no entry log {999:016x}.log in the ledger dirs {multi.ledger_dirs[0]} and "
        f"{second}\n"
    )


def test_several_dirs_localconsistencycheck_names_a_damaged_log_in_the_second_dir(
    multi: Multi,
) -> None:
    index = _index(multi.data_dir)
    logs = {loc >> 32 for loc in index.values()}
    root = run_json("lastmark", "--data-dir", str(multi.data_dir))["checkpoint"]
    expected = {
        "data_dir": str(multi.data_dir),
        "consistent": True,
        "checkpoint": root,
        "ledger_dirs": list(map(str, multi.ledger_dirs)),
        "ledgers": 4,
        "entries": 650,
        "entry_logs": len(logs),
        "rechecked": 0,
        "problems_total": 0,
        "problems_left_out": 0,
        "problems": [],
    }
    assert run_json("localconsistencycheck", "--data-dir", str(multi.data_dir)) == expected

    second = multi.ledger_dirs[1]
    (ledger_id, entry_id), location = min(
        (key, loc) for key, loc in index.items() if (second / f"{loc >> 32:016x}.log").exists()
    )
    log = second / f"{location >> 32:016x}.log"
    offset = location & 0xFFFFFFFF
    with open(log, "r+b") as handle:
        handle.seek(offset + 8 + 40)
        handle.write(b"\xde\xad")
    damaged = run("localconsistencycheck", "--data-dir", str(multi.data_dir), "--json")
    assert damaged.exit_code == 1
    problem = {
        "ledger": ledger_id,
        "entry": entry_id,
        "log_id": location >> 32,
        "log": str(log),
        "offset": offset,
        "problem": "bad record",
        "detail": "entry record fails its checksum",
    }
    assert json.loads(damaged.stdout) == {
        **expected,
        "consistent": False,
        "problems_total": 1,
        "problems": [problem],
    }
    assert damaged.stderr == (
        f"error: the index and the entry logs of {multi.data_dir} disagree: 1 problem(s); the "
        f"first: ledger {ledger_id} entry {entry_id} in {log} at offset {offset}: bad record\n"
    )


def test_several_dirs_given_that_differ_from_the_checkpoint_s_are_noted(multi: Multi) -> None:
    first, second = multi.journal_dirs
    checkpoint = multi.ledger_dirs[0] / "checkpoint"
    result = run(
        "listfilesondisc", "--data-dir", str(multi.data_dir), "--journal-dir", str(first),
        "--journal", "--json",
    )  # fmt: skip
    assert result.exit_code == 0
    assert result.stderr == (
        f"note: the dirs given differ from those the checkpoint {checkpoint} names (journal "
        f"dirs {first} and {second}, given {first}): showing the dirs given\n"
    )
    files = json.loads(result.stdout)["files"]
    assert {f["dir"] for f in files} == {"current/journal"}
    same = run(
        "lastmark", "--data-dir", str(multi.data_dir),
        *(arg for d in multi.ledger_dirs for arg in ("--ledger-dir", str(d))),
        *(arg for d in multi.journal_dirs for arg in ("--journal-dir", str(d))),
    )  # fmt: skip
    assert (same.exit_code, same.stderr) == (0, "")
