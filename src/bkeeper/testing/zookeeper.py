"""Run a standalone ZooKeeper server for tests, the ``bkeeper zookeeper`` command and sandboxes.

:class:`ZooKeeperServer` writes a ``zoo.cfg`` into its data directory, starts
``java ... org.apache.zookeeper.server.ZooKeeperServerMain`` bound to 127.0.0.1, waits until
the server says it serves requests (``srvr`` answers with its mode: ``ruok`` answers ``imok``
some 50 ms earlier, while a client that connects then is dropped, and ZooKeeper 3.9 may fail
its connection with a NullPointerException that left a test's client without a session for
10 s), and on :meth:`ZooKeeperServer.stop` sends SIGTERM
(SIGKILL after ``stop_timeout_s``) and reaps the process, so none is left behind.

The jars come from, in order: an explicit ZooKeeper home (``<home>/lib/*``), the jars bundled
in the installed pyspark package, or Debian's ``/usr/share/java/zookeeper*.jar``. The caller
passes the home (the CLI reads ``ZOOKEEPER_HOME``); this module reads no environment.
"""

from __future__ import annotations

import contextlib
import importlib.util
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from bkeeper.common.errors import ConfigError
from bkeeper.common.validate import check_port

__all__ = [
    "DEBIAN_JAVA_DIR",
    "ZooKeeperConfig",
    "ZooKeeperServer",
    "die_with_parent_thread",
    "find_java",
    "find_zookeeper_classpath",
    "free_port",
    "log4j2_properties",
    "port_free",
    "server_mode",
    "stop_server_process",
]

DEBIAN_JAVA_DIR = Path("/usr/share/java")
#: The most of a ``srvr`` answer read (a few hundred bytes in practice).
_SRVR_ANSWER_MAX = 64 * 1024

_MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
_HOW_TO_GET = (
    "install pyspark (`pip install pyspark`, it bundles the ZooKeeper jars) or a system "
    "ZooKeeper (set ZOOKEEPER_HOME, or `apt-get install zookeeper`), and a `java` runtime"
)
_LOG4J2 = """\
status = error
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p %c{1}: %m%n
rootLogger.level = {level}
rootLogger.appenderRef.console.ref = console
"""


@dataclass(frozen=True)
class ZooKeeperConfig:
    """One standalone server. ``port=0`` picks a free port. ``tick_time_ms`` sets the session
    timeout range the server grants: [2, 20] ticks."""

    data_dir: Path
    port: int = 2181
    host: str = "127.0.0.1"
    tick_time_ms: int = 2000
    start_timeout_s: float = 30.0
    stop_timeout_s: float = 10.0
    log_level: str = "WARN"
    zookeeper_home: Path | None = None
    java: str = "java"

    def __post_init__(self) -> None:
        check_port("port", self.port)
        if self.tick_time_ms < 1 or self.start_timeout_s <= 0 or self.stop_timeout_s <= 0:
            raise ConfigError("tick_time_ms, start_timeout_s and stop_timeout_s must be > 0")


def find_java(java: str = "java") -> str:
    """The path of the ``java`` executable, or ``ConfigError`` saying how to get one."""
    path = shutil.which(java)
    if path is None:
        raise ConfigError(f"ZooKeeper cannot start: `{java}` is not on PATH; {_HOW_TO_GET}")
    return path


def find_zookeeper_classpath(zookeeper_home: Path | None = None) -> str:
    """The Java class path holding ZooKeeper, or ``ConfigError`` naming both ways to get it."""
    if zookeeper_home is not None:
        if not any((zookeeper_home / "lib").glob("zookeeper-*.jar")):
            raise ConfigError(f"ZooKeeper home {zookeeper_home} has no lib/zookeeper-*.jar")
        return f"{zookeeper_home / 'lib'}/*"
    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin is not None:
        jars = Path(spec.origin).parent / "jars"
        if any(jars.glob("zookeeper-*.jar")):
            return f"{jars}/*"
    if any(DEBIAN_JAVA_DIR.glob("zookeeper*.jar")):
        return f"{DEBIAN_JAVA_DIR}/*"
    raise ConfigError(f"ZooKeeper jars not found: {_HOW_TO_GET}")


#: The lowest port :func:`free_port` picks (above the well-known and registered services).
FREE_PORT_LOW = 10_000
#: Ports left free under the kernel's ephemeral range (a caller may use a few consecutive
#: ones: a sandbox's bookies at ``bookie_port_base + i``).
FREE_PORT_MARGIN = 64
#: Random ports :func:`free_port` tries before it takes one of the ephemeral range.
FREE_PORT_ATTEMPTS_MAX = 100
#: Linux's ephemeral range ("low high"), which bind to port 0 and connect() draw from.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")

