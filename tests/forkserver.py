"""A fork server for the tests' bookie processes: real processes, without paying Python's
start-up for each.

The suite starts some 250 ``bkeeper bookie`` processes for its real clusters, and on the
2-core machine each spent about 0.4 CPU-s importing bkeeper before it did anything
(docs/benchmarks.md, "Bookie fork server"). This module's server (``python
tests/forkserver.py SOCKET``, one per pytest process, started at first use) imports the
bookie's command line once, single-threaded, then forks a child for each bookie asked for.
The child is an ordinary process: its own pid, its own TCP port, killed and paused with
signals like any other; it runs the same entry point as ``python -m bkeeper`` with the
caller's arguments, environment, working directory and log file (stdout and stderr), and
exits as that would (``atexit`` handlers run, the exit code is click's).

:class:`ForkedProcess` is the caller's handle, with the part of ``subprocess.Popen``'s
interface the tests use (``pid``, ``returncode``, ``poll``, ``wait``, ``send_signal``,
``kill``, ``terminate``): the child is the server's, so the server reaps it and answers for
its exit code (negative: the signal that ended it, as Popen says).

Each request is one connection to the server's Unix socket: a JSON line asked, a JSON line
answered. ``spawn`` answers the child's pid; ``wait`` answers its exit code once it exited,
or ``null`` at the request's timeout (0: a poll). The server exits when the pytest process
that started it closes its stdin (ends, or dies).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["ForkServer", "ForkServerError", "ForkedProcess", "fork_server", "stop_fork_server"]

#: What the server imports before it forks anything: ``python -m bkeeper``'s entry and the
#: bookie command (the bulk of a bookie's import).
PRELOAD = ("bkeeper.cli.main", "bkeeper.cli.bookie")
#: How long the caller waits for the server to listen after it started.
START_TIMEOUT_S = 30.0
#: How long one request may take to be read or answered (the server's one thread serves
#: every caller: a caller that connects and sends nothing is dropped after this).
REQUEST_TIMEOUT_S = 10.0
#: The longest request line the server reads (an environment is a few KiB).
MAX_REQUEST_BYTES = 1 << 20


class ForkServerError(RuntimeError):
    """The fork server could not be started or did not answer (test infrastructure, outside
    bkeeper's error tree)."""


# --------------------------------------------------------------------------- the server


def _serve(sock_path: str) -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:
        raise ForkServerError(f"importing {PRELOAD} started threads: a fork would copy them")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through the pipe
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sock_path)
    listener.listen(64)
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")
    codes: dict[int, int | None] = {}  # every child, its exit code once reaped
    waits: list[tuple[socket.socket, int, float]] = []  # (caller, pid, deadline)
    while True:
        now = time.monotonic()
        soonest = min((deadline for _, _, deadline in waits), default=math.inf)
        timeout = None if soonest == math.inf else max(0.0, soonest - now)
        for key, _ in selector.select(timeout):
            if key.data == "parent" and not os.read(sys.stdin.fileno(), 4096):
                return  # the pytest process is gone: so is this server
            if key.data == "child":
                os.read(wake_r, 4096)
            if key.data == "accept":
                conn, _ = listener.accept()
                _handle(conn, codes, waits)
        _reap(codes)
        still = []
        for conn, pid, deadline in waits:
            code = codes.get(pid)
            if code is not None or time.monotonic() >= deadline:
                _answer(conn, {"code": code})
            else:
                still.append((conn, pid, deadline))
        waits[:] = still


def _reap(codes: dict[int, int | None]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        codes[pid] = os.waitstatus_to_exitcode(status)


def _answer(conn: socket.socket, reply: dict[str, Any]) -> None:
    try:
        conn.sendall(json.dumps(reply).encode() + b"\n")
    except OSError:
        pass  # the caller gave up (its own timeout) and closed: nobody to tell
    finally:
        conn.close()


def _handle(
    conn: socket.socket,
    codes: dict[int, int | None],
    waits: list[tuple[socket.socket, int, float]],
) -> None:
    conn.settimeout(REQUEST_TIMEOUT_S)
    try:
        line = conn.makefile("rb").readline(MAX_REQUEST_BYTES)
        request = json.loads(line)
        op = request["op"]
        if op == "spawn":
            pid = _fork(request)
            codes[pid] = None
            _answer(conn, {"pid": pid})
        elif op == "wait":
            pid = int(request["pid"])
            if pid not in codes:
                _answer(conn, {"error": f"pid {pid} is not a child of this fork server"})
                return
            timeout = request.get("timeout")
            deadline = time.monotonic() + (float(timeout) if timeout is not None else math.inf)
            waits.append((conn, pid, deadline))  # answered by the loop
        else:
            _answer(conn, {"error": f"unknown request {op!r}"})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        _answer(conn, {"error": f"{type(exc).__name__}: {exc}"})


def _fork(request: dict[str, Any]) -> int:
    args = [str(arg) for arg in request["args"]]
    env = {str(k): str(v) for k, v in request["env"].items()}
    cwd, log = str(request["cwd"]), str(request["log"])
    errors = str(request.get("stderr") or log)  # None: with stdout, as stderr=STDOUT
    stdin = str(request.get("stdin") or os.devnull)
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:  # the child: nothing of the server may survive into it
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))  # as Popen's close_fds: the server's
        for fd, path, flags in (
            (0, stdin, os.O_RDONLY),
            (1, log, os.O_WRONLY | os.O_CREAT | os.O_APPEND),
            (2, errors, os.O_WRONLY | os.O_CREAT | os.O_APPEND),
        ):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        _name_process(f"bkeeper {args[0] if args else ''}".strip())
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        code = _run_main(args)
    finally:
        os._exit(code)


