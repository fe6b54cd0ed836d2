"""The key-value store's state machine: keys with values and per-key versions.

Every write is one log record, a JSON command ``{"id": REQUEST_ID | null, "ops": [OP, ...]}``
whose operations are applied atomically (all or none). Operations and their results:

- ``{"op": "put", "key": K, "value": V}`` → ``{"version": N}`` (the key's previous version
  + 1; an absent key has version 0);
- ``{"op": "delete", "key": K}`` → ``{"existed": bool}`` (the version goes back to 0);
- ``{"op": "cas", "key": K, "expected_version": E, "value": V}`` → ``{"applied": bool,
  "version": N}``: puts when the key's version is E (0: absent). In a batch, a CAS that does
  not apply cancels the whole batch (``{"applied": false, "results": [...]}``, nothing
  changed).

Request ids make retries idempotent: the result of each of the last ``requests_kept_max``
request ids is kept (in the state, so in snapshots too); a command whose id was applied
already returns that result and changes nothing. Values are strings (UTF-8 text or whatever
the client encodes in them).

Snapshot format (2): JSON lines; the first ``{"format": 2, "keys": N, "requests": M}``, then
lines of up to ``SNAPSHOT_CHUNK`` ``[key, value, version]`` rows until N keys, then lines of
``[request id, result]`` pairs until M.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import Position

__all__ = ["REQUESTS_KEPT_MAX", "KvState", "encode_command", "validate_ops"]

#: Request ids whose results are kept for retries (oldest forgotten first).
REQUESTS_KEPT_MAX = 100_000
#: Operations in one batch.
BATCH_OPS_MAX = 1_000
SNAPSHOT_FORMAT = 2
#: Rows per line of a snapshot (a thread writing one lets the event loop run between lines).
SNAPSHOT_CHUNK = 10_000


def validate_ops(ops: Any) -> list[dict[str, Any]]:
    """``ops`` checked (a list of operation dicts as above); ``ConfigError`` names the bad one."""
    if not isinstance(ops, list) or not ops:
        raise ConfigError("ops: must be a non-empty list")
    if len(ops) > BATCH_OPS_MAX:
        raise ConfigError(f"ops: at most BATCH_OPS_MAX={BATCH_OPS_MAX} per batch")
    for index, op in enumerate(ops):
        if not isinstance(op, dict) or not isinstance(op.get("key"), str) or not op["key"]:
            raise ConfigError(f"ops[{index}]: needs a non-empty string key")
        kind = op.get("op")
        if kind in ("put", "cas") and not isinstance(op.get("value"), str):
            raise ConfigError(f"ops[{index}]: {kind} needs a string value")
        if kind == "cas" and (
            not isinstance(op.get("expected_version"), int) or op["expected_version"] < 0
        ):
            raise ConfigError(f"ops[{index}]: cas needs a non-negative expected_version")
        if kind not in ("put", "delete", "cas"):
            raise ConfigError(f"ops[{index}]: op must be put, delete or cas, got {kind!r}")
    return ops


def encode_command(request_id: str | None, ops: list[dict[str, Any]]) -> bytes:
    return json.dumps({"id": request_id, "ops": ops}, separators=(",", ":")).encode()


class KvState:
    """The state (see the module docstring); a :class:`~bkeeper.statemachine.StateMachine`."""

    def __init__(self, requests_kept_max: int = REQUESTS_KEPT_MAX) -> None:
        self._data: dict[str, tuple[str, int]] = {}
        self._requests: collections.OrderedDict[str, Any] = collections.OrderedDict()
        self._requests_kept_max = requests_kept_max

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: str) -> tuple[str | None, int]:
        """(value, version); (None, 0) when absent."""
        value, version = self._data.get(key, (None, 0))
        return value, version

    def items(self, prefix: str = "", limit: int | None = None) -> Iterator[tuple[str, str, int]]:
        """(key, value, version) of the keys starting with ``prefix``, in key order."""
        keys = sorted(k for k in self._data if k.startswith(prefix))
        for key in keys[:limit]:
            value, version = self._data[key]
            yield key, value, version

    # -- StateMachine -------------------------------------------------------------------
    def apply(self, command: bytes, position: Position) -> Any:
        doc = json.loads(command)
        request_id = doc.get("id")
        if request_id is not None and request_id in self._requests:
            return self._requests[request_id]
        result = self._apply_ops(doc["ops"])
        if request_id is not None:
            self._requests[request_id] = result
            while len(self._requests) > self._requests_kept_max:
                self._requests.popitem(last=False)
        return result

    def _apply_ops(self, ops: list[dict[str, Any]]) -> dict[str, Any]:
        # Check every CAS against the state as the batch leaves it, then apply all or none.
        staged: dict[str, tuple[str | None, int]] = {}
        results: list[dict[str, Any]] = []
        applied = True
        for op in ops:
            key = op["key"]
            value, version = staged[key] if key in staged else self.get(key)
            kind = op["op"]
            if kind == "put":
                staged[key] = (op["value"], version + 1)
                results.append({"version": version + 1})
            elif kind == "delete":
                staged[key] = (None, 0)
                results.append({"existed": value is not None})
            else:
                ok = version == op["expected_version"]
                if ok:
                    staged[key] = (op["value"], version + 1)
                results.append({"applied": ok, "version": version + 1 if ok else version})
                applied = applied and ok
        if applied:
            for key, (value, version) in staged.items():
                if value is None:
                    self._data.pop(key, None)
                else:
                    self._data[key] = (value, version)
        return {"applied": applied, "results": results}

    def write_snapshot(self, out: BinaryIO) -> None:
        self.snapshot_writer()(out)

    def snapshot_writer(self) -> Callable[[BinaryIO], None]:
        """Capture the state now (shallow copies: values are immutable); the function
        returned writes it, in chunks, and may run in another thread."""
        keys = list(self._data.items())
        requests = list(self._requests.items())

        def write(out: BinaryIO) -> None:
            head = {"format": SNAPSHOT_FORMAT, "keys": len(keys), "requests": len(requests)}
            out.write(json.dumps(head).encode() + b"\n")
            for at in range(0, len(keys), SNAPSHOT_CHUNK):
                rows = [[k, v, ver] for k, (v, ver) in keys[at : at + SNAPSHOT_CHUNK]]
                out.write(json.dumps(rows, separators=(",", ":")).encode() + b"\n")
            for at in range(0, len(requests), SNAPSHOT_CHUNK):
                chunk = requests[at : at + SNAPSHOT_CHUNK]
                out.write(json.dumps(chunk, separators=(",", ":")).encode() + b"\n")

        return write

    def restore_snapshot(self, source: BinaryIO) -> None:
        lines = iter(source)
        try:
            head = json.loads(next(lines))
        except (StopIteration, ValueError) as exc:
            raise ConfigError(f"kv snapshot: no valid header: {exc}") from exc
        if not isinstance(head, dict) or head.get("format") != SNAPSHOT_FORMAT:
            raise ConfigError(f"kv snapshot: format {head!r} is not supported")
        data: dict[str, tuple[str, int]] = {}
        requests: collections.OrderedDict[str, Any] = collections.OrderedDict()
        for line in lines:
            if len(data) < head["keys"]:
                data.update((k, (v, ver)) for k, v, ver in json.loads(line))
            else:
                requests.update((rid, res) for rid, res in json.loads(line))
        if len(data) != head["keys"] or len(requests) != head["requests"]:
            raise ConfigError(
                f"kv snapshot: holds {len(data)} keys and {len(requests)} request ids, "
                f"its header says {head['keys']} and {head['requests']}"
            )
        self._data, self._requests = data, requests
