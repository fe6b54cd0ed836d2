"""Java BookKeeper 4.17 (``../shared/javabk`` from the repository root) as a test peer: find
it; run its ``BookieShell`` against a cluster, its log lines parsed; start its bookies
(:class:`JavaBookie`); and drive its client through ``java/InteropClient.java``
(:class:`JavaClient`, one JVM answering one command line at a time)."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.testing.zookeeper import free_port
from bkeeper.wire.digest import DigestType

__all__ = [
    "OPTIONAL_PEER_MISSING",
    "JavaBookKeeper",
    "JavaBookie",
    "JavaClient",
    "JavaError",
    "ShellRun",
    "entries_sha256",
    "find_javabk",
    "java_rendering",
    "listed_bookies",
    "listed_metadata",
    "payload",
]

#: In a skip's reason: an optional test peer is not on this machine (Java BookKeeper's build,
#: which no install step provides). tests/conftest.py keeps such a skip a skip under CI.
OPTIONAL_PEER_MISSING = "optional test peer missing:"

#: Overrides where the Java build is looked for.
JAVABK_ENV = "BKEEPER_JAVABK"
#: Overrides where BouncyCastle's provider jar is looked for.
BOUNCYCASTLE_ENV = "BKEEPER_BCPROV"
_BOUNCYCASTLE_CANDIDATES = (Path("/usr/share/java/bcprov.jar"),)
#: Jars of BouncyCastle's PKIX half, looked for beside the provider's.
_BOUNCYCASTLE_PKIX = ("bcpkix.jar", "bcutil.jar")

_JAVA_OPTIONS = (
    "--add-opens", "java.base/java.io=ALL-UNNAMED",
    "--add-opens", "java.base/java.nio=ALL-UNNAMED",
    "--add-opens", "java.base/jdk.internal.misc=ALL-UNNAMED",
    "--add-opens", "java.base/java.util.zip=ALL-UNNAMED",
    "-Dio.netty.tryReflectionSetAccessible=true",
    "-Djava.net.preferIPv4Stack=true",
)  # fmt: skip
#: Tools that run a moment (the shell, the client): C1 only starts faster.
_TOOL_OPTIONS = ("-Xms64m", "-Xmx256m", "-XX:TieredStopAtLevel=1")
_BOOKIE_OPTIONS = ("-Xms256m", "-Xmx256m", "-XX:MaxDirectMemorySize=256m")
# ``log4j2.cli.xml`` prints ``HH:mm:ss,SSS LEVEL message``.
_LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d,\d{3} (?P<level>[A-Z ]{5}) (?P<message>.*)$")
_SHELL = "org.apache.bookkeeper.bookie.BookieShell"
_BOOKIE = "org.apache.bookkeeper.server.Main"
_AGENT = Path(__file__).resolve().parent / "java" / "InteropClient.java"
#: How long a Java bookie may take to register (the README measured 3-8 s on an idle machine).
BOOKIE_START_TIMEOUT_S = 90.0
#: How long one command of the Java client may take.
CLIENT_COMMAND_TIMEOUT_S = 120.0
#: What starts the answers of ``InteropClient.java`` (its logger writes to stdout too).
_ANSWER = "@@ "


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


def find_bouncycastle() -> Path | None:
    """BouncyCastle's provider jar (``$BKEEPER_BCPROV``, else Debian's ``libbcprov-java``):
    Java BookKeeper's ``TLSContextFactory`` fails to load without it (``ClassNotFoundException:
    org.bouncycastle.jce.provider.BouncyCastleProvider``), and the build in ../shared/javabk
    does not ship it."""
    override = os.environ.get(BOUNCYCASTLE_ENV)
    for path in ([Path(override)] if override else []) + list(_BOUNCYCASTLE_CANDIDATES):
        if path.is_file():
            return path
    return None


def find_javabk() -> tuple[JavaBookKeeper | None, str]:
    """The Java build and a ``java`` to run it, or None and why not."""
    java = shutil.which("java")
    if java is None:
        return None, "no `java` on PATH"
    for home in _candidates():
        if (home / "jars").is_dir() and any((home / "jars").glob("bookkeeper-server-*.jar")):
            return JavaBookKeeper(home, java, find_bouncycastle()), ""
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
    #: BouncyCastle's provider jar, which Java BookKeeper's TLS needs (None: not found).
    bouncycastle: Path | None = None

    def shell(self, metadata_uri: str, conf_dir: Path, *args: str) -> ShellRun:
        """``BookieShell -conf C ARGS`` on the cluster at ``metadata_uri``."""
        conf = conf_dir / "bk_client.conf"
        conf.write_text(f"metadataServiceUri={metadata_uri}\n")
        command = [
            *self.command(_TOOL_OPTIONS, "log4j2.cli.xml", conf_dir),
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

    @property
    def classpath(self) -> str:
        extra = ""
        if self.bouncycastle is not None:
            # The provider, and beside it (Debian's libbcpkix-java) its PEM/PKIX half.
            jars = [self.bouncycastle]
            jars += [self.bouncycastle.parent / name for name in _BOUNCYCASTLE_PKIX]
            extra = "".join(f":{jar}" for jar in jars if jar.is_file())
        return f"{self.home / 'jars'}/*:{self.home / 'lib'}/*{extra}"

    def tls_missing(self) -> str | None:
        """Why Java BookKeeper's TLS cannot run here, or None."""
        if self.bouncycastle is not None:
            return None
        where = ", ".join(str(path) for path in _BOUNCYCASTLE_CANDIDATES)
        # Not an optional peer: the Java build is here, and scripts/test.sh installs the jar
        # (Debian's package), so under CI this skip is a failure (issue 37: TLS interop runs).
        return (
            f"BouncyCastle's provider jar, which Java BookKeeper's TLSContextFactory loads, "
            f"not found (looked in ${BOUNCYCASTLE_ENV}, {where}; "
            "Debian: apt-get install libbcprov-java libbcpkix-java)"
        )

    def command(self, heap: Iterable[str], log_config: str, work_dir: Path) -> list[str]:
        """``java`` with the options every JVM of the build needs, up to the main class.
        Its temp dir is ``work_dir``, where BookKeeper and Netty unpack their native
        libraries (a JVM killed with SIGKILL would leave them in the system's)."""
        return [
            self.java, *_JAVA_OPTIONS, *heap,
            f"-Dlog4j.configurationFile={self.home / 'conf' / log_config}",
            f"-Djava.io.tmpdir={work_dir}",
            # Where log4j2.xml and log4j2.cli.xml make their log files (even if unused).
            f"-Dbookkeeper.log.dir={work_dir}",
            f"-Dbookkeeper.cli.log.dir={work_dir}",
            "-cp", self.classpath,
        ]  # fmt: skip

    def bookie(
        self, metadata_uri: str, data_dir: Path, port: int = 0, **settings: str
    ) -> JavaBookie:
        """A Java bookie process for the cluster at ``metadata_uri``, on ``port`` (0: a port
        free a moment ago), its
        data and log under ``data_dir`` (``settings``: more ``bk_server.conf`` lines). It is
        started, not yet registered: see :meth:`JavaBookie.bookie_id`."""
        data_dir.mkdir(parents=True, exist_ok=True)
        port = port or free_port()
        lines = {
            "bookiePort": str(port),
            "listeningInterface": "lo",
            "advertisedAddress": "127.0.0.1",
            "allowLoopback": "true",
            "metadataServiceUri": metadata_uri,
            "journalDirectories": str(data_dir / "journal"),
            "ledgerDirectories": str(data_dir / "ledgers"),
            "httpServerEnabled": "false",
            "autoRecoveryDaemonEnabled": "false",
            "statsProviderClass": "org.apache.bookkeeper.stats.NullStatsProvider",
            **settings,
        }
        conf = data_dir / "bk_server.conf"
        conf.write_text("".join(f"{key}={value}\n" for key, value in lines.items()))
        log_path = data_dir / "bookie.log"
        command = [
            *self.command(_BOOKIE_OPTIONS, "log4j2.xml", data_dir), _BOOKIE, "--conf", str(conf),
        ]  # fmt: skip
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                cwd=data_dir, preexec_fn=_die_with_parent,  # noqa: PLW1509
            )  # fmt: skip
        return JavaBookie(port, proc, log_path)

    def client(self, work_dir: Path) -> JavaClient:
        """Java's client behind ``java/InteropClient.java``, ready for commands."""
        command = [*self.command(_TOOL_OPTIONS, "log4j2.cli.xml", work_dir), str(_AGENT)]
        return JavaClient(command, work_dir)


