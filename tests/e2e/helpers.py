"""Running ``bkeeper`` as a user does, for the end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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


def processes_mentioning(text: str) -> list[int]:
    """The pids of processes (not this one) whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found
