"""The settings a log stores with itself, as ``bkeeper log create`` / ``log config`` take
them and as ``log config`` / ``log list`` show them (:class:`bkeeper.namedlog.core.config.
LogSettings`).

Options: ``-e/--ensemble``, ``--write-quorum``, ``--ack-quorum``, ``--roll-size``,
``--roll-age``, ``--retention-age``, ``--retention-size``,
``--retention-consumed/--no-retention-consumed`` and (``log config``) ``--unset NAME``.
Ensemble and quorums are stored together: the ones not given are completed from the log's
stored ones, else from a writer's defaults (3/3/2), kept possible (``-e 1`` stores 1/1/1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from bkeeper.cli._errors import CommandError
from bkeeper.cli._units import DURATION, SIZE, format_duration, format_size
from bkeeper.common.errors import ConfigError
from bkeeper.namedlog.core import SETTING_NAMES, LogConfig, LogSettings

__all__ = [
    "UNSET_NAMES",
    "changed_settings",
    "settings_change_lines",
    "settings_lines",
    "settings_options",
    "settings_summary",
]

F = TypeVar("F", bound=Callable[..., Any])

#: ``--unset`` names and the stored settings each unsets.
UNSET_NAMES: dict[str, tuple[str, ...]] = {
    "retention-age": ("retention_age_ms",),
    "retention-size": ("retention_bytes",),
    "retention-consumed": ("retention_consumed",),
    "roll-size": ("roll_bytes",),
    "roll-age": ("roll_age_ms",),
    "replication": ("ensemble_size", "write_quorum", "ack_quorum"),
    "all": SETTING_NAMES,
}
_REPLICATION = ("ensemble_size", "write_quorum", "ack_quorum")
#: What ``log config`` shows, in order: label and the stored settings behind it.
_SHOWN = (
    ("retention age", "retention_age_ms"),
    ("retention size", "retention_bytes"),
    ("retention consumed", "retention_consumed"),
    ("roll size", "roll_bytes"),
    ("roll age", "roll_age_ms"),
    ("ensemble/quorums", "replication"),
)


class _Count(click.ParamType[int, object]):
    name = "N"

    def convert(self, value: object, param: click.Parameter | None, ctx: object) -> int:
        text = str(value).strip()
        if not text.isdecimal() or int(text) < 1:
            what = param.opts[-1] if param is not None and param.opts else "value"
            raise CommandError(f"{what}: {text!r} is not a whole number of at least 1")
        return int(text)


_COUNT = _Count()


def settings_options(func: F) -> F:
    """The options of the settings a log stores (module docstring), as keyword arguments
    named like ``LogSettings``' fields (None: not given)."""
    options = (
        click.option(
            "-e",
            "--ensemble",
            "ensemble_size",
            type=_COUNT,
            default=None,
            help="Bookies each new ledger of the log is spread over.",
        ),
        click.option(
            "--write-quorum",
            "write_quorum",
            type=_COUNT,
            default=None,
            help="Bookies each record is written to.",
        ),
        click.option(
            "--ack-quorum",
            "ack_quorum",
            type=_COUNT,
            default=None,
            help="Bookies that must acknowledge a record before it counts.",
        ),
        click.option(
            "--roll-size",
            "roll_bytes",
            type=SIZE,
            default=None,
            help="Start a new ledger once the current one holds this much (like "
            "64MiB; writers' default 256MiB).",
        ),
        click.option(
            "--roll-age",
            "roll_age_ms",
            type=DURATION,
            default=None,
            help="Start a new ledger once the current one is this old and holds "
            "records, also with no append coming (like 2s, 1h; 0: never, the "
            "default).",
        ),
        click.option(
            "--retention-age",
            "retention_age_ms",
            type=DURATION,
            default=None,
            help="Delete sealed ledgers whose records are all older than this "
            "(like 7d; 0: off, the default).",
        ),
        click.option(
            "--retention-size",
            "retention_bytes",
            type=SIZE,
            default=None,
            help="Keep at most this much of sealed ledgers, deleting the oldest "
            "(like 10GiB; 0: off, the default).",
        ),
        click.option(
            "--retention-consumed/--no-retention-consumed",
            "retention_consumed",
            default=None,
            help="Delete the sealed ledgers every subscription has consumed (a "
            "log with no subscription keeps them).",
        ),
    )
    for option in reversed(options):
        func = option(func)
    return func


