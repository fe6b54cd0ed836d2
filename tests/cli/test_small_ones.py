"""Issue 39's small ones: the subject of an error named once, readledger's range checks,
tables that fit 80 columns with titles that never wrap."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rich.console import Console

from bkeeper.admin import AdminLimits, ClusterAdmin, add_admin_routes
from bkeeper.admin.context import answer_errors
from bkeeper.cli._tables import titled_table
from bkeeper.client import BookKeeper
from bkeeper.common.errors import (
    AdminRequestError,
    BookieUnavailableError,
    CallTimeoutError,
    LedgerNotFoundError,
)
from bkeeper.common.messages import in_context
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.server.admin_http import AdminHttpConfig, AdminHttpServer
from tests.client.conftest import RealCluster, shared_cluster
from tests.server.admin_client import call

__all__ = ["shared_cluster"]  # the fixture, for the tests below


# -- the subject named once ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("what", "message", "expected"),
    [
        ("ledger 999", "ledger 999: no metadata", "ledger 999: no metadata"),
        ("reading ledger 999", "ledger 999: no metadata", "reading ledger 999: no metadata"),
        ("reading ledger 9", "ledger 99: no metadata", "reading ledger 9: ledger 99: no metadata"),
        ("ledger 7", "bookies: name one", "ledger 7: bookies: name one"),
        ("ledger 7", "no colon here", "ledger 7: no colon here"),
    ],
)
def test_in_context_names_the_subject_once(what: str, message: str, expected: str) -> None:
    assert in_context(what, message) == expected


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (LedgerNotFoundError("ledger 7: no metadata"), "reading ledger 7: no metadata"),
        (CallTimeoutError("ledger 7: no answer"), "reading ledger 7: no answer"),
        (
            BookieUnavailableError("ledger 7: b:1 down"),
            "reading ledger 7: BookieUnavailableError: b:1 down",
        ),
    ],
)
async def test_admin_errors_name_the_ledger_once(error: Exception, message: str) -> None:
    with pytest.raises(AdminRequestError) as caught:
        async with answer_errors("reading ledger 7"):
            raise error
    assert str(caught.value) == message


@pytest.fixture
async def admin_port() -> AsyncIterator[int]:
    uri = f"memory://{uuid.uuid4().hex[:8]}/ledgers"
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
        server = AdminHttpServer(AdminHttpConfig("127.0.0.1", 0, writes_enabled=True))
        admin = ClusterAdmin(uri, lambda: "10.0.0.1:3181", AdminLimits())
        add_admin_routes(server, admin)
        await server.start()
        try:
            yield server.port
        finally:
            await server.aclose()
            await admin.aclose()


@pytest.mark.parametrize(
    ("method", "path", "message"),
    [
        ("GET", "/api/v1/ledger/metadata?ledger_id=999", "ledger 999: no metadata"),
        ("GET", "/api/v1/ledger/read?ledger_id=999", "reading ledger 999: no metadata"),
        ("DELETE", "/api/v1/ledger/delete?ledger_id=999", "deleting ledger 999: no metadata"),
    ],
)
async def test_missing_ledger_over_http_is_named_once(
    admin_port: int, method: str, path: str, message: str
) -> None:
    answer = await call(admin_port, method, path)
    assert (answer.status, answer.error) == (404, message)


# -- readledger's range --------------------------------------------------------------------
def _shell(uri: str, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """``bkeeper shell ARGS --metadata URI`` with the output ``columns`` wide (a pipe)."""
    env = {**os.environ, "COLUMNS": str(columns), "BKEEPER_LEDGER_PASSWORD": "pw"}
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", "shell", *args, "--metadata", uri],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip


def _one_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.fixture(scope="module")
async def ledgers(shared_cluster: RealCluster) -> tuple[int, int]:
    """A closed ledger of entries 0..9 and an empty closed one (password ``pw``)."""
    async with BookKeeper(shared_cluster.uri) as bk:
        full = await bk.create_ledger(password=b"pw")
        for i in range(10):
            await full.append(b"e%d" % i)
        await full.close()
        empty = await bk.create_ledger(password=b"pw")
        await empty.close()
    return full.ledger_id, empty.ledger_id


def test_readledger_refuses_a_range_the_ledger_does_not_have(
    shared_cluster: RealCluster, ledgers: tuple[int, int]
) -> None:
    uri = shared_cluster.uri
    full, empty = ledgers
    assert _one_error(_shell(uri, "readledger", str(full), "--from", "5", "--to", "2")) == (
        "error: --to 2 is before --from 5: nothing to read"
    )
    assert _one_error(_shell(uri, "readledger", str(full), "--to", "10")) == (
        f"error: --to 10 is past the end of ledger {full}: it has entries 0..9 (closed)"
    )
    assert _one_error(_shell(uri, "readledger", str(full), "--from", "12")) == (
        f"error: --from 12 is past the end of ledger {full}: it has entries 0..9 (closed)"
    )
    assert _one_error(_shell(uri, "readledger", str(empty), "--to", "0")) == (
        f"error: --to 0 is past the end of ledger {empty}: it has no entries (closed)"
    )
    negative = _shell(uri, "readledger", str(full), "--from", "-1")
    assert negative.returncode == 2 and "--from" in negative.stderr, negative.stderr
    assert len(negative.stderr.strip().splitlines()) == 1, negative.stderr

    part = _shell(uri, "readledger", str(full), "--from", "8", "--to", "9")
    assert (part.returncode, part.stdout) == (0, "8\te8\n9\te9\n"), part.stderr
    nothing = _shell(uri, "readledger", str(empty))
    assert (nothing.returncode, nothing.stdout) == (0, ""), nothing.stderr
    assert nothing.stderr == f"ledger {empty} has no entries\n"


# -- tables in 80 columns ------------------------------------------------------------------
def _assert_fits(output: str, width: int, title: str) -> None:
    lines = output.splitlines()
    assert lines, output
    assert all(len(line) <= width for line in lines), output
    assert title in lines[0], output  # the whole title on its first line


def test_listledgers_title_on_one_line_at_80_columns(
    shared_cluster: RealCluster, ledgers: tuple[int, int]
) -> None:
    uri = shared_cluster.uri
    for args in (("listledgers",), ("listledgers", "--meta"), ("listbookies",), ("clusterinfo",)):
        result = _shell(uri, *args)
        assert result.returncode == 0, result.stderr
        what = {"listledgers": "ledgers", "listbookies": "bookies", "clusterinfo": "cluster"}
        _assert_fits(result.stdout, 80, f"{what[args[0]]} at {uri}")
    shown = _shell(uri, "ledgermetadata", str(ledgers[0]))
    _assert_fits(shown.stdout, 80, f"ledger {ledgers[0]}")


@pytest.mark.parametrize("width", [40, 80])
def test_titled_table_keeps_the_title_whole_and_folds_long_cells(width: int) -> None:
    title = "ledgers at zk://zk-1.example.com:2181/a/root/ledgers"
    table = titled_table(title)
    table.add_column("ledger", justify="right")
    table.add_column("where")
    table.add_row("9", "/data/" + "x" * 150)
    console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    with console.capture() as captured:
        console.print(table)
    lines = captured.get().splitlines()
    assert all(len(line) <= width for line in lines)
    if len(title) <= width:
        assert title in lines[0]
    folded = "".join(line.split("│")[2].strip() for line in lines if line.count("│") == 3)
    assert folded == "/data/" + "x" * 150  # folded, not cut with an ellipsis


@pytest.mark.parametrize("width", [80, 160])
def test_a_title_wider_than_the_columns_is_a_line_above_them(width: int) -> None:
    """The columns keep their own width (a script counting ``│ writable │`` in ``listbookies``
    found none when the table was stretched to its title), the title is not cut."""
    title = "bookies at zk://127.0.0.1:2181/ledgers?digest-file=/tmp/" + "d" * 60 + "/zk.digest"
    table = titled_table(title)
    table.add_column("bookie id")
    table.add_column("mode")
    table.add_row("127.0.0.1:3181", "writable")
    console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    with console.capture() as captured:
        console.print(table)
    text = captured.get()
    assert "│ writable │" in text
    above = text.split("┏")[0]
    assert "".join(above.split()) == "".join(title.split())  # whole, above the table
    if len(title) <= width:
        assert above.splitlines()[0] == title  # on one line where it fits


def test_output_width_follows_columns_in_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    from bkeeper.cli import _tables

    monkeypatch.setenv("COLUMNS", "80")
    assert _tables.output_width() == 80
    monkeypatch.delenv("COLUMNS")
    assert _tables.output_width() == _tables.PIPE_WIDTH


def test_every_cli_table_is_titled_table() -> None:
    """The CLI files of issue 39's tables make their tables with titled_table."""
    cli = Path(__file__).parents[2] / "src" / "bkeeper" / "cli"
    names = ["shell.py", "shell_admin.py", "shell_cookie.py", "shell_disk.py",
             "shell_disk_logs.py", "shell_ledger.py", "shell_ops.py", "shell_recovery.py",
             "log.py", "log_subscriptions.py"]  # fmt: skip
    for name in names:
        assert "Table(" not in (cli / name).read_text(), name
