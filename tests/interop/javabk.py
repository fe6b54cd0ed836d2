"""Java BookKeeper 4.17 (``../shared/javabk`` from the repository root) as a test peer: find
it, and run its ``BookieShell`` against a bkeeper cluster, its log lines parsed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OPTIONAL_PEER_MISSING", "JavaBookKeeper", "ShellRun", "find_javabk"]

#: In a skip's reason: an optional test peer is not on this machine (Java BookKeeper's build,
#: which no install step provides). tests/conftest.py keeps such a skip a skip under CI.
OPTIONAL_PEER_MISSING = "optional test peer missing:"

#: Overrides where the Java build is looked for.
JAVABK_ENV = "BKEEPER_JAVABK"

_JAVA_OPTIONS = (
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Djava.net.preferIPv4Stack=true",
    "-Xms64m", "-Xmx256m",
)  # fmt: skip
# ``log4j2.cli.xml`` prints ``HH:mm:ss,SSS LEVEL message``.
_LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z ]{5}) (?P<message>.*)$")
_SHELL = "org.apache.bookkeeper.bookie.BookieShell"


def _repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def _candidates() -> list[Path]:
    """Where the build may be: ``$BKEEPER_JAVABK``, then ``../shared/javabk`` from this
    checkout, then from the main checkout of which this one is a git worktree."""
    found: list[Path] = []
    if override := os.environ.get(JAVABK_ENV):
        found.append(Path(override))
    root = _repo_root()
    found.append(root.parent / "shared" / "javabk")
    git = root / ".git"
    if git.is_file():  # a worktree: ``gitdir: <main>/.git/worktrees/<name>``
        text = git.read_text().strip()
        if text.startswith("gitdir:"):
            main = Path(text.partition(":")[2].strip()).resolve().parents[2]
            found.append(main.parent / "shared" / "javabk")
    return list(dict.fromkeys(found))


def find_javabk() -> tuple[JavaBookKeeper | None, str]:
    """The Java build and a ``java`` to run it, or None and why not."""
    java = shutil.which("java")
    if java is None:
        return None, "no `java` on PATH"
    for home in _candidates():
        if (home / "jars").is_dir() and any((home / "jars").glob("bookkeeper-server-*.jar")):
            return JavaBookKeeper(home, java), ""
    where = ", ".join(str(path) for path in _candidates())
    return None, (
        f"{OPTIONAL_PEER_MISSING} Java BookKeeper not found (looked in {where}; set ${JAVABK_ENV})"
    )


@dataclass(frozen=True)
class ShellRun:
    returncode: int
    messages: list[str]  # INFO messages, in order, without time and level (tabs kept)
    output: str  # everything, for assertion messages

    def after(self, marker: str) -> list[str]:
        """The messages after the last one starting with ``marker`` (connection chatter)."""
        starts = [i for i, line in enumerate(self.messages) if line.startswith(marker)]
        return self.messages[starts[-1] + 1 :] if starts else list(self.messages)


@dataclass(frozen=True)
class JavaBookKeeper:
    home: Path
    java: str

    def shell(self, metadata_uri: str, conf_dir: Path, *args: str) -> ShellRun:
        """``BookieShell -conf C ARGS`` on the cluster at ``metadata_uri``."""
        conf = conf_dir / "bk_client.conf"
        conf.write_text(f"metadataServiceUri={metadata_uri}\n")
        command = [
            self.java, *_JAVA_OPTIONS,
            f"-Dlog4j.configurationFile={self.home / 'conf' / 'log4j2.cli.xml'}",
            f"-Dbookkeeper.cli.log.dir={conf_dir}",
            "-cp", f"{self.home / 'jars'}/*:{self.home / 'lib'}/*",
            _SHELL, "-conf", str(conf), *args,
        ]  # fmt: skip
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=120, check=False, cwd=conf_dir
        )
        messages = []
        for line in done.stdout.splitlines():
            match = _LOG_LINE.match(line)
            if match and match["level"].strip() == "INFO":
                messages.append(match["message"])
        return ShellRun(done.returncode, messages, done.stdout + done.stderr)
