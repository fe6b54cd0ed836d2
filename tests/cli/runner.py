"""``bkeeper ARGS`` run in this process, as ``python -m bkeeper ARGS`` runs it, for tests of a
command's output and exit status: the same entry point (:func:`bkeeper.cli.main.main`, whose
error lines and exit codes are what a user sees), its standard output and error captured
apart, standard input a real file (``log append`` reads its descriptor), logging configured
as a fresh process configures it and put back afterwards. About 1-1.5 s of interpreter
start-up and imports saved per call; a few real subprocess runs per test file keep start-up,
signals and the exit codes of the real process tested.

What a run could leave for the next test of the worker is restored: the root logger's
handlers and level, the levels the command sets on kazoo's and py4j's loggers, the handlers
of SIGINT and SIGTERM (``sandbox`` sets them before it looks at its ports), the environment
(``env``) and the standard streams. A command that runs a server (``bookie``, ``dice``, a
``sandbox`` that starts) is not for this runner: it would serve in the test's process; run it
as a process (a test of a refusal to start may run it here).

A command runs its own event loop (``asyncio.run``): from an ``async def`` test, call
:func:`run_cli_async`, which runs it in a thread of its own.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import IO

from click.testing import CliRunner

from bkeeper.cli.main import main

__all__ = ["run_cli", "run_cli_async"]

#: Loggers whose level :func:`bkeeper.cli._logging.configure_logging` sets.
_COMMAND_LOGGERS = ("kazoo", "py4j")
#: Signals whose handlers a command may set (``sandbox``).
_COMMAND_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def run_cli(
    *args: str, stdin: str | None = None, env: Mapping[str, str | None] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m bkeeper ARGS`` in this process: its exit status, stdout and stderr as a
    :class:`subprocess.CompletedProcess` (so helpers written for the subprocess read it
    alike). ``stdin``: the text on standard input (none: an empty file, as
    ``stdin=subprocess.DEVNULL``); ``env``: variables set (``None``: unset) for the run."""
    with (
        _standard_input(stdin) as text_in,
        _fresh_logging(),
        _signal_handlers_kept(),
        CliRunner().isolation(env=env) as (out, err, _both),
    ):
        sys.stdin = text_in  # put back with the others when the isolation ends
        code = _exit_status(list(args))
        sys.stdout.flush()
        sys.stderr.flush()
        return subprocess.CompletedProcess(
            ["bkeeper", *args],
            code,
            out.getvalue().decode(errors="replace"),
            err.getvalue().decode(errors="replace"),
        )


async def run_cli_async(
    *args: str, stdin: str | None = None, env: Mapping[str, str | None] | None = None
) -> subprocess.CompletedProcess[str]:
    """:func:`run_cli` from a coroutine: in a thread, the command running its own loop."""
    return await asyncio.to_thread(run_cli, *args, stdin=stdin, env=env)


def _exit_status(argv: list[str]) -> int:
    """What ``python -m bkeeper`` exits with: 0 when ``main`` returns (``__main__`` drops its
    value), else the code of the ``SystemExit`` (a message: printed, status 1)."""
    try:
        main(argv)
    except SystemExit as exit_:
        if exit_.code is None or isinstance(exit_.code, int):
            return exit_.code or 0
        print(exit_.code, file=sys.stderr)
        return 1
    return 0


@contextmanager
def _standard_input(text: str | None) -> Iterator[IO[str]]:
    """A real file holding ``text`` (``read_lines`` reads the descriptor, not the object)."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as file:
        file.write(text or "")
        file.flush()
        file.seek(0)
        yield file


@contextmanager
def _signal_handlers_kept() -> Iterator[None]:
    """The handlers of the signals a command may take over, as they were before it ran (only
    the main thread sets handlers: in another, a command that tries fails, changing none)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {sig: signal.getsignal(sig) for sig in _COMMAND_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            if handler is not None:  # None: set outside Python, and not changed from it
                signal.signal(sig, handler)


@contextmanager
def _fresh_logging() -> Iterator[None]:
    """The root logger as a new process has it (no handler: the command adds its own, on the
    captured stderr), and everything as it was afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    levels = {name: logging.getLogger(name).level for name in _COMMAND_LOGGERS}
    root.handlers.clear()
    root.setLevel(logging.WARNING)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, before in levels.items():
            logging.getLogger(name).setLevel(before)