_port_rng = random.SystemRandom()  # not the random module's: tests reseed it alike in every worker


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago on ``host``, picked below the kernel's ephemeral
    range when it can be read: a port of that range is what any process binding port 0 or
    connecting out gets, so one picked there (as bind to port 0 picks) could be taken by
    another process in the seconds before the caller's server binds it (a sandbox's bookie,
    started after ZooKeeper, found its admin port taken under a parallel test suite)."""
    ephemeral_low = _ephemeral_low()
    if ephemeral_low is not None and ephemeral_low - FREE_PORT_MARGIN > FREE_PORT_LOW:
        for _ in range(FREE_PORT_ATTEMPTS_MAX):
            port = _port_rng.randrange(FREE_PORT_LOW, ephemeral_low - FREE_PORT_MARGIN)
            with socket.socket() as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def _ephemeral_low() -> int | None:
    """The first port of the kernel's ephemeral range; None where it cannot be read."""
    try:
        return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def port_free(host: str, port: int) -> bool:
    """True if a server could listen on ``host:port`` now (bound as servers bind)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def stop_server_process(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """SIGCONT, SIGTERM, then SIGKILL after ``timeout_s``, and reap; a no-op when it has
    exited already."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGCONT)  # a stopped (SIGSTOP) server takes no SIGTERM
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class ZooKeeperServer:
    """A standalone ZooKeeper child process; a context manager (``with`` starts and stops)."""

    def __init__(self, config: ZooKeeperConfig) -> None:
        self.config = config
        self.port = config.port or free_port(config.host)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.config.host}:{self.port}"

    def uri(self, root: str = "/ledgers") -> str:
        """The metadata service URI of this server with ledgers under ``root``."""
        return f"zk://{self.connect_string}{root}"

    @property
    def log_path(self) -> Path:
        return self.config.data_dir / "zookeeper.log"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Start the server and wait until it serves requests; ``ConfigError`` if it cannot."""
        java = find_java(self.config.java)
        classpath = find_zookeeper_classpath(self.config.zookeeper_home)
        if not port_free(self.config.host, self.port):
            raise ConfigError(f"ZooKeeper port {self.connect_string} is in use by another process")
        config_file = self._write_config()
        command = [
            java,
            "-Dzookeeper.admin.enableServer=false",
            f"-Dlog4j2.configurationFile=file:{self.config.data_dir / 'log4j2.properties'}",
            "-cp",
            classpath,
            _MAIN_CLASS,
            str(config_file),
        ]
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                # Only prctl() runs in the child, and only when forked from the main thread.
                preexec_fn=die_with_parent_thread(),  # noqa: PLW1509
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the server (SIGCONT, SIGTERM, then SIGKILL) and reap it; a no-op when not
        running."""
        process, self._process = self._process, None
        if process is not None:
            stop_server_process(process, self.config.stop_timeout_s)

    def wait(self) -> int:
        """Block until the server process exits; its exit status."""
        if self._process is None:
            return 0
        return self._process.wait()

    def wait_nowait(self) -> int | None:
        """The server process's exit status, or None while it runs (or was never started)."""
        return None if self._process is None else self._process.poll()

    def is_ready(self) -> bool:
        """True if the server serves requests: ``srvr`` answers with its mode (before, it
        says "This ZooKeeper instance is not currently serving requests")."""
        return server_mode(self.config.host, self.port) is not None

    def __enter__(self) -> ZooKeeperServer:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _write_config(self) -> Path:
        directory = self.config.data_dir
        (directory / "data").mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={self.config.tick_time_ms}",
            f"dataDir={directory / 'data'}",
            f"clientPort={self.port}",
            f"clientPortAddress={self.config.host}",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,mntr",
        ]
        config_file = directory / "zoo.cfg"
        config_file.write_text("\n".join(lines) + "\n")
        (directory / "log4j2.properties").write_text(log4j2_properties(self.config.log_level))
        return config_file

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.config.start_timeout_s
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                raise ConfigError(f"ZooKeeper exited at start; see {self.log_path}")
            if self.is_ready() and self._process.poll() is None:
                return  # answered, and by this process (it would have exited on a taken port)
            time.sleep(0.05)
        raise ConfigError(
            f"ZooKeeper did not answer on {self.connect_string} within "
            f"{self.config.start_timeout_s:g} s; see {self.log_path}"
        )


def server_mode(host: str, port: int, timeout_s: float = 1.0) -> str | None:
    """What the ZooKeeper server at ``host:port`` says its mode is in answer to ``srvr``
    (``standalone``, ``leader``, ``follower``, ``observer``); None when it does not answer,
    or answers that it does not serve requests (yet: while it starts or elects a leader)."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(b"srvr")
            answer = b""
            while len(answer) < _SRVR_ANSWER_MAX and (chunk := sock.recv(4096)):
                answer += chunk
    except OSError:
        return None
    for line in answer.decode(errors="replace").splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ").strip()
    return None


def log4j2_properties(level: str) -> str:
    """A ZooKeeper server's ``log4j2.properties``: to its standard output, at ``level``."""
    return _LOG4J2.replace("{level}", level.lower())


def die_with_parent_thread() -> Callable[[], None] | None:
    """On Linux, a ``preexec_fn`` so the server gets SIGTERM if this process dies.

    The kernel signals when the *thread* that forked exits, so it is used only from the main
    thread (whose exit is the process's).
    """
    if sys.platform != "linux" or threading.current_thread() is not threading.main_thread():
        return None

    def set_parent_death_signal() -> None:
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return set_parent_death_signal
