"""Running ``bkeeper`` as a user does, for the end-to-end tests."""

from __future__ import annotations

import subprocess
import sys


def bkeeper(uri: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m bkeeper ARGS --metadata URI``, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "bkeeper", *args, "--metadata", uri],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
