"""Event plumbing shared by the metadata drivers and recipes: bounded subscriptions and owned
tasks.

A :class:`Subscription` is one consumer's stream of events. Producers may push from any thread
(kazoo calls back on its own threads); items always reach the consumer on the event loop that
created the subscription. The buffer is bounded: when it is full the oldest item is dropped
and :attr:`Subscription.dropped` counts it. That is safe for metadata watches because every
event means "something changed, read again", never "here is the change".

Background tasks are owned by :class:`bkeeper.common.tasks.TaskOwner`, re-exported here for
the drivers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from bkeeper.common.errors import MetadataClosedError
from bkeeper.common.tasks import TASKS_MAX, TaskOwner

__all__ = ["SUBSCRIPTION_ITEMS_MAX", "TASKS_MAX", "Subscription", "TaskOwner", "wait_any"]

_log = logging.getLogger(__name__)

T = TypeVar("T")

#: Default bound of one subscription's buffer.
SUBSCRIPTION_ITEMS_MAX = 1024


class Subscription(Generic[T]):
    """A bounded stream of events for one consumer; ``async for`` over it, ``close()`` it.

    A one-shot subscription ends after its first item. Iteration also ends once the producer
    or the consumer closes it and the buffered items are drained.
    """

    def __init__(
        self,
        *,
        limit: int = SUBSCRIPTION_ITEMS_MAX,
        one_shot: bool = False,
        on_close: Callable[[Subscription[T]], None] | None = None,
    ) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        self._loop = asyncio.get_running_loop()
        self._items: deque[T] = deque(maxlen=limit)
        self._wakeup = asyncio.Event()
        self._one_shot = one_shot
        self._on_close = on_close
        self._closed = False
        self.dropped = 0

    @property
    def closed(self) -> bool:
        """True once no more items will be accepted."""
        return self._closed

    def push(self, item: T) -> None:
        """Deliver ``item`` to the consumer; callable from any thread."""
        if self._on_own_loop():
            self._push(item)
            return
        # RuntimeError: the consumer's loop is closed, nobody is listening any more.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._push, item)

    def close(self) -> None:
        """Stop accepting items; buffered items are still yielded. Callable from any thread."""
        if self._on_own_loop():
            self._close()
            return
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._close)

    async def get(self, timeout_s: float | None = None) -> T:
        """The next item; ``MetadataClosedError`` once closed and drained; ``TimeoutError``."""
        async with asyncio.timeout(timeout_s):
            try:
                return await self.__anext__()
            except StopAsyncIteration:
                raise MetadataClosedError("the subscription is closed") from None

    def __aiter__(self) -> Subscription[T]:
        return self

    async def __anext__(self) -> T:
        while not self._items:
            if self._closed:
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()
        return self._items.popleft()

    async def __aenter__(self) -> Subscription[T]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def _on_own_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def _push(self, item: T) -> None:
        if self._closed:
            return
        if len(self._items) == self._items.maxlen:
            self.dropped += 1
        self._items.append(item)
        self._wakeup.set()
        if self._one_shot:
            self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._wakeup.set()
        if self._on_close is not None:
            self._on_close(self)


async def wait_any(*subscriptions: Subscription[Any]) -> None:
    """Wait until any subscription yields an item (which is consumed as a wake-up signal).

    ``MetadataClosedError`` if one of them is closed and drained.
    """
    tasks = [asyncio.ensure_future(sub.get()) for sub in subscriptions]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    for task in tasks:
        if not task.cancelled() and isinstance(task.exception(), MetadataClosedError):
            raise MetadataClosedError("a subscription was closed")
