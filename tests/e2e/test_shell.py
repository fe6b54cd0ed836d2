"""``bkeeper shell`` ledger commands against a real cluster."""

from __future__ import annotations

import re
from pathlib import Path

from tests.e2e.helpers import bkeeper


def test_shell_ledger_commands(real_cluster, tmp_path: Path) -> None:
    uri = real_cluster.uri
    right, wrong_file = tmp_path / "right.password", tmp_path / "wrong.password"
    right.write_text("simpletest\n")
    wrong_file.write_text("nope")
    ok = bkeeper(uri, "shell", "simpletest", "--entries", "300", "--keep")
    assert ok.returncode == 0, ok.stderr
    ledger = int(re.search(r"ledger (\d+)", ok.stdout).group(1))
    assert "300 entries" in ok.stdout and "read back" in ok.stdout

    listing = bkeeper(uri, "shell", "listledgers", "--meta")
    row = next(line for line in listing.stdout.splitlines() if re.match(rf"│\s+{ledger}\s+│", line))
    assert "CLOSED" in row and "3/3/2" in row and "299" in row

    meta = bkeeper(uri, "shell", "ledgermetadata", str(ledger))
    assert meta.returncode == 0 and "segment from entry 0" in meta.stdout
    assert meta.stdout.count("127.0.0.1:") == 3

    read = bkeeper(
        uri,
        "shell",
        "readledger",
        str(ledger),
        "--password-file",
        str(right),
        "--from",
        "5",
        "--to",
        "7",
    )
    assert read.returncode == 0, read.stderr
    assert [line.split("\t")[0] for line in read.stdout.splitlines()] == ["5", "6", "7"]
    wrong = bkeeper(uri, "shell", "readledger", str(ledger), "--password-file", str(wrong_file))
    # One line naming the ledger and the cause; no traceback, no kazoo line, no password.
    assert (wrong.returncode, wrong.stderr) == (1, f"error: ledger {ledger}: wrong password\n")

    assert bkeeper(uri, "shell", "deleteledger", str(ledger), "--force").returncode == 0
    gone = bkeeper(uri, "shell", "ledgermetadata", str(ledger))
    assert gone.returncode == 1 and "no metadata" in gone.stderr
    bad = bkeeper(uri, "shell", "simpletest", "--ensemble", "2", "--write-quorum", "3")
    assert bad.returncode == 2 and "--ensemble >= --write-quorum" in bad.stderr
