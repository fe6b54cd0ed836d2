"""The cluster's endpoints in Apache BookKeeper's HTTP admin shape: bookies and ledgers.

::

    GET    /api/v1/bookie/list_bookies       ?type=rw|ro (default both), print_hostnames=bool:
                                             {bookieId: host or null}
    GET    /api/v1/bookie/list_bookie_info   {bookieId: {freeSpace, totalSpace} or {error},
                                             "ClusterInfo": {freeSpace, totalSpace}}
    GET    /api/v1/bookie/cluster_info       auditorElected, auditorId, clusterUnderReplicated,
                                             ledgerReplicationEnabled, *BookiesCount, ...
    POST   /api/v1/bookie/sanity             ?entries=N: write entries to a new ledger on
                                             this bookie alone, read them back, delete it
                                             (POST: it changes the cluster; Java serves GET)
    GET    /api/v1/ledger/list               ?print_metadata=bool, page=N (from 1):
                                             {ledgerId: metadata or null}, ledgers_page_max a page
    GET    /api/v1/ledger/metadata           ?ledger_id=: {ledgerId: metadata}
    GET    /api/v1/ledger/read               ?ledger_id=, start_entry_id=, end_entry_id=:
                                             {entryId: text}, read_entries_max at most
    DELETE /api/v1/ledger/delete             ?ledger_id=: delete the ledger

The limits (``ledgers_page_max``, ...) are :class:`~bkeeper.admin.context.AdminLimits`.
A ledger's metadata is :func:`metadata_json` (BookKeeper's field names, without the password).
"""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from aiohttp import web

from bkeeper.admin.context import ClusterAdmin, answer_errors
from bkeeper.admin.sanity import SANITY_ENTRIES, sanity_check
from bkeeper.common.errors import AdminRequestError, BKeeperError, LedgerNotFoundError
from bkeeper.meta.ledger_metadata import LedgerMetadata
from bkeeper.meta.summary import cluster_summary
from bkeeper.server.admin_http import AdminHttpServer
from bkeeper.server.admin_request import json_response, query_bool, query_int, query_str
from bkeeper.wire.codes import GetBookieInfoField, Protocol, status_text
from bkeeper.wire.messages import GetBookieInfoRequest, GetBookieInfoResponse

__all__ = [
    "BOOKIE_INFO_CONCURRENCY",
    "BOOKIE_INFO_TIMEOUT_S",
    "add_cluster_routes",
    "metadata_json",
]

#: ``list_bookie_info``: bookies asked at once, and how long each may take.
BOOKIE_INFO_CONCURRENCY = 16
BOOKIE_INFO_TIMEOUT_S = 10.0

BOOKIE = "/api/v1/bookie"
LEDGER = "/api/v1/ledger"
_ID_MAX = 2**63 - 1


def add_cluster_routes(server: AdminHttpServer, admin: ClusterAdmin) -> None:
    """Add the bookie and ledger endpoints of the cluster to ``server`` (before it starts)."""
    endpoints = _Endpoints(admin)
    server.add_route("GET", f"{BOOKIE}/list_bookies", endpoints.list_bookies)
    server.add_route("GET", f"{BOOKIE}/list_bookie_info", endpoints.list_bookie_info)
    server.add_route("GET", f"{BOOKIE}/cluster_info", endpoints.cluster_info)
    server.add_route("POST", f"{BOOKIE}/sanity", endpoints.sanity)
    server.add_route("GET", f"{LEDGER}/list", endpoints.list_ledgers)
    server.add_route("GET", f"{LEDGER}/metadata", endpoints.metadata)
    server.add_route("GET", f"{LEDGER}/read", endpoints.read)
    server.add_route("DELETE", f"{LEDGER}/delete", endpoints.delete)


