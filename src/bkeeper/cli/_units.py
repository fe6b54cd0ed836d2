"""Sizes and durations as a person types and reads them: ``64MiB``, ``10G``, ``2s``, ``1h``,
``7d``. Parsed into bytes and milliseconds, shown back in the largest unit that divides them
(``64MiB``, ``1h``; ``0`` for zero). Options of these types fail with one ``error: ...`` line
naming the option and the value (exit 1).

Sizes: a whole number with an optional unit ``K``, ``M``, ``G``, ``T`` (``KiB``... or ``KB``...
alike: powers of 1024) or ``B``. Durations: a whole number and a unit ``ms``, ``s``, ``m``,
``h``, ``d`` or ``w``; a bare ``0`` is allowed (0: off).
"""

from __future__ import annotations

import re

import click

from bkeeper.cli._errors import CommandError

__all__ = ["DURATION", "SIZE", "format_duration", "format_size", "parse_duration", "parse_size"]

_SIZE_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_DURATION_UNITS = {
    "ms": 1,
    "s": 1_000,
    "m": 60_000,
    "h": 3_600_000,
    "d": 86_400_000,
    "w": 604_800_000,
}
_SIZE = re.compile(r"(\d+)\s*(?:([KMGT])(?:I?B)?|(B))?", re.IGNORECASE)
_DURATION = re.compile(r"(\d+)\s*(ms|s|m|h|d|w)")


def parse_size(text: str, what: str = "size") -> int:
    """Bytes of ``64MiB``, ``10G``, ``4096``; a ``CommandError`` naming ``what`` if not one."""
    found = _SIZE.fullmatch(text.strip())
    if found is None:
        raise CommandError(
            f"{what}: {text!r} is not a size: use a whole number and a unit K, M, G or T "
            "(powers of 1024), like 64MiB or 10G"
        )
    unit = (found.group(2) or found.group(3) or "").upper()
    return int(found.group(1)) * _SIZE_UNITS[unit]


def parse_duration(text: str, what: str = "duration") -> int:
    """Milliseconds of ``2s``, ``1h``, ``7d`` (or ``0``); a ``CommandError`` naming ``what``."""
    text = text.strip()
    if text == "0":
        return 0
    found = _DURATION.fullmatch(text)
    if found is None:
        raise CommandError(
            f"{what}: {text!r} is not a duration: use a whole number and a unit ms, s, m, h, "
            "d or w, like 2s, 1h or 7d"
        )
    return int(found.group(1)) * _DURATION_UNITS[found.group(2)]


def format_size(size: int) -> str:
    """``64MiB``, ``10GiB``, ``1000B`` (the largest unit that divides it; ``0``)."""
    if size == 0:
        return "0"
    for unit in ("T", "G", "M", "K"):
        scale = _SIZE_UNITS[unit]
        if size % scale == 0:
            return f"{size // scale}{unit}iB"
    return f"{size}B"


def format_duration(ms: int) -> str:
    """``2s``, ``1h``, ``7d``, ``1500ms`` (the largest unit that divides it; ``0``)."""
    if ms == 0:
        return "0"
    for unit in ("d", "h", "m", "s"):
        scale = _DURATION_UNITS[unit]
        if ms % scale == 0:
            return f"{ms // scale}{unit}"
    return f"{ms}ms"


class _Size(click.ParamType[int, object]):
    name = "SIZE"

    def convert(self, value: object, param: click.Parameter | None, ctx: object) -> int:
        if isinstance(value, int):
            return value
        return parse_size(str(value), _option(param))


class _Duration(click.ParamType[int, object]):
    name = "DURATION"

    def convert(self, value: object, param: click.Parameter | None, ctx: object) -> int:
        if isinstance(value, int):
            return value
        return parse_duration(str(value), _option(param))


def _option(param: click.Parameter | None) -> str:
    if param is None:
        return "value"
    opts = getattr(param, "opts", None) or [param.name or "value"]
    return str(max(opts, key=len))


#: A click option type: bytes (module docstring).
SIZE = _Size()
#: A click option type: milliseconds (module docstring).
DURATION = _Duration()
