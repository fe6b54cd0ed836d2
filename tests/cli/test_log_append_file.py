"""``bkeeper log append --file``: what is refused before any connection (no cluster needed)."""

from __future__ import annotations

from click.testing import CliRunner

from bkeeper.cli.log import log
from bkeeper.namedlog.core import RECORD_BYTES_MAX

# Nothing listens there: a command that got as far as connecting would fail differently.
NOWHERE = "zk://127.0.0.1:1/nowhere"


def test_a_file_larger_than_a_record_may_be_is_refused_before_anything_is_appended(tmp_path):
    path = tmp_path / "huge.bin"
    with open(path, "wb") as out:
        out.truncate(RECORD_BYTES_MAX + 1)  # sparse: no 65 MiB written
    result = CliRunner().invoke(log, ["append", "big", "--file", str(path), "--metadata", NOWHERE])
    assert result.exit_code == 1
    assert f"more than {RECORD_BYTES_MAX} bytes" in result.output
    assert "RECORD_BYTES_MAX); nothing appended" in result.output


def test_records_and_a_file_together_are_a_usage_error(tmp_path):
    path = tmp_path / "one.bin"
    path.write_bytes(b"x")
    result = CliRunner().invoke(
        log, ["append", "big", "a", "--file", str(path), "--metadata", NOWHERE]
    )
    assert result.exit_code == 2 and "give RECORDS or --file, not both" in result.output


def test_a_chunk_size_out_of_bounds_is_a_usage_error():
    result = CliRunner().invoke(
        log, ["append", "big", "a", "--chunk-bytes", "1000", "--metadata", NOWHERE]
    )
    assert result.exit_code == 2 and "--chunk-bytes" in result.output
