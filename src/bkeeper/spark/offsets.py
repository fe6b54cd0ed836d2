"""Positions in the Spark data source's options and streaming offsets, as JSON: ``{"<log>":
{"ledger": L, "entry": E}}`` (``"index": I`` too for a record inside a batch, only when not
0), ``"earliest"`` or ``"latest"``; and start or end timestamps, one or per log.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from bkeeper.common.errors import ConfigError
from bkeeper.namedlog import EARLIEST, LATEST, Position
from bkeeper.namedlog.core import check_log_name
from bkeeper.spark.option_values import option_text

__all__ = [
    "PositionSpec",
    "offset_from_positions",
    "positions_from_offset",
    "start_end",
    "timestamps",
]

#: Where to start or stop in one log: earliest, latest or an exact position.
PositionSpec = str | Position


def _position(log: str, value: Any, option: str) -> PositionSpec:
    if value in (EARLIEST, LATEST):
        return str(value)
    if isinstance(value, dict) and set(value) in ({"ledger", "entry"}, _WITH_INDEX):
        parts = [value["ledger"], value["entry"], value.get("index", 0)]
        if all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts):
            return Position(*parts)
    raise ConfigError(
        f'option {option}: position of log {log!r} must be "earliest", "latest" or '
        f'{{"ledger": L, "entry": E}} (or with "index": I, a record of a batch) with L, E, '
        f"I >= 0; got {json.dumps(value)}"
    )


_WITH_INDEX = {"ledger", "entry", "index"}


def positions_from_offset(
    text: str | Mapping[str, Any], option: str = "offset"
) -> dict[str, PositionSpec]:
    """Parse ``{"<log>": {"ledger": L, "entry": E} | "earliest" | "latest"}``."""
    doc: Any = text
    if isinstance(text, str):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"option {option}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"option {option}: must be a JSON object of log name to position")
    return {check_log_name(log): _position(log, value, option) for log, value in doc.items()}


def offset_from_positions(positions: Mapping[str, Position]) -> dict[str, Any]:
    """The JSON-able offset of exact positions (sorted by log name)."""
    return {log: _offset(position) for log, position in sorted(positions.items())}


def _offset(position: Position) -> dict[str, int]:
    offset = {"ledger": position.ledger_id, "entry": position.entry_id}
    if position.index:
        offset["index"] = position.index
    return offset


def start_end(
    options: Mapping[str, str],
    name: str,
    streaming: bool | None,
    allow: tuple[str, ...],
    example_log: str = "events",
) -> tuple[dict[str, PositionSpec], str | None]:
    """Per-log positions and the default for logs not named."""
    text = option_text(options, name)
    if text is None:
        return {}, None
    if text.strip().lower() in allow:
        return {}, text.strip().lower()
    if text.strip().lower() in (EARLIEST, LATEST):
        mode = "streaming" if streaming else "batch"
        raise ConfigError(f"option {name}: {text.strip()!r} is not allowed for {mode} reads")
    if not text.strip().startswith("{"):
        example = json.dumps({example_log: {"ledger": 12, "entry": 0}})
        raise ConfigError(
            f"option {name}: {text.strip()!r} is not {', '.join(allow)} or a JSON object of "
            f"log name to position such as {example}"
        )
    return positions_from_offset(text, name), None


def timestamps(options: Mapping[str, str], name: str) -> tuple[int | None, dict[str, int]]:
    """One timestamp (ms since the epoch) for every log, or a JSON object of log name to
    timestamp (Kafka's ``startingOffsetsByTimestamp`` in one option)."""
    text = option_text(options, name)
    if text is None:
        return None, {}
    what = "milliseconds since the epoch or a JSON object of log name to milliseconds"
    if text.strip().startswith("{"):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"option {name}: not valid JSON ({exc})") from None
        found = {}
        for log, value in doc.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"option {name}: log {log!r} maps to {value!r}, not {what}")
            found[check_log_name(log)] = value
        return None, found
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"option {name}: {text!r} is not {what}") from None
    if value < 0:
        raise ConfigError(f"option {name}: must be >= 0")
    return value, {}
