"""A stop (SIGTERM, Ctrl-C) that lands while ``mounted_tmpfs`` mounts leaves no mount behind:
the mount may have been made before the interrupt was raised."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bkeeper.testing import tmpfs
from bkeeper.testing.tmpfs import mounted_tmpfs

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
    pytest.mark.usefixtures("subprocesses"),
]


def test_an_interrupt_right_after_the_mount_unmounts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = subprocess.run

    def run(*args, **kwargs):  # the mount is made, then the stop lands
        result = real(*args, **kwargs)
        if args and args[0][0] == "mount":
            raise KeyboardInterrupt("signal 15")
        return result

    monkeypatch.setattr(tmpfs.subprocess, "run", run)
    where = tmp_path / "disk"
    with pytest.raises(KeyboardInterrupt), mounted_tmpfs(where, 1024 * 1024):
        pytest.fail("not reached: the mount was interrupted")
    assert not os.path.ismount(where)
