"""Slowable fsyncs for fault injection: the control file's delay is applied before each sync
(and re-read when it changes), a bad control file means no delay, and the switch is off
unless the environment variable says exactly 1."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.storage.slow_sync import (
    CONTROL_NAME,
    ENV_VAR,
    SlowSyncFileSystem,
    set_sync_delay,
    slow_sync_filesystem,
)


def test_each_sync_waits_as_the_control_file_says_and_the_data_still_lands(
    tmp_path: Path,
) -> None:
    fs = SlowSyncFileSystem(str(tmp_path / CONTROL_NAME))
    f = fs.open_append(str(tmp_path / "journal"))
    f.write(b"abc")
    set_sync_delay(tmp_path, 150)
    started = time.monotonic()
    f.sync()
    assert time.monotonic() - started >= 0.15
    assert fs.delay_s() == 0.15
    set_sync_delay(tmp_path, 30)  # changed: read again
    assert fs.delay_s() == 0.03
    set_sync_delay(tmp_path, None)
    assert not (tmp_path / CONTROL_NAME).exists()
    assert fs.delay_s() == 0.0
    f.write(b"def")
    f.sync()
    f.close()
    assert (tmp_path / "journal").read_bytes() == b"abcdef"


@pytest.mark.parametrize("text", ["soon", "-5", "60001", ""])
def test_a_control_file_that_is_not_a_delay_means_no_delay(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / CONTROL_NAME).write_text(text)
    fs = SlowSyncFileSystem(str(tmp_path / CONTROL_NAME))
    assert fs.delay_s() == 0.0
    assert "not milliseconds within 0..60000: no delay" in caplog.text


def test_set_sync_delay_refuses_what_the_bookie_would_ignore(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"delay_ms: must be within 0\.\.60000, got 60001"):
        set_sync_delay(tmp_path, 60_001)
    assert not (tmp_path / CONTROL_NAME).exists()


def test_the_switch(tmp_path: Path) -> None:
    assert slow_sync_filesystem("", tmp_path) is None
    with pytest.raises(ConfigError, match=f"{ENV_VAR}: must be 1 or unset, got 'yes'"):
        slow_sync_filesystem("yes", tmp_path)
    fs = slow_sync_filesystem("1", tmp_path)
    assert isinstance(fs, SlowSyncFileSystem)
    assert fs.control_path == str(tmp_path / CONTROL_NAME)
