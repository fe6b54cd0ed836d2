"""The sandbox command's stop flag: SIGTERM and Ctrl-C set it from a signal handler."""

from __future__ import annotations

import os
import signal
import threading
import time

from bkeeper.cli.sandbox import StopFlag


def test_a_signal_landing_while_the_main_thread_holds_a_lock_stops_the_sandbox() -> None:
    """The handler used to call ``threading.Event.set``, which takes the event's lock: a
    signal landing while ``Event.wait`` held it deadlocked the main thread, and the sandbox
    ignored SIGTERM for good (seen once in CI: 60 s, its bookie and ZooKeeper left running).
    The handler takes no lock now: here it runs while the main thread holds one."""
    stop = StopFlag()
    previous = signal.signal(signal.SIGUSR2, stop.on_signal)
    try:
        held = threading.Lock()
        with held:  # as Event.wait holds its condition's lock around its checks
            os.kill(os.getpid(), signal.SIGUSR2)
            deadline = time.monotonic() + 5
            while not stop.asked and time.monotonic() < deadline:
                time.sleep(0.001)  # the handler runs here, between two bytecodes
        assert stop.asked
        started = time.monotonic()
        stop.wait()
        assert time.monotonic() - started < 1
    finally:
        signal.signal(signal.SIGUSR2, previous)
