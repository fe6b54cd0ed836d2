"""What the cluster endpoints share: one client of the cluster, opened on first use, and the
long operator jobs (recover a bookie, decommission one) running in the background.

:class:`ClusterAdmin` is made by whoever composes the bookie process (``bkeeper bookie``),
its routes added to the bookie's admin server before it starts, and closed after the bookie.
The client is opened on the first request that needs it (a bookie starts whether or not its
cluster answers the admin API), and opened again after a failed open.

Errors: :func:`answer_errors` turns what the cluster says into one status and a message: no
such ledger 404, a bad argument 400, a refusal of the cluster's state (auto-recovery
disabled, no auditor, a bookie still running) 409, a timeout 504, a bookie or the
metadata store not answering 503.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from bkeeper.client import BookKeeper
from bkeeper.common.clock import Clock, default_clock
from bkeeper.common.errors import (
    AdminRequestError,
    BKeeperError,
    BookieError,
    ConfigError,
    ConnectionLossError,
    LedgerNotFoundError,
    MetadataClosedError,
    NoNodeError,
    SessionExpiredError,
)
from bkeeper.common.messages import in_context
from bkeeper.common.tasks import TaskOwner
from bkeeper.common.validate import check_positive_ints

__all__ = ["AdminLimits", "ClusterAdmin", "Job", "answer_errors"]

log = logging.getLogger(__name__)


@contextlib.asynccontextmanager
async def answer_errors(what: str) -> AsyncIterator[None]:
    """Turn the cluster's errors within into :class:`AdminRequestError` (module docstring)."""
    try:
        yield
    except AdminRequestError:
        raise
    except (LedgerNotFoundError, NoNodeError) as exc:
        raise AdminRequestError(404, in_context(what, str(exc))) from exc
    except ConfigError as exc:
        raise AdminRequestError(400, in_context(what, str(exc))) from exc
    except TimeoutError as exc:
        raise AdminRequestError(504, in_context(what, str(exc) or "timed out")) from exc
    except (BookieError, ConnectionLossError, SessionExpiredError, MetadataClosedError) as exc:
        said = in_context(what, str(exc))[len(what) + 2 :]
        raise AdminRequestError(503, f"{what}: {type(exc).__name__}: {said}") from exc
    except BKeeperError as exc:
        raise AdminRequestError(409, in_context(what, str(exc))) from exc


@dataclass(frozen=True)
class AdminLimits:
    """How much one answer holds at most: ledgers on a page of ``ledger/list``, entries and
    their bytes in one ``ledger/read``, ledgers in ``list_under_replicated_ledger``."""

    ledgers_page_max: int = 1000
    read_entries_max: int = 1000
    read_bytes_max: int = 4 * 1024 * 1024
    under_replicated_listed_max: int = 10_000

    def __post_init__(self) -> None:
        check_positive_ints(
            self,
            "ledgers_page_max",
            "read_entries_max",
            "read_bytes_max",
            "under_replicated_listed_max",
        )


@dataclass
class Job:
    """One background job (``kind``: recover or decommission) and how far it got."""

    kind: str
    bookies: tuple[str, ...]
    started_wall_ms: int
    state: str = "running"  # running, done, failed
    done: int = 0
    total: int | None = None
    error: str | None = None
    result: dict[str, Any] = field(default_factory=dict)

    def progress(self, done: int, total: int) -> None:
        self.done, self.total = done, total

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "bookies": list(self.bookies),
            "state": self.state,
            "done": self.done,
            "total": self.total,
            "error": self.error,
            "startedWallMs": self.started_wall_ms,
            "result": self.result,
        }


class ClusterAdmin:
    """The cluster the endpoints act on: ``metadata_uri``; ``local_bookie``: the id of the
    bookie whose admin server this is (for ``sanity``), asked when needed; ``limits``: how
    much an answer holds; ``clock`` stamps the jobs (a ``SystemClock`` by default)."""

    def __init__(
        self,
        metadata_uri: str,
        local_bookie: Callable[[], str],
        limits: AdminLimits | None = None,
        *,
        clock: Clock | None = None,
    ) -> None:
        if not metadata_uri:
            raise ConfigError("metadata_uri: the cluster endpoints need the cluster's URI")
        self.metadata_uri = metadata_uri
        self.local_bookie = local_bookie
        self.limits = AdminLimits() if limits is None else limits
        self._client: BookKeeper | None = None
        self._opening = asyncio.Lock()
        self.jobs: dict[str, Job] = {}  # the last job of each kind
        self._clock: Clock = clock or default_clock()
        self._tasks = TaskOwner("cluster admin")  # the jobs under way

    async def client(self) -> BookKeeper:
        """The started client; opened now if it is not (503 when it cannot be)."""
        async with self._opening:
            if self._client is None:
                client = BookKeeper(self.metadata_uri)
                try:
                    await client.start()
                except (BKeeperError, OSError) as exc:
                    with contextlib.suppress(BKeeperError, OSError):
                        await client.close()
                    raise AdminRequestError(
                        503, f"cannot reach the cluster at {self.metadata_uri}: {exc}"
                    ) from exc
                self._client = client
            return self._client

    def start_job(
        self,
        kind: str,
        bookies: tuple[str, ...],
        work: Callable[[BookKeeper, Job], Coroutine[Any, Any, dict[str, Any]]],
        client: BookKeeper,
    ) -> Job:
        """Run ``work`` in the background as the job of ``kind``; 409 while one runs."""
        running = self.jobs.get(kind)
        if running is not None and running.state == "running":
            raise AdminRequestError(
                409,
                f"a {kind} job is under way already (bookies {', '.join(running.bookies)}): "
                "wait for it to end",
            )
        job = Job(kind, bookies, self._clock.wall_ms())
        self._tasks.spawn(self._run(job, work, client), kind)
        self.jobs[kind] = job
        return job

    async def _run(
        self,
        job: Job,
        work: Callable[[BookKeeper, Job], Coroutine[Any, Any, dict[str, Any]]],
        client: BookKeeper,
    ) -> None:
        try:
            job.result = await work(client, job)
        except asyncio.CancelledError:
            job.state, job.error = "failed", "stopped with the bookie"
            raise
        except Exception as exc:
            log.exception("admin %s of %s failed", job.kind, ", ".join(job.bookies))
            job.state, job.error = "failed", f"{type(exc).__name__}: {exc}"
            return
        job.state = "done"

    async def aclose(self) -> None:
        """Cancel the jobs under way and close the client."""
        await self._tasks.aclose()
        client, self._client = self._client, None
        if client is not None:
            await client.close()
