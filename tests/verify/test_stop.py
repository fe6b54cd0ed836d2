"""A SIGTERM whose ``KeyboardInterrupt`` was lost still stops the harness: the handler may
run inside a finalizer, where Python prints "Exception ignored" and goes on (a CI run saw a
campaign told to stop carry its run to the end and exit 0)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import time

import pytest

from bkeeper.verify import stop

# The point of these tests: an exception Python reports as unraisable, and drops.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")


@pytest.fixture(autouse=True)
def _forget() -> None:
    stop.reset()
    yield
    stop.reset()


class _Finalized:
    def __del__(self) -> None:
        stop.interrupt(signal.SIGTERM)  # raised here: printed and ignored by Python


def _lose_an_interrupt() -> None:
    _Finalized()  # gone at once: its __del__ runs the handler, whose exception is lost
    gc.collect()


def test_a_lost_interrupt_is_raised_again_between_steps() -> None:
    stop.check()  # nothing asked yet
    _lose_an_interrupt()
    assert stop.requested() == signal.SIGTERM
    with pytest.raises(KeyboardInterrupt, match=f"signal {signal.SIGTERM}"):
        stop.check()


def test_a_running_loop_is_left_within_the_watch_interval() -> None:
    async def run() -> None:
        await asyncio.sleep(0.1)
        _lose_an_interrupt()
        await asyncio.sleep(30)  # a run's long wait: the watch ends it

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(stop.watched(run()))
    assert time.monotonic() - started < 5


def test_the_installed_handler_stops_on_sigterm() -> None:
    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        stop.install()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises in this thread first
        assert stop.requested() == signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])
