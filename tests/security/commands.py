"""Running the ``bkeeper`` command as a user would, with only the environment given."""

from __future__ import annotations

import os
import subprocess
import sys


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
