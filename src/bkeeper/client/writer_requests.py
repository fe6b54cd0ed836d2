"""A writer's requests to its bookies besides adds: FORCE_LEDGER and the explicit LAC.

Both go over v3 (v2 has neither) to every bookie of the current ensemble; a bookie has
``add_timeout_ms`` to answer each (a request lost on a connection that stays up would
otherwise be waited for for ever).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from bkeeper.client.context import ClientContext
from bkeeper.common.errors import BookieError, BookieUnavailableError
from bkeeper.common.tasks import within
from bkeeper.wire.codes import Protocol, StatusCode, status_text
from bkeeper.wire.digest import DigestManager, VerifiedEntry
from bkeeper.wire.messages import ForceLedgerRequest, WriteLacRequest

__all__ = ["WRITE_LAC_RETRY_MAX_S", "force_ledger", "write_lac_periodically"]

#: The longest wait before an explicit LAC that a bookie did not take is sent again (the
#: wait doubles from the interval while it keeps failing).
WRITE_LAC_RETRY_MAX_S = 1.0


async def force_ledger(ctx: ClientContext, ledger_id: int, ensemble: tuple[str, ...]) -> None:
    """Ask every bookie of ``ensemble`` to make ``ledger_id`` durable."""
    request = ForceLedgerRequest(ledger_id)
    timeout_s = ctx.config.add_timeout_ms / 1000.0
    try:
        responses = await within(
            asyncio.gather(*(ctx.pool.send(b, request, Protocol.V3) for b in ensemble)),
            timeout_s,
        )
    except TimeoutError:
        raise BookieUnavailableError(
            f"ledger {ledger_id}: force: a bookie did not answer in {ctx.config.add_timeout_ms} ms"
        ) from None
    for response in responses:
        if response.status is not StatusCode.EOK:
            raise BookieError(f"ledger {ledger_id}: force failed: {status_text(response.status)}")


async def write_lac_periodically(
    ctx: ClientContext,
    digest: DigestManager[VerifiedEntry],
    master_key: bytes,
    *,
    idle_lac: Callable[[], int | None],
    ensemble: Callable[[], tuple[str, ...]],
    went_idle: asyncio.Event,
    interval_s: float,
) -> None:
    """Send the writer's LAC to its bookies when the writer goes idle with a LAC they have
    not been sent (``idle_lac()`` gives the LAC then, else None; ``went_idle`` is set when
    the last add in flight completes), at most once per ``interval_s``, so that readers see
    the last entry too without waiting for a next add or a timer. A LAC that a bookie did
    not take (no answer within ``add_timeout_ms``, or an error status) is sent again, after
    a wait that doubles up to ``WRITE_LAC_RETRY_MAX_S``. Runs until cancelled."""
    ledger_id = digest.ledger_id
    timeout_s = ctx.config.add_timeout_ms / 1000.0
    sent = -1
    retry_s = interval_s
    while True:
        await went_idle.wait()
        went_idle.clear()
        lac = idle_lac()
        if lac is None or lac == sent:
            continue
        request = WriteLacRequest(ledger_id, lac, master_key, digest.encode_lac(lac))
        results = await asyncio.gather(
            *(_send_within(ctx, b, request, timeout_s) for b in ensemble()),
            return_exceptions=True,
        )
        if all(not isinstance(r, BaseException) and r.status is StatusCode.EOK for r in results):
            sent, retry_s = lac, interval_s
            await asyncio.sleep(interval_s)
        else:  # a bookie unreachable, or refusing it (an error status): again, a bit later
            went_idle.set()
            await asyncio.sleep(retry_s)
            retry_s = min(retry_s * 2, max(interval_s, WRITE_LAC_RETRY_MAX_S))


async def _send_within(
    ctx: ClientContext, bookie: str, request: WriteLacRequest, timeout_s: float
) -> Any:
    """One bookie's answer within ``timeout_s`` (the send made here, once this runs: a
    send made before would never be awaited if this were cancelled first)."""
    return await within(ctx.pool.send(bookie, request, Protocol.V3), timeout_s)
