"""Bookie options by name: ``-o key=value`` and ``--conf FILE`` (cli._settings), and how
``bkeeper bookie`` and ``bkeeper sandbox`` report a mistake in them."""

from __future__ import annotations

import dataclasses
import itertools
import subprocess
import sys
from pathlib import Path

import click
import pytest

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.cli._settings import SETTABLE, build_configs, merged, read_settings
from bkeeper.server import BookieConfig
from bkeeper.storage import StorageConfig
from bkeeper.testing.sandbox import Sandbox, SandboxConfig


def test_every_field_of_the_configurations_is_settable_by_name() -> None:
    configs = (StorageConfig, BookieConfig, AutoRecoveryConfig)
    names = {f.name for c in configs for f in dataclasses.fields(c)}
    # tls and auth (files and secrets) have options of their own: bkeeper.cli._security
    assert set(SETTABLE) == names - {"data_dir", "extra", "tls", "auth"}


def test_values_are_read_by_the_fields_type() -> None:
    settings = read_settings(
        None,
        [
            "journal_file_bytes_max=64_000",
            "connections_max=0x10",
            "disk_usage_threshold=0.5",
            "journal_skip_corrupt_records=yes",
            "write_cache_flush_bytes=none",
            "host=0.0.0.0",
            "ledger_dirs=/mnt/a, /mnt/b,",
            "journal_dirs=",
        ],
    )
    assert dict(settings.storage) == {
        "journal_file_bytes_max": 64_000,
        "disk_usage_threshold": 0.5,
        "journal_skip_corrupt_records": True,
        "write_cache_flush_bytes": None,
        "ledger_dirs": ("/mnt/a", "/mnt/b"),
        "journal_dirs": (),
    }
    assert dict(settings.bookie) == {"connections_max": 16, "host": "0.0.0.0"}


def test_the_admin_server_options_by_name() -> None:
    bookie, _ = build_configs("/d", read_settings(None, ["http_port=0x1F90", "http_host=::"]))
    assert (bookie.http_port, bookie.http_host) == (8080, "::")
    assert dict(read_settings(None, ["http_port=none"]).bookie) == {"http_port": None}
    assert build_configs("/d", read_settings(None, []))[0].http_port is None


def test_flags_given_win_over_o_which_wins_over_the_file(tmp_path: Path) -> None:
    conf = tmp_path / "b.conf"
    conf.write_text(
        "# comment\n\n port = 4000\nreadonly=true\ncheckpoint_interval_ms=5\njournal_dirs=/j1,/j2\n"
    )
    settings = read_settings(
        str(conf),
        ["port=4001", "checkpoint_interval_ms=6", "port=4002"],
        {"readonly": False, "ledger_dirs": ("/l1",)},
    )
    assert dict(settings.bookie) == {"port": 4002, "readonly": False, "checkpoint_interval_ms": 6}
    defaults = read_settings(None, (), {"port": 3181, "host": "127.0.0.1"})
    bookie, storage = build_configs("/d", merged(defaults, settings))
    assert (bookie.port, bookie.host, bookie.checkpoint_interval_ms) == (4002, "127.0.0.1", 6)
    assert storage.data_dir == bookie.data_dir == "/d"
    assert (storage.ledger_dirs, storage.journal_dirs) == (("/l1",), ("/j1", "/j2"))
    assert settings.args() == [
        "-o", "journal_dirs=/j1,/j2", "-o", "ledger_dirs=/l1",
        "-o", "port=4002", "-o", "readonly=False", "-o", "checkpoint_interval_ms=6",
    ]  # fmt: skip
    assert read_settings(None, settings.args()[1::2]) == settings  # read back as written