def changed_settings(
    settings: LogSettings, given: dict[str, Any], unset: tuple[str, ...] = ()
) -> LogSettings:
    """``settings`` with the ``unset`` names (:data:`UNSET_NAMES`) unset, then the options
    ``given`` (None: not given) set; a ``CommandError`` for an impossible combination."""
    changes: dict[str, Any] = {}
    for name in unset:
        if name not in UNSET_NAMES:
            raise CommandError(f"--unset {name}: use one of {', '.join(UNSET_NAMES)}")
        changes.update(dict.fromkeys(UNSET_NAMES[name]))
    changes.update({k: v for k, v in given.items() if v is not None and k not in _REPLICATION})
    sizes = [given.get(name) for name in _REPLICATION]
    if any(size is not None for size in sizes):
        changes.update(zip(_REPLICATION, _completed(settings, *sizes), strict=True))
    try:
        return settings.changed(**changes)
    except ConfigError as exc:  # its one line says which setting
        raise CommandError(str(exc)) from exc


def _completed(
    settings: LogSettings, ensemble: int | None, write: int | None, ack: int | None
) -> tuple[int, int, int]:
    """Ensemble and quorums with the ones not given filled in (module docstring)."""
    default = LogConfig()
    e0 = settings.ensemble_size or default.ensemble_size
    w0 = settings.write_quorum or default.write_quorum
    a0 = settings.ack_quorum or default.ack_quorum
    e = ensemble or max(e0, write or 0, ack or 0)
    w = write or max(min(w0, e), ack or 0)
    a = ack or min(a0, w)
    return e, w, a


def _value(settings: LogSettings, name: str) -> str:
    """A setting as shown: ``-`` when not set."""
    if name == "replication":
        if settings.ensemble_size is None:
            return "-"
        return f"{settings.ensemble_size}/{settings.write_quorum}/{settings.ack_quorum}"
    value = getattr(settings, name)
    if value is None:
        return "-"
    return _shown(name, value)


def _shown(name: str, value: int | bool) -> str:
    if name == "retention_consumed":
        return "on" if value else "off"
    if name == "roll_bytes":
        return format_size(int(value))
    if value == 0:
        return "off"
    if name == "retention_bytes":
        return format_size(int(value))
    return format_duration(int(value))


def _default(name: str) -> str:
    config = LogConfig()
    if name == "replication":
        return f"{config.ensemble_size}/{config.write_quorum}/{config.ack_quorum}"
    return _shown(name, getattr(config, name))


def settings_lines(log_name: str, settings: LogSettings) -> list[str]:
    """``log config NAME``'s report: each setting stored, or ``-`` and the writers'
    default."""
    lines = [f"settings of log {log_name} (-: not set, a writer's own default applies)"]
    for label, name in _SHOWN:
        value = _value(settings, name)
        if value == "-":
            value = f"-  (default {_default(name)})"
        lines.append(f"  {label:<20}{value}")
    lines += [f"  {name:<20}{text}  (not known to this version)" for name, text in settings.others]
    return lines


def settings_change_lines(log_name: str, before: LogSettings, after: LogSettings) -> list[str]:
    """``log config NAME --...``'s report: each setting that changed, before -> after."""
    changed = [
        f"  {label:<20}{_value(before, name)} -> {_value(after, name)}"
        for label, name in _SHOWN
        if _value(before, name) != _value(after, name)
    ]
    if not changed:
        return [f"settings of log {log_name} unchanged"]
    return [f"settings of log {log_name} changed:", *changed]


def settings_summary(settings: LogSettings) -> tuple[str, str, str]:
    """``log list``'s cells: retention, roll, ensemble/quorums (``-``: nothing set)."""
    retention = []
    if settings.retention_consumed is not None:
        retention.append("consumed" if settings.retention_consumed else "not consumed")
    for name, what in (("retention_age_ms", "age"), ("retention_bytes", "size")):
        if getattr(settings, name) is not None:
            value = _value(settings, name)
            retention.append(f"{what} off" if value == "off" else value)
    roll = [_value(settings, "roll_bytes")] if settings.roll_bytes is not None else []
    if settings.roll_age_ms is not None:
        value = _value(settings, "roll_age_ms")
        roll.append("age off" if value == "off" else value)
    return ", ".join(retention) or "-", ", ".join(roll) or "-", _value(settings, "replication")