def _die_with_parent() -> None:
    """In the child: SIGTERM when the thread that started it ends (a JVM left behind by a
    test run that died holds 256 MiB)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class JavaBookie:
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @property
    def bookie_id(self) -> str:
        return f"127.0.0.1:{self.port}"

    def check_running(self) -> None:
        """Raises naming the bookie's last log line if it exited, or if its main thread died
        (the JVM may stay up, held by other threads, never serving)."""
        if self.proc.poll() is None:
            text = self.log_path.read_text(errors="replace")
            if (died := text.find('Exception in thread "main"')) >= 0:
                cause = [line for line in text[died:].splitlines() if line.startswith("Caused by")]
                raise AssertionError(
                    f"Java bookie {self.bookie_id}: its main thread died: "
                    f"{cause[-1] if cause else text[died:].splitlines()[0]} (log: {self.log_path})"
                )
        else:
            lines = self.log_path.read_text(errors="replace").strip().splitlines()
            last = lines[-1] if lines else "no output"
            raise AssertionError(
                f"Java bookie {self.bookie_id} exited with code {self.proc.returncode}: "
                f"{last} (log: {self.log_path})"
            )

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        self.proc.wait(60)


class JavaError(Exception):
    """A command of the Java client failed: ``kind`` is the Java exception's class,
    ``code`` its ``BKException`` code (0 for others)."""

    def __init__(self, kind: str, code: int, message: str) -> None:
        super().__init__(f"{kind} ({code}): {message}")
        self.kind = kind
        self.code = code


class JavaClient:
    """One JVM running Java BookKeeper's client; :meth:`ask` sends a command line of
    ``InteropClient.java`` and returns what follows its ``OK``, or raises :class:`JavaError`.
    Safe to call from several threads (one command at a time)."""

    def __init__(self, command: list[str], work_dir: Path) -> None:
        work_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = work_dir / "java-client.log"
        with self.log_path.open("ab") as log:
            self._proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                cwd=work_dir, text=True, bufsize=1, preexec_fn=_die_with_parent,  # noqa: PLW1509
            )  # fmt: skip
        self._lock = threading.Lock()
        self._expect("READY")

    def _read_line(self) -> str:
        assert self._proc.stdout is not None
        # A timer kills a client that hangs, so the read below ends.
        timer = threading.Timer(CLIENT_COMMAND_TIMEOUT_S, self._proc.kill)
        timer.start()
        try:
            while (line := self._proc.stdout.readline()) and not line.startswith(_ANSWER):
                with self.log_path.open("a") as log:
                    log.write(line)  # the logger's lines, on stdout as well
        finally:
            timer.cancel()
        if not line:
            raise AssertionError(
                f"the Java client exited ({self._proc.poll()}); see {self.log_path}: "
                + self.log_path.read_text(errors="replace")[-2000:]
            )
        return line.removeprefix(_ANSWER).rstrip("\n")

    def _expect(self, wanted: str) -> None:
        line = self._read_line()
        if line != wanted:
            raise AssertionError(f"the Java client said {line!r}, not {wanted!r}")

    def ask(self, *words: object) -> str:
        with self._lock:
            assert self._proc.stdin is not None
            self._proc.stdin.write(" ".join(str(word) for word in words) + "\n")
            self._proc.stdin.flush()
            line = self._read_line()
        status, _, rest = line.partition(" ")
        if status == "OK":
            return rest
        if status != "ERR":
            raise AssertionError(f"the Java client said {line!r} to {words}")
        kind, code, message = [*rest.split(" ", 2), "", ""][:3]
        raise JavaError(kind, int(code), message)

    def read(
        self, client: str, ledger_id: int, digest: str, password: str, recover: bool
    ) -> dict[str, str]:
        """``read``: ``{"lac": ..., "closed": ..., "sha256": ...}``."""
        answer = self.ask(
            "read", client, ledger_id, digest, password, "recover" if recover else "norecover"
        )
        return dict(word.split("=", 1) for word in answer.split())

    def close(self) -> None:
        if self._proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self._proc.stdin is not None
                self._proc.stdin.write("quit\n")
                self._proc.stdin.flush()
            try:
                self._proc.wait(30)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            if stream is not None:
                stream.close()


def payload(ledger_id: int, entry_id: int, size: int) -> bytes:
    """What ``InteropClient.java`` writes as entry ``entry_id`` of ``ledger_id``."""
    unit = f"L{ledger_id}E{entry_id}.".encode()
    return (unit * (size // len(unit) + 1))[:size]


def entries_sha256(entries: Iterable[bytes]) -> str:
    """What ``InteropClient.java``'s ``read`` reports for these entries, in order."""
    sha = hashlib.sha256()
    for data in entries:
        sha.update(len(data).to_bytes(4, "big"))
        sha.update(data)
    return sha.hexdigest()


