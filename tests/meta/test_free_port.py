"""The tests' free ports are picked below the kernel's ephemeral range: a port of that range
is what any process binding port 0 or connecting out gets, so one picked there was taken by
another test's process in the seconds before a sandbox's bookie bound it (its admin port, in
a parallel suite)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bkeeper.testing import zookeeper
from bkeeper.testing.benchmarks import free_port, free_port_range
from bkeeper.testing.zookeeper import EPHEMERAL_RANGE_FILE, FREE_PORT_LOW


def ephemeral_low() -> int:
    if not EPHEMERAL_RANGE_FILE.exists():
        pytest.skip("no ip_local_port_range here")
    return int(EPHEMERAL_RANGE_FILE.read_text().split()[0])


def test_a_free_port_is_below_the_ephemeral_range_and_free() -> None:
    low = ephemeral_low()
    ports = [zookeeper.free_port() for _ in range(20)] + [free_port() for _ in range(20)]
    assert all(FREE_PORT_LOW <= port < low for port in ports), ports
    assert len(set(ports)) > 1, "picked at random"
    for port in ports[:5]:
        with socket.create_server(("127.0.0.1", port)):
            pass
    base = free_port_range(4)
    assert base + 3 < low


def test_a_port_taken_is_not_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    ephemeral_low()
    with socket.create_server(("127.0.0.1", zookeeper.free_port())) as taken:
        busy, other = taken.getsockname()[1], zookeeper.free_port()
        picks = iter([busy, busy, other])
        monkeypatch.setattr(zookeeper._port_rng, "randrange", lambda _a, _b: next(picks))
        assert zookeeper.free_port() == other


def test_without_the_range_the_kernel_picks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(zookeeper, "EPHEMERAL_RANGE_FILE", tmp_path / "missing")
    port = zookeeper.free_port()
    with socket.create_server(("127.0.0.1", port)):
        pass
