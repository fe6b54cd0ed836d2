"""The bookie's admin endpoints, in the shape of Apache BookKeeper's HTTP admin (JSON).

::

    GET  /heartbeat                              "OK" (text): the process answers
    GET  /api/v1/bookie/state                    running, readOnly, shuttingDown,
                                                 availableForHighPriorityWrites
    GET  /api/v1/bookie/is_ready                 200 {"ready": true}, or 503 saying why not
    GET  /api/v1/bookie/info                     freeSpace, totalSpace (bytes)
    GET  /api/v1/bookie/gc                       the garbage collector's status
    PUT  /api/v1/bookie/gc                       body {"forceMajor": bool, "forceMinor": bool}
                                                 (both optional): run a pass now, wait for it,
                                                 answer its report
    GET  /api/v1/bookie/gc_details               [status]: one entry per GC thread (one here)
    GET  /api/v1/bookie/gc/suspend_compaction    isMajorGcSuspended, isMinorGcSuspended
    PUT  /api/v1/bookie/gc/suspend_compaction    body {"suspendMajor": bool, "suspendMinor": bool}
    GET  /api/v1/bookie/gc/resume_compaction     as GET suspend_compaction
    PUT  /api/v1/bookie/gc/resume_compaction     body {"resumeMajor": bool, "resumeMinor": bool}

A body names only the fields listed, each true or false; anything else is a 400 naming the
field. Suspending or resuming nothing (no field true) is a 400 too. The endpoints reach the
bookie through :class:`AdminBookie`, so they are tested with a small fake.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from bkeeper.common.errors import AdminRequestError
from bkeeper.server.admin_http import NO_TIME_LIMIT, AdminHttpServer
from bkeeper.server.admin_request import json_object, json_response, text_response

__all__ = ["AdminBookie", "BookieStatus", "GcControl", "GcReportView", "add_bookie_routes"]

PREFIX = "/api/v1/bookie"


class GcReportView(Protocol):
    def as_dict(self) -> Mapping[str, object]: ...


class GcControl(Protocol):
    """What the endpoints use of the bookie's garbage collector."""

    async def run_now(self, *, major: bool = False, minor: bool = False) -> GcReportView: ...

    def suspend(self, *, major: bool, minor: bool) -> None: ...

    def resume(self, *, major: bool, minor: bool) -> None: ...

    def status(self) -> Mapping[str, object]: ...


@dataclass(frozen=True)
class BookieStatus:
    """The bookie's state as the admin endpoints report it. ``ready``: serving, registered
    (when it has a metadata store) and not stopping; ``not_ready_reason`` says why not."""

    running: bool
    read_only: bool
    shutting_down: bool
    available_for_high_priority_writes: bool
    ready: bool
    not_ready_reason: str = ""


class AdminBookie(Protocol):
    """What the admin endpoints need from the bookie."""

    @property
    def bookie_id(self) -> str: ...

    @property
    def garbage_collector(self) -> GcControl | None: ...

    def status(self) -> BookieStatus: ...

    def disk_usage(self) -> tuple[int, int]:
        """``(total, free)`` bytes of the data disk."""
        ...


def add_bookie_routes(bookie: AdminBookie, server: AdminHttpServer) -> None:
    """Add the bookie's endpoints to ``server``."""
    endpoints = _Endpoints(bookie)
    add = server.add_route
    add("GET", "/heartbeat", endpoints.heartbeat)
    add("GET", f"{PREFIX}/state", endpoints.state)
    add("GET", f"{PREFIX}/is_ready", endpoints.is_ready)
    add("GET", f"{PREFIX}/info", endpoints.info)
    add("GET", f"{PREFIX}/gc", endpoints.gc_status)
    add("PUT", f"{PREFIX}/gc", endpoints.gc_run, timeout_ms=NO_TIME_LIMIT)
    add("GET", f"{PREFIX}/gc_details", endpoints.gc_details)
    add("GET", f"{PREFIX}/gc/suspend_compaction", endpoints.suspended)
    add("PUT", f"{PREFIX}/gc/suspend_compaction", endpoints.suspend)
    add("GET", f"{PREFIX}/gc/resume_compaction", endpoints.suspended)
    add("PUT", f"{PREFIX}/gc/resume_compaction", endpoints.resume)


async def _flags(request: web.Request, *names: str) -> dict[str, bool]:
    """The body's boolean fields ``names`` (absent: false); 400 for any other field or value."""
    body = await json_object(request)
    unknown = sorted(set(body) - set(names))
    if unknown:
        raise AdminRequestError(
            400, f"unknown field {unknown[0]!r} in the body; expected {', '.join(names)}"
        )
    for name, value in body.items():
        if not isinstance(value, bool):
            raise AdminRequestError(400, f"{name}: must be true or false, got {value!r}")
    return {name: bool(body.get(name, False)) for name in names}


class _Endpoints:
    def __init__(self, bookie: AdminBookie) -> None:
        self._bookie = bookie

    def _gc(self) -> GcControl:
        gc = self._bookie.garbage_collector
        if gc is None:
            raise AdminRequestError(
                503, f"bookie {self._bookie.bookie_id} runs no garbage collector"
            )
        return gc

    async def heartbeat(self, request: web.Request) -> web.Response:
        return text_response("OK\n")

    async def state(self, request: web.Request) -> web.Response:
        status = self._bookie.status()
        return json_response(
            {
                "running": status.running,
                "readOnly": status.read_only,
                "shuttingDown": status.shutting_down,
                "availableForHighPriorityWrites": status.available_for_high_priority_writes,
            }
        )

    async def is_ready(self, request: web.Request) -> web.Response:
        status = self._bookie.status()
        if status.ready:
            return json_response({"ready": True})
        reason = status.not_ready_reason or "not ready"
        return json_response({"ready": False, "error": reason, "status": 503}, 503)

    async def info(self, request: web.Request) -> web.Response:
        total, free = self._bookie.disk_usage()
        return json_response({"freeSpace": free, "totalSpace": total})

    async def gc_status(self, request: web.Request) -> web.Response:
        return json_response(dict(self._gc().status()))

    async def gc_run(self, request: web.Request) -> web.Response:
        flags = await _flags(request, "forceMajor", "forceMinor")
        gc = self._gc()
        report = await gc.run_now(major=flags["forceMajor"], minor=flags["forceMinor"])
        return json_response(dict(report.as_dict()))

    async def gc_details(self, request: web.Request) -> web.Response:
        return json_response([dict(self._gc().status())])

    async def suspended(self, request: web.Request) -> web.Response:
        status = self._gc().status()
        return json_response(
            {
                "isMajorGcSuspended": bool(status.get("suspended_major")),
                "isMinorGcSuspended": bool(status.get("suspended_minor")),
            }
        )

    async def suspend(self, request: web.Request) -> web.Response:
        flags = await _flags(request, "suspendMajor", "suspendMinor")
        if not any(flags.values()):
            raise AdminRequestError(400, "nothing to suspend: set suspendMajor or suspendMinor")
        self._gc().suspend(major=flags["suspendMajor"], minor=flags["suspendMinor"])
        return await self.suspended(request)

    async def resume(self, request: web.Request) -> web.Response:
        flags = await _flags(request, "resumeMajor", "resumeMinor")
        if not any(flags.values()):
            raise AdminRequestError(400, "nothing to resume: set resumeMajor or resumeMinor")
        self._gc().resume(major=flags["resumeMajor"], minor=flags["resumeMinor"])
        return await self.suspended(request)