def java_rendering(meta: LedgerMetadata) -> str:
    """How Java's shell prints ``meta`` (``LedgerMetadata.toString``; no custom metadata)."""
    assert not meta.custom_metadata, "Java prints custom metadata values as byte[] addresses"
    ensembles = ", ".join(
        f"{first}=[{', '.join(ensemble)}]" for first, ensemble in sorted(meta.segments.items())
    )
    password = base64.b64encode(meta.password).decode()
    digest = "MAC" if meta.digest_type is DigestType.HMAC else meta.digest_type.name
    return (
        f"LedgerMetadata{{formatVersion={meta.format_version}, ensembleSize={meta.ensemble_size}, "
        f"writeQuorumSize={meta.write_quorum}, ackQuorumSize={meta.ack_quorum}, "
        f"state={meta.state.name}, length={meta.length}, lastEntryId={meta.last_entry_id}, "
        f"digestType={digest}, password=base64:{password}, ensembles={{{ensembles}}}, "
        "customMetadata={}}"
    )


def listed_metadata(run: ShellRun) -> dict[int, str]:
    """Ledger id -> ``LedgerMetadata{...}`` as ``listledgers -m`` / ``ledgermetadata`` print."""
    found: dict[int, str] = {}
    current: int | None = None
    for line in run.messages:
        if line.startswith("ledgerID: "):
            current = int(line.removeprefix("ledgerID: "))
        elif line.startswith("LedgerMetadata{"):
            assert current is not None and current not in found, run.output
            found[current] = line
    return found


_LISTED_BOOKIE = re.compile(r"^BookieID:(\S+), IP:(\S+), Port:(\d+), Hostname:\S+$")


def listed_bookies(run: ShellRun, heading: str) -> set[str]:
    """The bookie ids ``listbookies`` printed under ``heading``, each checked to be the
    ``IP:Port`` printed beside it."""
    found = set()
    for line in run.after(heading):
        match = _LISTED_BOOKIE.match(line)
        if match is None:
            break
        assert match[1] == f"{match[2]}:{match[3]}", line
        found.add(match[1])
    return found
