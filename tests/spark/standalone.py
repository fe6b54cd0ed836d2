"""A Spark standalone cluster for tests: a master and two workers, each its own JVM started
from pyspark's own ``bin/spark-class``, on 127.0.0.1 and free ports.

Each worker offers 1 core, so an application gets two executors (separate JVMs, each with its
own Python workers) and its tasks are spread over both. Everything they write goes under
``root`` (the master's and workers' logs, the workers' work dirs where executors run, their
local dirs, the JVMs' ``java.io.tmpdir``). The master's REST submission server is off (it
would bind the fixed port 6066). Each daemon runs in a process group of its own; executors and
their Python workers are its children, so :meth:`StandaloneCluster.stop` ends them all:
SIGTERM to each group, then SIGKILL to whatever is left, also when a test failed.

    with StandaloneCluster(tmp_path) as cluster:   # the master is up
        spark = local_session(cluster.master_url, ...)  # while the workers register
        cluster.wait_workers()
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import pyspark

from bkeeper.testing.benchmarks.processes import free_port

#: Cores and memory each worker offers: one core per worker, so one executor per worker.
WORKER_CORES = 1
WORKER_MEMORY = "1g"
#: Heap of the master and worker daemons (they only schedule).
DAEMON_MEMORY = "256m"
#: How long the master and both workers may take to be up and registered (2 loaded cores).
START_TIMEOUT_S = 90.0
#: How long the daemons get to exit after SIGTERM before they are killed.
STOP_TIMEOUT_S = 15.0

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
HOST = "127.0.0.1"


class StandaloneCluster:
    """A master and ``workers`` workers, started by ``__enter__`` (which waits until the
    master answers: the workers register meanwhile, see :meth:`wait_workers`) and stopped by
    ``__exit__``."""

    def __init__(self, root: Path, workers: int = 2) -> None:
        self.root = root
        self.workers = workers
        self.master_port = free_port()
        self.master_ui_port = free_port()
        self.master_url = f"spark://{HOST}:{self.master_port}"
        self.procs: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def work_dir(self, index: int) -> Path:
        """Where worker ``index`` runs its executors (``<work dir>/<app id>/<executor id>``)."""
        return self.root / f"worker-{index}" / "work"

    def __enter__(self) -> StandaloneCluster:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        properties = self.root / "spark-daemons.conf"
        properties.write_text("spark.master.rest.enabled false\n")
        self._spawn(
            "master",
            [MASTER_CLASS, "--host", HOST, "--port", str(self.master_port),
             "--webui-port", str(self.master_ui_port), "--properties-file", str(properties)],
            self.root / "master",
        )  # fmt: skip
        for index in range(self.workers):
            home = self.root / f"worker-{index}"
            self.work_dir(index).mkdir(parents=True, exist_ok=True)
            self._spawn(
                f"worker-{index}",
                [WORKER_CLASS, "--host", HOST, "--port", str(free_port()),
                 "--webui-port", str(free_port()), "--cores", str(WORKER_CORES),
                 "--memory", WORKER_MEMORY, "--work-dir", str(self.work_dir(index)),
                 "--properties-file", str(properties), self.master_url],
                home,
            )  # fmt: skip
        self._wait(lambda status: True, "the Spark master did not answer")

    def _spawn(self, name: str, args: list[str], home: Path) -> None:
        temp = home / "tmp"
        local = home / "local"
        temp.mkdir(parents=True, exist_ok=True)
        local.mkdir(parents=True, exist_ok=True)
        java_options = os.environ.get("JAVA_TOOL_OPTIONS", "")
        env = {
            **os.environ,
            "SPARK_LOCAL_IP": HOST,
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "SPARK_LOCAL_DIRS": str(local),  # executors' block manager and shuffle files
            "SPARK_LOG_DIR": str(home),
            "TMPDIR": str(temp),
            "JAVA_TOOL_OPTIONS": f"{java_options} -Djava.io.tmpdir={temp} -XX:-UsePerfData".strip(),
        }
        log = home / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [str(SPARK_CLASS), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: executors and workers too
                env=env,
            )
        self.procs.append(proc)
        self.logs.append(log)

    def status(self) -> dict[str, object]:
        """The master's JSON status (workers, applications)."""
        url = f"http://{HOST}:{self.master_ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            status: dict[str, object] = json.load(response)
            return status

    def wait_workers(self) -> None:
        """Until every worker registered with the master."""

        def registered(status: dict[str, object]) -> bool:
            return int(str(status.get("aliveworkers", 0))) >= self.workers

        self._wait(registered, f"not all {self.workers} Spark workers registered")

    def _wait(self, done: Callable[[dict[str, object]], bool], failure: str) -> None:
        """Until ``done`` holds for the master's status; a daemon that exited meanwhile, or
        ``START_TIMEOUT_S`` gone, raises with the daemons' last log lines."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for proc, log in zip(self.procs, self.logs, strict=True):
                if proc.poll() is not None:
                    raise RuntimeError(f"{log.stem} exited with {proc.returncode}:\n{_tail(log)}")
            with contextlib.suppress(OSError, ValueError):
                if done(self.status()):
                    return
            time.sleep(0.3)
        tails = "\n".join(f"== {log.stem}\n{_tail(log)}" for log in self.logs)
        raise RuntimeError(f"{failure} in {START_TIMEOUT_S:g} s:\n{tails}")

    def stop(self) -> None:
        """SIGTERM to each daemon's process group (a worker kills its executors), then
        SIGKILL to every group, so that no executor or Python worker is left."""
        for proc in self.procs:
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for proc in self.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for proc in self.procs:
            _signal_group(proc, signal.SIGKILL)  # what is left in the group: executors, workers
            proc.wait()
        self.procs.clear()


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError as exc:
        return f"(no log: {exc})"