@pytest.mark.parametrize(
    ("conf_text", "options", "message"),
    [
        (None, ["nope=1"], "-o nope=1: no bookie, storage or autorecovery option named 'nope'"),
        (None, ["port"], "-o port: 'port' is not key=value"),
        (None, ["port=x"], "-o port=x: port: 'x' is not an integer"),
        (None, ["readonly=maybe"], "-o readonly=maybe: readonly: 'maybe' is not true or false"),
        (
            None,
            ["data_dir=/x"],
            "-o data_dir=/x: no bookie, storage or autorecovery option named 'data_dir'",
        ),
        ("port=1\n\nbad line\n", [], "line 3: 'bad line' is not key=value"),
    ],
)
def test_mistakes_name_where_they_are(
    tmp_path: Path, conf_text: str | None, options: list[str], message: str
) -> None:
    conf = None
    if conf_text is not None:
        conf = str(tmp_path / "b.conf")
        Path(conf).write_text(conf_text)
    with pytest.raises(click.UsageError) as caught:
        read_settings(conf, options)
    assert message in caught.value.format_message()


def test_a_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    with pytest.raises(click.UsageError, match=r"--conf .*missing.conf: cannot read it"):
        read_settings(str(tmp_path / "missing.conf"), [])
    binary = tmp_path / "binary.conf"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(click.UsageError, match=r"binary\.conf: cannot read it"):
        read_settings(str(binary), [])


def test_a_value_the_configuration_refuses_is_a_usage_error() -> None:
    settings = read_settings(None, ["journal_file_bytes_max=0"])
    with pytest.raises(click.UsageError, match="journal_file_bytes_max: must be a positive"):
        build_configs("/d", settings)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (
            ["bookie", "--data-dir", "{d}", "-o", "nope=1"],
            "no bookie, storage or autorecovery option",
        ),
        (["bookie", "--data-dir", "{d}", "-o", "journal_file_bytes_max=0"], "must be a positive"),
        (
            ["bookie", "--data-dir", "{d}", "--ledger-dir", "{d}/l", "--journal-dir", "{d}/l"],
            "journal_dirs: '{d}/l' is given twice (also in ledger_dirs)",
        ),
        (["sandbox", "--data-dir", "{d}", "-o", "ledger_dirs=/a,/a/"], "'/a/' is given twice"),
        (["sandbox", "--data-dir", "{d}", "-o", "port=5"], "port: set by the sandbox"),
        (["sandbox", "--data-dir", "{d}", "-o", "http_port=5"], "http_port: set by the sandbox"),
        (["bookie", "--data-dir", "{d}", "-o", "http_port=70000"], "http_port: 70000 is not a"),
        (["sandbox", "--data-dir", "{d}", "-o", "checkpoint_interval_ms=-1"], "must be a positive"),
    ],
)
def test_the_commands_say_it_in_one_line_and_exit_2(
    subprocesses: None, tmp_path: Path, command: list[str], message: str
) -> None:
    args = [arg.replace("{d}", str(tmp_path / "data")) for arg in command]
    message = message.replace("{d}", str(tmp_path / "data"))
    done = subprocess.run(
        [sys.executable, "-m", "bkeeper", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]
    assert not (tmp_path / "data").exists(), "nothing started, nothing written"


def test_docs_list_every_option_by_name() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs"
    for page, configs in (
        ("storage.md", (StorageConfig, BookieConfig)),
        ("autorecovery.md", (AutoRecoveryConfig,)),
    ):
        text = (docs / page).read_text()
        names = [name for name, (config, _kind) in SETTABLE.items() if config in configs]
        assert names, page
        assert [name for name in names if f"| `{name}` |" not in text] == [], page


def test_the_sandbox_gives_each_bookie_its_own_subdirectory_of_every_dir(tmp_path: Path) -> None:
    config = SandboxConfig(
        data_dir=tmp_path,
        ledger_dirs=(Path("/mnt/a"), Path("/mnt/b")),
        journal_dirs=(Path("/mnt/j"),),
    )
    command = Sandbox(config).bookie_command(1)
    flags = [pair for pair in itertools.pairwise(command) if pair[0].endswith("-dir")]
    assert flags == [
        ("--data-dir", str(tmp_path / "bookie-1")),
        ("--ledger-dir", "/mnt/a/bookie-1"),
        ("--ledger-dir", "/mnt/b/bookie-1"),
        ("--journal-dir", "/mnt/j/bookie-1"),
    ]