def _name_process(name: str) -> None:
    """What ``ps -o comm``, ``top`` and ``/proc/PID/comm`` show for this child (its command
    line stays the server's: a fork does not exec)."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME


def _run_main(args: list[str]) -> int:
    """``python -m bkeeper ARGS`` in this (forked) process: its exit code."""
    import atexit
    import traceback

    import bkeeper.__main__ as entry
    from bkeeper.cli.main import main

    sys.argv = [entry.__file__, *args]
    code = 0
    try:
        main(args)  # as `python -m bkeeper`, which ignores what it returns
    except SystemExit as exc:  # what `python -m` would make of it
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # its file is gone: nowhere to say it
            stream.flush()
    return code


# --------------------------------------------------------------------------- the caller


class ForkedProcess:
    """A child of the fork server, with ``subprocess.Popen``'s interface as the tests use it."""

    def __init__(self, server: ForkServer, pid: int, args: list[str]) -> None:
        self._server = server
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            code = self._server.wait(self.pid, timeout)
            if code is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
            self.returncode = code
        return self.returncode

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.wait(self.pid, 0.0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never signal a pid that may have been reused
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def __repr__(self) -> str:
        return f"<ForkedProcess pid={self.pid} returncode={self.returncode}>"


class ForkServer:
    """The caller's side: starts the server process and asks it for children."""

    def __init__(self) -> None:
        work_dir = Path(tempfile.mkdtemp(prefix="bkeeper-forkserver-"))
        self.work_dir = work_dir
        self.socket_path = str(work_dir / "forkserver.sock")
        self.log_path = work_dir / "forkserver.log"
        #: Every child spawned (their owners stop them; a leftover check may look here).
        self.children: list[ForkedProcess] = []
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, __file__, self.socket_path],
                stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(self.socket_path):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise ForkServerError(
                    f"the fork server did not start ({self._last_line()}; log: {self.log_path})"
                )
            time.sleep(0.02)

    def _last_line(self) -> str:
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        return lines[-1] if lines else "no output"

    def _ask(self, request: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(None if timeout is None else timeout + REQUEST_TIMEOUT_S)
            try:
                conn.connect(self.socket_path)
                conn.sendall(json.dumps(request).encode() + b"\n")
                line = conn.makefile("rb").readline()
            except OSError as exc:
                raise ForkServerError(
                    f"the fork server did not answer {request['op']}: {exc} (log: {self.log_path})"
                ) from exc
        if not line:
            raise ForkServerError(
                f"the fork server closed without answering {request['op']} ({self._last_line()})"
            )
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise ForkServerError(f"the fork server refused {request['op']}: {reply['error']}")
        return reply

    def spawn(
        self, args: list[str], log: Path, *, stderr: Path | None = None, stdin: Path | None = None
    ) -> ForkedProcess:
        """``python -m bkeeper ARGS`` as a child of the server, stdout (and stderr, unless
        ``stderr`` names another file) appended to ``log``, standard input read from
        ``stdin`` (default: ``/dev/null``), with this process's environment and working
        directory."""
        request = {
            "op": "spawn", "args": args, "env": dict(os.environ), "cwd": os.getcwd(),
            "log": str(log), "stderr": None if stderr is None else str(stderr),
            "stdin": None if stdin is None else str(stdin),
        }  # fmt: skip
        log.touch()  # there when spawn returns, as a log Popen's caller opened would be
        reply = self._ask(request, REQUEST_TIMEOUT_S)
        child = ForkedProcess(self, int(reply["pid"]), [sys.executable, "-m", "bkeeper", *args])
        self.children.append(child)
        return child

    def run(
        self, args: list[str], *, input: str | None = None, timeout: float | None = None
    ) -> subprocess.CompletedProcess[str]:
        """As ``subprocess.run([python, "-m", "bkeeper", *args], input=input, timeout=timeout,
        capture_output=True, text=True)``: the output read once the child exited (killed
        at ``timeout``, then ``TimeoutExpired`` is raised)."""
        with tempfile.TemporaryDirectory(dir=self.work_dir) as scratch:
            files = Path(scratch)
            source = None
            if input is not None:
                source = files / "stdin"
                source.write_text(input)
            proc = self.spawn(args, files / "stdout", stderr=files / "stderr", stdin=source)
            try:
                code = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
            out, err = (files / "stdout").read_text(), (files / "stderr").read_text()
        return subprocess.CompletedProcess(proc.args, code, out, err)

    def wait(self, pid: int, timeout: float | None) -> int | None:
        code = self._ask({"op": "wait", "pid": pid, "timeout": timeout}, timeout)["code"]
        return None if code is None else int(code)

    def close(self) -> None:
        """End the server (its children are their owners' to stop) and reap it."""
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(REQUEST_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.work_dir, ignore_errors=True)


_lock = threading.Lock()
_server: ForkServer | None = None


def fork_server() -> ForkServer:
    """This process's fork server, started at first use (its socket and log: a new temp
    dir, removed when it stops)."""
    global _server
    with _lock:
        if _server is None or _server.proc.poll() is not None:
            _server = ForkServer()
        return _server


def stop_fork_server() -> None:
    """End this process's fork server, if it started (the session's end)."""
    global _server
    with _lock:
        if _server is not None:
            _server.close()
            _server = None


if __name__ == "__main__":
    _serve(sys.argv[1])
