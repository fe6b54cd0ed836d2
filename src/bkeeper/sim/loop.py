"""The simulator's event loop: asyncio's own loop on a virtual clock, with no OS I/O.

:class:`SimLoop` is :class:`asyncio.BaseEventLoop` with three things replaced:

- **time**: ``time()`` reads a virtual clock. When no callback is ready, the loop does not
  wait: the clock jumps to the next timer. A run of 30 simulated seconds takes as long as
  its callbacks take to run, and the same callbacks run in the same order in every run;
- **I/O**: there is no selector. ``create_connection`` and ``create_server`` go to the
  simulated network (:mod:`bkeeper.sim.net`), which delivers bytes with timers;
  ``run_in_executor`` (and so ``asyncio.to_thread``) runs the function at once, inline: work
  handed to a thread takes no virtual time;
- **nodes**: every task remembers the simulated node it was created for (the context
  variable :data:`NODE`, copied into each task as asyncio does), so that a crashed node's
  tasks can be cancelled and its connections cut. It remembers the node's **life** too
  (:data:`LIFE`): a crash ends the life (:meth:`SimLoop.end_life`), and code of an ended
  life that still runs (a cancelled task's clean-up: a real process death runs none) gets
  :class:`NodeDiedError` the moment it reaches the network or the metadata service, so it
  never acts in the life of the node started again under the same name.

A loop that has nothing ready and no timer can never do anything again: it raises
:class:`SimStuckError` rather than wait for ever. The loop refuses real I/O: its
``sock_*``, ``getaddrinfo`` and friends raise :class:`SimIOError`.
"""

from __future__ import annotations

import asyncio
import contextvars
import socket
from collections.abc import Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bkeeper.sim.net import SimNetwork

__all__ = [
    "LIFE",
    "NODE",
    "NodeDiedError",
    "SimClock",
    "SimIOError",
    "SimLoop",
    "SimSocket",
    "SimStuckError",
]

#: The simulated node the running code belongs to ("" for the simulator itself).
NODE: contextvars.ContextVar[str] = contextvars.ContextVar("bkeeper_sim_node", default="")
#: Which life of :data:`NODE` the running code belongs to (:meth:`SimLoop.end_life`).
LIFE: contextvars.ContextVar[int] = contextvars.ContextVar("bkeeper_sim_life", default=0)

#: Where the virtual clock starts (only differences matter, as for ``time.monotonic``).
START_S = 1000.0
#: Loop iterations at one instant of virtual time after which the run is said to spin (a
#: busy run makes a few thousand at most; a loop that retries without a pause, millions).
LIVELOCK_ITERATIONS_MAX = 1_000_000
#: Virtual wall milliseconds at ``START_S`` (2023-11-14).
WALL_START_MS = 1_700_000_000_000


class SimStuckError(RuntimeError):
    """Nothing is ready and no timer is set: the run can never go on. Outside
    :mod:`bkeeper.common.errors`' tree, which the library's handlers catch."""


class SimIOError(RuntimeError):
    """Real I/O asked of the simulator's loop (a port the simulator does not plug)."""


class NodeDiedError(BaseException):
    """Code of a dead node's ended life reached out (module doc). A ``BaseException``, as
    ``CancelledError``: the library's handlers of ``Exception`` let it through, so the
    dead code's task ends at once."""


class _NoSelector:
    """Stands where the loop's selector would: jumps the clock instead of waiting."""

    def __init__(self, loop: SimLoop) -> None:
        self._loop = loop
        self._still = 0  # iterations since the clock last moved

    def select(self, timeout: float | None) -> list[Any]:
        loop = self._loop
        if timeout is None:
            raise SimStuckError("nothing is ready and no timer is set: the run is stuck")
        if timeout > 0:
            scheduled: list[asyncio.TimerHandle] = loop._scheduled  # type: ignore[attr-defined]
            loop.advance_to(scheduled[0].when())
            self._still = 0
        else:
            self._still += 1
            if self._still > loop.livelock_iterations_max:
                raise SimStuckError(
                    f"{loop.livelock_iterations_max} loop iterations without the clock moving: "
                    "something spins (a retry with no pause?)"
                )
        return []

    def close(self) -> None:
        pass