def metadata_json(meta: LedgerMetadata) -> dict[str, Any]:
    """A ledger's metadata with BookKeeper's field names (``LedgerMetadata`` as its HTTP admin
    writes it), without the password."""
    return {
        "metadataFormatVersion": meta.format_version,
        "ensembleSize": meta.ensemble_size,
        "writeQuorumSize": meta.write_quorum,
        "ackQuorumSize": meta.ack_quorum,
        "lastEntryId": meta.last_entry_id,
        "length": meta.length,
        "digestType": meta.digest_type.name,
        "state": meta.state.name,
        "closed": meta.state.name == "CLOSED",
        "ensembles": {str(first): list(ensemble) for first, ensemble in meta.segments.items()},
        "ctime": meta.ctime_ms,
        "cToken": meta.ctoken,
        "customMetadata": {
            key: base64.b64encode(value).decode() for key, value in meta.custom_metadata.items()
        },
    }


def _ledger_id(request: web.Request) -> int:
    return query_int(request, "ledger_id", minimum=0, maximum=_ID_MAX)


class _Endpoints:
    def __init__(self, admin: ClusterAdmin) -> None:
        self._admin = admin

    # -- bookies ---------------------------------------------------------------------------
    async def list_bookies(self, request: web.Request) -> web.Response:
        kind = query_str(request, "type", "")
        if kind not in ("", "rw", "ro"):
            raise AdminRequestError(400, f"type: must be rw or ro, got {kind[:40]!r}")
        hostnames = query_bool(request, "print_hostnames", False)
        bk = await self._admin.client()
        async with answer_errors("listing the bookies"):
            bookies = await bk.cluster.registry.bookies()
            ids = sorted(
                (bookies.writable if kind != "ro" else frozenset())
                | (bookies.read_only if kind != "rw" else frozenset())
            )
            answer: dict[str, str | None] = {}
            for bookie_id in ids:
                host = None
                if hostnames:
                    host = bookie_id.rpartition(":")[0]
                    endpoint = (await bk.cluster.registry.service_info(bookie_id)).endpoint()
                    if endpoint is not None:
                        host = endpoint.host
                answer[bookie_id] = host
        return json_response(answer)

    async def list_bookie_info(self, request: web.Request) -> web.Response:
        bk = await self._admin.client()
        async with answer_errors("listing the bookies"):
            bookies = await bk.cluster.registry.bookies()
        ids = sorted(bookies.writable | bookies.read_only)
        slots = asyncio.Semaphore(BOOKIE_INFO_CONCURRENCY)
        mask = int(GetBookieInfoField.TOTAL_DISK_CAPACITY | GetBookieInfoField.FREE_DISK_SPACE)

        async def info(bookie_id: str) -> dict[str, Any]:
            async with slots:
                try:
                    async with asyncio.timeout(BOOKIE_INFO_TIMEOUT_S):
                        got: GetBookieInfoResponse = await bk.pool.send(
                            bookie_id, GetBookieInfoRequest(mask), Protocol.V3
                        )
                except TimeoutError:
                    return {"error": f"no answer in {BOOKIE_INFO_TIMEOUT_S:g} s"}
                except (BKeeperError, OSError) as exc:
                    return {"error": f"{type(exc).__name__}: {exc}"}
            if got.status.name != "EOK":
                return {"error": f"answered {status_text(got.status)}"}
            return {"freeSpace": got.free_disk_space, "totalSpace": got.total_disk_capacity}

        found = await asyncio.gather(*(info(bookie_id) for bookie_id in ids))
        answer: dict[str, dict[str, Any]] = dict(zip(ids, found, strict=True))
        answered = [row for row in found if "error" not in row]
        answer["ClusterInfo"] = {
            "freeSpace": sum(row["freeSpace"] or 0 for row in answered),
            "totalSpace": sum(row["totalSpace"] or 0 for row in answered),
            "bookies": len(ids),
            "bookiesAnswered": len(answered),
        }
        return json_response(answer)

    async def cluster_info(self, request: web.Request) -> web.Response:
        bk = await self._admin.client()
        async with answer_errors("reading the cluster's summary"):
            summary = await cluster_summary(bk.cluster)
        return json_response(summary.as_json())

    async def sanity(self, request: web.Request) -> web.Response:
        entries = query_int(request, "entries", SANITY_ENTRIES, minimum=1, maximum=1000)
        bk = await self._admin.client()
        bookie_id = self._admin.local_bookie()
        async with answer_errors(f"sanity check of bookie {bookie_id}"):
            ledger_id = await sanity_check(bk, bookie_id, entries)
        return json_response(
            {"success": True, "bookie": bookie_id, "ledgerId": ledger_id, "entries": entries}
        )

    # -- ledgers ---------------------------------------------------------------------------
    async def list_ledgers(self, request: web.Request) -> web.Response:
        with_metadata = query_bool(request, "print_metadata", False)
        page_max = self._admin.limits.ledgers_page_max
        page = query_int(request, "page", 1, minimum=1, maximum=_ID_MAX // page_max)
        skip = (page - 1) * page_max
        bk = await self._admin.client()
        ids: list[int] = []
        async with answer_errors("listing the ledgers"):
            async for ledger_id in bk.list_ledgers():
                if skip:
                    skip -= 1
                    continue
                ids.append(ledger_id)
                if len(ids) == page_max:
                    break
            answer: dict[str, Any] = {str(ledger_id): None for ledger_id in ids}
            if with_metadata:
                for ledger_id in ids:
                    try:
                        answer[str(ledger_id)] = metadata_json(await bk.ledger_metadata(ledger_id))
                    except LedgerNotFoundError:
                        del answer[str(ledger_id)]  # deleted since it was listed
        return json_response(answer)

    async def metadata(self, request: web.Request) -> web.Response:
        ledger_id = _ledger_id(request)
        bk = await self._admin.client()
        async with answer_errors(f"ledger {ledger_id}"):
            meta = await bk.ledger_metadata(ledger_id)
        return json_response({str(ledger_id): metadata_json(meta)})

    async def read(self, request: web.Request) -> web.Response:
        ledger_id = _ledger_id(request)
        start = query_int(request, "start_entry_id", 0, minimum=0, maximum=_ID_MAX)
        entries_max = self._admin.limits.read_entries_max
        bytes_max = self._admin.limits.read_bytes_max
        end = query_int(request, "end_entry_id", -1, minimum=-1, maximum=_ID_MAX)  # -1: LAC
        if end != -1 and end < start:
            raise AdminRequestError(400, f"end_entry_id: {end} is before start_entry_id ({start})")
        if end != -1 and end - start + 1 > entries_max:
            raise AdminRequestError(
                400,
                f"end_entry_id: {end - start + 1} entries asked for, at most "
                f"{entries_max} a request (read_entries_max)",
            )
        bk = await self._admin.client()
        answer: dict[str, str] = {}
        async with answer_errors(f"reading ledger {ledger_id}"):
            meta = await bk.ledger_metadata(ledger_id)
            handle = await bk.open_ledger(ledger_id, meta.password, recovery=False)
            try:
                last = handle.last_add_confirmed
                if not handle.is_closed:
                    last = await handle.read_last_add_confirmed()
                if end == -1:
                    end = min(last, start + entries_max - 1)
                if end > last:
                    raise AdminRequestError(
                        400,
                        f"end_entry_id: {end} is past the last entry confirmed ({last}) of "
                        f"ledger {ledger_id}",
                    )
                size = 0
                if start <= end:
                    async for entry in handle.read(start, end):
                        size += len(entry.data)
                        if size > bytes_max:
                            raise AdminRequestError(
                                413,
                                f"entries {start}..{end} of ledger {ledger_id} hold more than "
                                f"{bytes_max} bytes (read_bytes_max): ask for fewer",
                            )
                        answer[str(entry.entry_id)] = entry.data.decode("utf-8", "replace")
            finally:
                await handle.close()
        return json_response(answer)

    async def delete(self, request: web.Request) -> web.Response:
        ledger_id = _ledger_id(request)
        bk = await self._admin.client()
        async with answer_errors(f"deleting ledger {ledger_id}"):
            await bk.delete_ledger(ledger_id)
        return json_response({"ledgerId": ledger_id, "deleted": True})
