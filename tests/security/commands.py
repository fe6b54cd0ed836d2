"""A small secure sandbox, and the ``bkeeper`` command run as a user would, with only the
environment given."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from bkeeper.testing.benchmarks import free_port, free_port_range
from bkeeper.testing.sandbox import SandboxConfig


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``bkeeper ARGS`` with ``env`` and none of the ``BKEEPER_*`` variables of the tests'
    own environment (each case chooses which credentials the command has)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BKEEPER_")}
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def secure_sandbox_config(data_dir: Path) -> SandboxConfig:
    """``bkeeper sandbox --secure`` with 3 bookies on free ports, without auto-recovery."""
    return SandboxConfig(
        data_dir=data_dir,
        bookies=3,
        zookeeper_port=free_port(),
        bookie_port_base=free_port_range(3),
        autorecovery=False,
        secure=True,
    )
