"""A ledger password never goes on a command line (``ps`` shows it to every user): ``shell
readledger`` and ``bench read`` take it from ``--password-file`` or
``$BKEEPER_LEDGER_PASSWORD``, and refuse ``--password`` saying so."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from bkeeper.cli._errors import CommandError
from bkeeper.cli._ledger_password import LEDGER_PASSWORD_ENV, ledger_password
from bkeeper.cli.bench import bench
from bkeeper.cli.shell import shell

SENTINEL = "pw-SENTINEL-7f3a"


@pytest.fixture(autouse=True)
def _no_env_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LEDGER_PASSWORD_ENV, raising=False)


def test_password_from_file_less_its_newline(tmp_path: Path) -> None:
    for content, expected in [
        (b"secret\n", b"secret"),
        (b"secret\r\n", b"secret"),
        (b"secret", b"secret"),
        (b" two words \n", b" two words "),
        (b"\xff\x00bin", b"\xff\x00bin"),
        (b"", b""),
    ]:
        path = tmp_path / "pw"
        path.write_bytes(content)
        assert ledger_password(str(path)) == expected


def test_password_from_env_or_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ledger_password(None) == b""
    assert ledger_password(None, default=b"bench") == b"bench"
    monkeypatch.setenv(LEDGER_PASSWORD_ENV, SENTINEL)
    assert ledger_password(None) == SENTINEL.encode()
    assert ledger_password(None, default=b"bench") == SENTINEL.encode()


def test_both_or_unreadable_is_one_line_without_the_password(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "pw"
    path.write_text(SENTINEL)
    monkeypatch.setenv(LEDGER_PASSWORD_ENV, SENTINEL)
    with pytest.raises(CommandError) as both:
        ledger_password(str(path))
    assert "given twice" in both.value.message and SENTINEL not in both.value.message
    monkeypatch.delenv(LEDGER_PASSWORD_ENV)
    with pytest.raises(CommandError) as missing:
        ledger_password(str(tmp_path / "absent"))
    assert missing.value.message == (
        f"--password-file {tmp_path / 'absent'}: cannot read it (No such file or directory)"
    )
    with pytest.raises(CommandError, match="cannot read it"):
        ledger_password(str(tmp_path))  # a directory
    path.write_bytes(b"x" * 5000)
    with pytest.raises(CommandError, match="longer than 4096 bytes"):
        ledger_password(str(path))


@pytest.mark.parametrize(
    ("group", "args"),
    [(shell, ["readledger", "1"]), (bench, ["read", "--ledger", "1"])],
)
def test_password_option_is_refused_by_name(group: click.Group, args: list[str]) -> None:
    result = CliRunner().invoke(group, [*args, "--password", SENTINEL, "--metadata", "memory://x"])
    assert result.exit_code == 2
    assert "--password is not taken: a password on the command line shows in ps" in (result.output)
    assert SENTINEL not in result.output
    shown = CliRunner().invoke(group, [*args, "--help"])
    assert "--password-file" in shown.output and LEDGER_PASSWORD_ENV in shown.output
