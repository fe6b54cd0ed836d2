"""Auto-recovery's endpoints in Apache BookKeeper's HTTP admin shape.

::

    GET  /api/v1/autorecovery/status                        {"enabled": bool}
    PUT  /api/v1/autorecovery/status?enabled=true|false      switch it; answers as GET
    GET  /api/v1/autorecovery/list_under_replicated_ledger   ?missingreplica=ID,
         excludingmissingreplica=ID, printmissingreplica=bool: [ledgerId...], or with
         printmissingreplica {ledgerId: [bookieId...]}; with printreason=true (ours)
         {ledgerId: {"missingReplicas": [...], "reason": text or null, "reasonKind": word
         or null, "reasonSinceWallMs": ms or null}}; under_replicated_listed_max at most
    GET  /api/v1/autorecovery/who_is_auditor                {"Auditor": id}; 404 when none
    PUT  /api/v1/autorecovery/trigger_audit                 make the auditor audit now
    GET  /api/v1/autorecovery/lost_bookie_recovery_delay    {"delay_seconds": n or null}
    PUT  /api/v1/autorecovery/lost_bookie_recovery_delay    body {"delay_seconds": n}
    PUT  /api/v1/autorecovery/bookie                        body {"bookie_src": [id...],
         "delete_cookie": bool}: re-replicate their ledgers now (a background job), 202
    GET  /api/v1/autorecovery/bookie                        that job's progress
    PUT  /api/v1/autorecovery/decommission                  body {"bookie_src": id}: the
         stopped bookie's ledgers re-replicated by the workers, then its cookie deleted
         (a background job, at most DECOMMISSION_TIMEOUT_S), 202
    GET  /api/v1/autorecovery/decommission                  that job's progress

A job's progress: ``kind``, ``bookies``, ``state`` (running, done, failed), ``done`` and
``total`` ledgers, ``error``, ``startedWallMs``, ``result``. One job of each kind at a time
(409 while one runs); they stop with the bookie.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from bkeeper.admin.context import ClusterAdmin, Job, answer_errors
from bkeeper.autorecovery.admin import (
    UnderReplicatedRow,
    decommission,
    recover,
    trigger_audit,
    under_replicated,
)
from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.client import BookKeeper
from bkeeper.common.errors import AdminRequestError, NoNodeError
from bkeeper.server.admin_http import AdminHttpServer
from bkeeper.server.admin_request import json_object, json_response, query_bool, query_str

__all__ = ["DECOMMISSION_TIMEOUT_S", "add_recovery_routes"]

#: How long a decommission waits for the workers at most.
DECOMMISSION_TIMEOUT_S = 24 * 3600.0
#: The largest lost-bookie recovery delay taken (a day).
DELAY_S_MAX = 86_400

PREFIX = "/api/v1/autorecovery"


def _with_reason(row: UnderReplicatedRow) -> dict[str, Any]:
    return {
        "missingReplicas": list(row.missing_replicas),
        "reason": row.reason,
        "reasonKind": row.reason_kind,
        "reasonSinceWallMs": row.reason_since_ms,
    }


def add_recovery_routes(server: AdminHttpServer, admin: ClusterAdmin) -> None:
    """Add auto-recovery's endpoints to ``server`` (before it starts)."""
    endpoints = _Endpoints(admin)
    add = server.add_route
    add("GET", f"{PREFIX}/status", endpoints.status)
    add("PUT", f"{PREFIX}/status", endpoints.set_status)
    add("GET", f"{PREFIX}/list_under_replicated_ledger", endpoints.list_under_replicated)
    add("GET", f"{PREFIX}/who_is_auditor", endpoints.who_is_auditor)
    add("PUT", f"{PREFIX}/trigger_audit", endpoints.trigger_audit)
    add("GET", f"{PREFIX}/lost_bookie_recovery_delay", endpoints.delay)
    add("PUT", f"{PREFIX}/lost_bookie_recovery_delay", endpoints.set_delay)
    add("GET", f"{PREFIX}/bookie", endpoints.recover_status)
    add("PUT", f"{PREFIX}/bookie", endpoints.recover)
    add("GET", f"{PREFIX}/decommission", endpoints.decommission_status)
    add("PUT", f"{PREFIX}/decommission", endpoints.decommission)


def _fields(body: dict[str, Any], *names: str) -> None:
    unknown = sorted(set(body) - set(names))
    if unknown:
        raise AdminRequestError(
            400, f"unknown field {unknown[0]!r} in the body; expected {', '.join(names)}"
        )


def _bookie_ids(value: object, name: str) -> tuple[str, ...]:
    """A bookie id, or a list of them (BookKeeper takes both)."""
    ids = [value] if isinstance(value, str) else value
    if (
        not isinstance(ids, list)
        or not ids
        or not all(isinstance(i, str) and i.strip() for i in ids)
    ):
        raise AdminRequestError(
            400, f"{name}: must be a bookie id or a list of them, got {value!r:.80}"
        )
    return tuple(dict.fromkeys(i.strip() for i in ids))