class SimLoop(asyncio.BaseEventLoop):
    """``loop = SimLoop(); loop.run_until_complete(main())``: see the module doc."""

    def __init__(self, start_s: float = START_S) -> None:
        super().__init__()
        self._now = start_s
        self._start_s = start_s
        self._selector = _NoSelector(self)
        self.livelock_iterations_max = LIVELOCK_ITERATIONS_MAX
        #: The simulated network (set by :class:`bkeeper.sim.net.SimNetwork`).
        self.net: SimNetwork | None = None
        #: Tasks by node, for crashes (weakly: a finished task goes).
        self._node_tasks: dict[str, dict[asyncio.Task[Any], None]] = {}
        #: node -> its life now (:data:`LIFE`); 0 until its first death
        self._lives: dict[str, int] = {}
        self.set_task_factory(self._new_task)
        self.set_exception_handler(self._on_exception)

    # -- time ---------------------------------------------------------------------------
    def time(self) -> float:
        return self._now

    def advance_to(self, when: float) -> None:
        self._now = max(self._now, when)

    def wall_ms(self) -> int:
        return WALL_START_MS + int((self._now - self._start_s) * 1000)

    # -- the parts of BaseEventLoop that a subclass supplies ----------------------------
    def _process_events(self, event_list: list[Any]) -> None:
        pass

    def _write_to_self(self) -> None:
        pass  # call_soon_threadsafe: there is one thread, and the loop never sleeps

    def run_in_executor(  # type: ignore[override]
        self, executor: Any, func: Callable[..., Any], *args: Any
    ) -> asyncio.Future[Any]:
        future = self.create_future()
        try:
            future.set_result(func(*args))
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            future.set_exception(exc)
        return future

    # -- network -------------------------------------------------------------------------
    async def create_connection(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: str | None = None,
        port: int | None = None,
        **kwargs: Any,
    ) -> tuple[asyncio.Transport, asyncio.BaseProtocol]:
        sock = kwargs.get("sock")
        if isinstance(sock, SimSocket) and sock.address is not None:
            host, port = sock.address
        if self.net is None or host is None or port is None:
            raise SimIOError(f"create_connection({host!r}, {port!r}): no simulated network")
        if kwargs.get("ssl") is not None:
            raise SimIOError("TLS is not simulated")
        return await self.net.connect(protocol_factory, host, port)

    async def create_server(  # type: ignore[override]
        self,
        protocol_factory: Callable[[], asyncio.BaseProtocol],
        host: Any = None,
        port: int | None = None,
        **kwargs: Any,
    ) -> asyncio.AbstractServer:
        if self.net is None or port is None:
            raise SimIOError(f"create_server({host!r}, {port!r}): no simulated network")
        return self.net.listen(
            protocol_factory, NODE.get(), port, start=kwargs.get("start_serving", True)
        )

    async def getaddrinfo(self, *args: Any, **kwargs: Any) -> Any:
        raise SimIOError("getaddrinfo: the simulator has no DNS")

    async def sock_connect(self, sock: Any, address: Any) -> None:
        if not isinstance(sock, SimSocket):
            raise SimIOError("sock_connect: the simulator has no sockets")
        sock.address = (str(address[0]), int(address[1]))  # connected by create_connection

    async def create_datagram_endpoint(self, *args: Any, **kwargs: Any) -> Any:
        raise SimIOError("create_datagram_endpoint: the simulator has no sockets")

    async def create_unix_connection(self, *args: Any, **kwargs: Any) -> Any:
        raise SimIOError("create_unix_connection: the simulator has no sockets")

    # -- nodes ---------------------------------------------------------------------------
    def _new_task(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, Any] | Generator[Any, None, Any],
        **kwargs: Any,
    ) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kwargs)
        node = NODE.get() if kwargs.get("context") is None else kwargs["context"].get(NODE, "")
        if node:
            tasks = self._node_tasks.setdefault(node, {})
            tasks[task] = None
            task.add_done_callback(tasks.pop)
        return task

    def node_tasks(self, node: str) -> list[asyncio.Task[Any]]:
        """The unfinished tasks created for ``node``, oldest first."""
        return list(self._node_tasks.get(node, {}))

    def run_as(self, node: str, function: Callable[[], Any]) -> Any:
        """Call ``function`` as ``node`` (its life now): tasks it creates belong to it."""
        return self.node_context(node).run(function)

    def node_context(self, node: str) -> contextvars.Context:
        """A context for code of ``node``'s life now."""
        context = contextvars.copy_context()
        context.run(NODE.set, node)
        context.run(LIFE.set, self._lives.get(node, 0))
        return context

    def end_life(self, node: str) -> None:
        """``node``'s process died: code of this life still running is dead code."""
        self._lives[node] = self._lives.get(node, 0) + 1

    def check_alive(self, what: str) -> None:
        """Raise :class:`NodeDiedError` if the running code is of an ended life."""
        node = NODE.get()
        if node and LIFE.get() != self._lives.get(node, 0):
            raise NodeDiedError(f"{node}: {what} by code of a life that ended (crash)")

    def _on_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exception = context.get("exception")
        if isinstance(exception, asyncio.CancelledError | NodeDiedError):
            return
        self.default_exception_handler(context)


class SimSocket:
    """Stands for a client socket where a library makes its own before connecting
    (aiohttp's connector, through ``aiohappyeyeballs``): :meth:`SimLoop.sock_connect` notes
    the address, and ``create_connection(sock=...)`` connects to it on the simulated
    network."""

    family = socket.AF_INET
    type = socket.SOCK_STREAM
    proto = 0

    def __init__(self) -> None:
        self.address: tuple[str, int] | None = None

    def setblocking(self, flag: bool) -> None:
        pass

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


class SimClock:
    """The :class:`~bkeeper.common.clock.Clock` of simulated nodes: the running
    :class:`SimLoop`'s virtual time (monotonic and wall)."""

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()

    def wall_ms(self) -> int:
        loop = asyncio.get_running_loop()
        if not isinstance(loop, SimLoop):
            raise SimIOError("SimClock read outside the simulator's loop")
        return loop.wall_ms()
