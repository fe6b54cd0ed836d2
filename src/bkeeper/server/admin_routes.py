"""The bookie's admin endpoints, in the shape of Apache BookKeeper's HTTP admin (JSON).

::

    GET  /heartbeat                              "OK" (text): the process answers
    GET  /api/v1/config/server_config            the configuration, by option name
    PUT  /api/v1/config/server_config            409: frozen (set it and restart)
    GET  /api/v1/bookie/state                    running, readOnly, shuttingDown,
                                                 availableForHighPriorityWrites
    GET  /api/v1/bookie/state/readonly           readOnly
    PUT  /api/v1/bookie/state/readonly           body {"readOnly": bool}: switch; 409 saying
                                                 why when it cannot turn writable
    GET  /api/v1/bookie/last_log_mark            {journal dir: {logFileId, logFileOffset}}:
                                                 where the last checkpoint left each journal
    PUT  /api/v1/bookie/expand_storage           501: directories are set at start
    GET  /api/v1/bookie/entry_location_compact   501 (GET and PUT): no RocksDB to compact
    GET  /api/v1/bookie/list_disk_file           ?file_type=journal|entrylog|index (default
                                                 all): {"journal files": [file...], ...}
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

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from bkeeper.common.errors import AdminRequestError
from bkeeper.server.admin_http import NO_TIME_LIMIT, AdminHttpServer
from bkeeper.server.admin_request import json_object, json_response, query_str, text_response
from bkeeper.storage import FileSystem
from bkeeper.storage.inspect import last_mark, list_files
from bkeeper.storage.inspect_dirs import BookieDirs

__all__ = ["AdminBookie", "BookieStatus", "GcControl", "GcReportView", "add_bookie_routes"]

PREFIX = "/api/v1/bookie"
CONFIG = "/api/v1/config/server_config"
#: ``list_disk_file``'s ``file_type`` values, and the answer's key for each.
FILE_TYPES = {"journal": "journal files", "entrylog": "entrylog files", "index": "index files"}


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

    @classmethod
    def of(
        cls,
        *,
        running: bool,
        stopping: bool,
        readonly: bool,
        registering: bool,
        room_for_high_priority: bool,
    ) -> BookieStatus:
        """From the bookie's state: serving (``running``), stopping, read-only, not yet
        registered (``registering``), room left for recovery and high-priority adds."""
        reason = ""
        if stopping:
            reason = "the bookie is shutting down"
        elif not running:
            reason = "the bookie is starting"
        elif registering:
            reason = "the bookie is not registered yet"
        return cls(
            running=running,
            read_only=readonly,
            shutting_down=stopping,
            available_for_high_priority_writes=running and (not readonly or room_for_high_priority),
            ready=not reason,
            not_ready_reason=reason,
        )


class AdminBookie(Protocol):
    """What the admin endpoints need from the bookie (:class:`~bkeeper.server.Bookie`)."""

    @property
    def bookie_id(self) -> str: ...

    @property
    def garbage_collector(self) -> GcControl | None: ...

    def status(self) -> BookieStatus: ...

    def disk_usage(self) -> tuple[int, int]:
        """``(total, free)`` bytes of the data disk."""
        ...

    def config_values(self) -> Mapping[str, object]: ...

    def set_read_only(self, read_only: bool) -> str:
        """ "" once as asked, else why not."""
        ...

    def disk_files(self) -> tuple[FileSystem, BookieDirs]: ...


def add_bookie_routes(bookie: AdminBookie, server: AdminHttpServer) -> None:
    """Add the bookie's endpoints to ``server``."""
    endpoints = _Endpoints(bookie)
    add = server.add_route
    add("GET", "/heartbeat", endpoints.heartbeat)
    add("GET", CONFIG, endpoints.server_config)
    add("PUT", CONFIG, endpoints.server_config_frozen)
    add("GET", f"{PREFIX}/state", endpoints.state)
    add("GET", f"{PREFIX}/state/readonly", endpoints.read_only)
    add("PUT", f"{PREFIX}/state/readonly", endpoints.set_read_only)
    add("GET", f"{PREFIX}/last_log_mark", endpoints.last_log_mark)
    add("PUT", f"{PREFIX}/expand_storage", endpoints.expand_storage)
    add("GET", f"{PREFIX}/entry_location_compact", endpoints.entry_location_compact)
    add("PUT", f"{PREFIX}/entry_location_compact", endpoints.entry_location_compact)
    add("GET", f"{PREFIX}/list_disk_file", endpoints.list_disk_file)
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

    async def server_config(self, request: web.Request) -> web.Response:
        return json_response(dict(self._bookie.config_values()))

    async def server_config_frozen(self, request: web.Request) -> web.Response:
        raise AdminRequestError(
            409,
            "the configuration of a running bookie is frozen: change it in its settings "
            "(--conf, -o) and restart it",
        )

    async def read_only(self, request: web.Request) -> web.Response:
        return json_response({"readOnly": self._bookie.status().read_only})

    async def set_read_only(self, request: web.Request) -> web.Response:
        body = await json_object(request)
        unknown = sorted(set(body) - {"readOnly"})
        if unknown:
            raise AdminRequestError(
                400, f"unknown field {unknown[0]!r} in the body; expected readOnly"
            )
        value = body.get("readOnly")
        if not isinstance(value, bool):
            raise AdminRequestError(400, f"readOnly: must be true or false, got {value!r}")
        why_not = self._bookie.set_read_only(value)
        if why_not:
            raise AdminRequestError(
                409, f"bookie {self._bookie.bookie_id} stays read-only: {why_not}"
            )
        return json_response({"readOnly": self._bookie.status().read_only})

    async def expand_storage(self, request: web.Request) -> web.Response:
        raise AdminRequestError(
            501,
            "not supported: a bookie takes its directories at start; add the directory to "
            "ledger_dirs (--ledger-dir) and restart it",
        )

    async def entry_location_compact(self, request: web.Request) -> web.Response:
        raise AdminRequestError(
            501,
            "not supported: entry locations are in bkeeper's own index (docs/storage.md), "
            "not in RocksDB; there is nothing to compact",
        )

    async def last_log_mark(self, request: web.Request) -> web.Response:
        fs, dirs = self._bookie.disk_files()
        mark = await asyncio.to_thread(last_mark, fs, dirs)
        if mark is None:
            raise AdminRequestError(503, f"bookie {self._bookie.bookie_id} has no checkpoint yet")
        return json_response(
            {
                journal.directory: {"logFileId": journal.file_id, "logFileOffset": journal.offset}
                for journal in mark.journals
            }
        )

    async def list_disk_file(self, request: web.Request) -> web.Response:
        kind = query_str(request, "file_type", "")
        if kind and kind not in FILE_TYPES:
            raise AdminRequestError(
                400, f"file_type: must be one of {', '.join(FILE_TYPES)}, got {kind[:40]!r}"
            )
        kinds = [kind] if kind else list(FILE_TYPES)
        fs, dirs = self._bookie.disk_files()
        files = await asyncio.to_thread(
            list_files,
            fs,
            dirs,
            journal="journal" in kinds,
            entrylog="entrylog" in kinds,
            index="index" in kinds,
        )
        answer: dict[str, list[dict[str, object]]] = {FILE_TYPES[k]: [] for k in kinds}
        for found in files:
            key = "entrylog" if found.kind == "compacting" else found.kind
            key = "index" if key == "checkpoint" else key
            answer[FILE_TYPES[key]].append(found.as_dict())
        return json_response(answer)

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