class _Endpoints:
    def __init__(self, admin: ClusterAdmin) -> None:
        self._admin = admin

    async def status(self, request: web.Request) -> web.Response:
        bk = await self._admin.client()
        async with answer_errors("reading auto-recovery's flag"):
            enabled = await bk.cluster.underreplication.is_enabled()
        return json_response({"enabled": enabled})

    async def set_status(self, request: web.Request) -> web.Response:
        if "enabled" not in request.query:
            raise AdminRequestError(400, "enabled: a query parameter this endpoint needs")
        enabled = query_bool(request, "enabled", False)
        bk = await self._admin.client()
        urm = bk.cluster.underreplication
        async with answer_errors("switching auto-recovery"):
            await (urm.enable() if enabled else urm.disable())
            now = await urm.is_enabled()
        return json_response({"enabled": now})

    async def list_under_replicated(self, request: web.Request) -> web.Response:
        missing = query_str(request, "missingreplica", "") or None
        excluding = query_str(request, "excludingmissingreplica", "") or None
        with_replicas = query_bool(request, "printmissingreplica", False)
        bk = await self._admin.client()
        async with answer_errors("listing under-replicated ledgers"):
            rows = await under_replicated(bk.cluster.underreplication, missing)
        rows = [r for r in rows if excluding is None or excluding not in r.missing_replicas]
        rows = rows[: self._admin.limits.under_replicated_listed_max]
        if query_bool(request, "printreason", False):  # ours: why each one waits
            return json_response({str(r.ledger_id): _with_reason(r) for r in rows})
        if with_replicas:
            return json_response({str(r.ledger_id): list(r.missing_replicas) for r in rows})
        return json_response([r.ledger_id for r in rows])

    async def who_is_auditor(self, request: web.Request) -> web.Response:
        bk = await self._admin.client()
        async with answer_errors("looking up the auditor"):
            auditor = await bk.cluster.underreplication.current_auditor()
        if auditor is None:
            raise AdminRequestError(404, "no auditor is elected")
        return json_response({"Auditor": auditor})

    async def trigger_audit(self, request: web.Request) -> web.Response:
        bk = await self._admin.client()
        async with answer_errors("triggering an audit"):
            auditor = await trigger_audit(bk.cluster.underreplication)
        return json_response({"auditTriggered": True, "Auditor": auditor})

    async def delay(self, request: web.Request) -> web.Response:
        bk = await self._admin.client()
        async with answer_errors("reading the lost bookie recovery delay"):
            delay_s = await bk.cluster.underreplication.lost_bookie_recovery_delay_s()
        return json_response({"delay_seconds": delay_s})

    async def set_delay(self, request: web.Request) -> web.Response:
        body = await json_object(request)
        _fields(body, "delay_seconds")
        value = body.get("delay_seconds")
        if not (
            isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= DELAY_S_MAX
        ):
            raise AdminRequestError(
                400, f"delay_seconds: must be an integer in 0..{DELAY_S_MAX}, got {value!r:.40}"
            )
        bk = await self._admin.client()
        async with answer_errors("setting the lost bookie recovery delay"):
            await bk.cluster.underreplication.set_lost_bookie_recovery_delay_s(value)
        return json_response({"delay_seconds": value})

    def _job(self, kind: str) -> web.Response:
        job = self._admin.jobs.get(kind)
        if job is None:
            raise AdminRequestError(404, f"no {kind} job since the bookie started")
        return json_response(job.as_json())

    async def recover_status(self, request: web.Request) -> web.Response:
        return self._job("recover")

    async def decommission_status(self, request: web.Request) -> web.Response:
        return self._job("decommission")

    async def recover(self, request: web.Request) -> web.Response:
        body = await json_object(request)
        _fields(body, "bookie_src", "delete_cookie")
        bookies = _bookie_ids(body.get("bookie_src"), "bookie_src")
        delete_cookie = body.get("delete_cookie", False)
        if not isinstance(delete_cookie, bool):
            raise AdminRequestError(
                400, f"delete_cookie: must be true or false, got {delete_cookie!r:.40}"
            )
        bk = await self._admin.client()

        async def work(client: BookKeeper, job: Job) -> dict[str, Any]:
            outcomes = await recover(
                client, bookies, AutoRecoveryConfig(), on_progress=job.progress
            )
            failed = {str(o.ledger_id): o.reason for o in outcomes if not o.done}
            deleted = []
            if delete_cookie and not failed:
                for bookie_id in bookies:
                    try:
                        await client.cluster.cookies.delete(bookie_id)
                    except NoNodeError:
                        continue
                    deleted.append(bookie_id)
            return {
                "ledgers": len(outcomes),
                "failed": failed,
                "cookiesDeleted": deleted,
            }

        job = self._admin.start_job("recover", bookies, work, bk)
        return json_response(job.as_json(), 202)

    async def decommission(self, request: web.Request) -> web.Response:
        body = await json_object(request)
        _fields(body, "bookie_src")
        bookies = _bookie_ids(body.get("bookie_src"), "bookie_src")
        if len(bookies) != 1:
            raise AdminRequestError(400, "bookie_src: one bookie at a time")
        bookie_id = bookies[0]
        bk = await self._admin.client()
        async with answer_errors(f"decommissioning {bookie_id}"):
            registered = await bk.cluster.registry.bookies()
        if bookie_id in registered.writable or bookie_id in registered.read_only:
            raise AdminRequestError(
                409, f"bookie {bookie_id} is still registered: stop it before decommissioning"
            )

        async def work(client: BookKeeper, job: Job) -> dict[str, Any]:
            report = await decommission(
                client, bookie_id, timeout_s=DECOMMISSION_TIMEOUT_S, on_progress=job.progress
            )
            return {"ledgers": report.ledgers, "cookieDeleted": report.cookie_deleted}

        job = self._admin.start_job("decommission", bookies, work, bk)
        return json_response(job.as_json(), 202)
