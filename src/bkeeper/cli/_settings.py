"""Bookie settings by name: ``-o key=value`` and ``--conf FILE`` for ``bkeeper bookie`` and
``bkeeper sandbox``.

Every field of :class:`~bkeeper.storage.StorageConfig`,
:class:`~bkeeper.server.BookieConfig` and (for ``--autorecovery``)
:class:`~bkeeper.autorecovery.config.AutoRecoveryConfig` can be set by its own name
(``journal_file_bytes_max``, ``connection_idle_timeout_ms``; the lists are in docs/storage.md
and docs/autorecovery.md), except ``data_dir``, which is
``--data-dir``. A config file holds one ``key=value`` a line; blank lines and lines starting
with ``#`` are skipped. Values are read by the field's type: integers (``64_000``, ``0x10``),
numbers, ``true``/``false``, ``none`` where a field may be unset, text, and lists of paths
separated by commas (``ledger_dirs=/mnt/a,/mnt/b``; empty: the default).

Apache BookKeeper's names of the same settings are aliases (``lostBookieRecoveryDelay``,
``journalDirectories``, ``minorCompactionInterval`` in seconds converted to ms; the table is
:mod:`bkeeper.cli._java_names`, docs/storage.md), a Java name bkeeper has no equivalent of is
refused saying why, and an unknown key gets the closest known name ("did you mean").

Which wins: a flag given on the command line, then ``-o`` (the last of a key), then the
config file, then the flags' defaults. Every mistake is one line naming where it is (the
``-o`` or the file and line) and the key: an unknown key, a value of the wrong type, a line
with no ``=``, a file that cannot be read. The configurations then check the values
themselves (``ConfigError``), as for any other caller.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.cli._java_names import JAVA_NAMES, JAVA_REFUSED, java_value
from bkeeper.common.errors import ConfigError
from bkeeper.common.messages import did_you_mean
from bkeeper.server import BookieConfig
from bkeeper.storage import StorageConfig

__all__ = [
    "CONF_BYTES_MAX",
    "SETTABLE",
    "Settings",
    "build_autorecovery_config",
    "build_configs",
    "convert_value",
    "merged",
    "named_setting",
    "read_settings",
    "settings_options",
]

F = TypeVar("F", bound=Callable[..., Any])

#: A config file larger than this is refused (it is a list of options, not data).
CONF_BYTES_MAX = 1024 * 1024

#: ``tls`` and ``auth`` have options of their own (``bkeeper.cli._security``).
_NOT_SETTABLE = frozenset({"data_dir", "extra", "tls", "auth"})


def _settable(cls: type[Any]) -> dict[str, str]:
    return {f.name: str(f.type) for f in dataclasses.fields(cls) if f.name not in _NOT_SETTABLE}


#: Key -> (the configuration it belongs to, its type as written in the dataclass).
SETTABLE: dict[str, tuple[type[Any], str]] = {
    **{name: (StorageConfig, kind) for name, kind in _settable(StorageConfig).items()},
    **{name: (BookieConfig, kind) for name, kind in _settable(BookieConfig).items()},
    **{name: (AutoRecoveryConfig, kind) for name, kind in _settable(AutoRecoveryConfig).items()},
}


def settings_options(whose: str) -> Callable[[F], F]:
    """The ``-o KEY=VALUE`` and ``--conf FILE`` options of a command; ``whose``: "this
    bookie" or "every bookie", for the help."""
    option = click.option(
        "-o",
        "--option",
        "options",
        multiple=True,
        metavar="KEY=VALUE",
        help=f"Set a storage or bookie option of {whose} by its name (docs/storage.md lists "
        "them); repeatable. Flags given win over -o, -o over --conf.",
    )
    conf = click.option(
        "--conf",
        type=click.Path(dir_okay=False),
        default=None,
        help=f"A file of KEY=VALUE lines (# comments) for {whose}, read before -o.",
    )

    def apply(command: F) -> F:
        return option(conf(command))

    return apply


def _bad(message: str) -> click.UsageError:
    """A mistake in the options: one line and exit status 2, as for any bad option."""
    return click.UsageError(message, ctx=click.get_current_context(silent=True))


def build_configs(data_dir: str, settings: Settings) -> tuple[BookieConfig, StorageConfig]:
    """The bookie's and the storage's configurations; a value they refuse is a usage error."""
    try:
        bookie = BookieConfig(data_dir=data_dir, **settings.bookie)  # type: ignore[arg-type]
        storage = StorageConfig(data_dir=data_dir, **settings.storage)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise _bad(str(exc)) from None
    return bookie, storage


def build_autorecovery_config(settings: Settings) -> AutoRecoveryConfig:
    """The configuration of auto-recovery run inside a bookie (``--autorecovery``)."""
    try:
        return AutoRecoveryConfig(**settings.autorecovery)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise _bad(str(exc)) from None


#: The type of a list field, as the dataclass writes it.
_PATHS = "tuple[str, ...]"
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


def convert_value(kind: str, text: str) -> object:
    """``text`` as a value of the type ``kind``; ValueError naming what it should be."""
    optional = kind.endswith(" | None")
    base = kind.removesuffix(" | None")
    if optional and text.lower() == "none":
        return None
    if base == "bool":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(f"{text!r} is not true or false")
    if base == "int":
        try:
            return int(text, 0)
        except ValueError:
            raise ValueError(f"{text!r} is not an integer") from None
    if base == "float":
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
    if base == _PATHS:
        return tuple(path.strip() for path in text.split(",") if path.strip())
    return text


def _text(value: object) -> str:
    """A value as ``-o`` reads it back."""
    return ",".join(value) if isinstance(value, tuple) else str(value)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Values by key, split by the configuration they belong to."""

    storage: Mapping[str, object]
    bookie: Mapping[str, object]
    autorecovery: Mapping[str, object] = dataclasses.field(default_factory=dict)

    def args(self) -> list[str]:
        """The same settings as ``-o key=value`` arguments (for bookies a sandbox starts)."""
        values = {**self.storage, **self.bookie, **self.autorecovery}
        return [arg for key, value in values.items() for arg in ("-o", f"{key}={_text(value)}")]


def _setting(where: str, line: str) -> tuple[str, object]:
    key, equals, text = line.partition("=")
    key, text = key.strip(), text.strip()
    if not equals or not key:
        raise _bad(f"{where}: {line.strip()!r} is not key=value")
    return named_setting(where, key, text, {k: kind for k, (_, kind) in SETTABLE.items()})


def named_setting(
    where: str,
    key: str,
    text: str,
    fields: Mapping[str, str],
    what: str = "bookie, storage or autorecovery",
    docs: str = "docs/storage.md and docs/autorecovery.md",
) -> tuple[str, object]:
    """The field of ``fields`` (name -> type) ``key`` names, by its name or Java
    BookKeeper's (bkeeper.cli._java_names), and ``text`` as its value; else a usage error
    naming ``where``: a bad value, Java's name of nothing here, or an unknown name and the
    closest known one."""
    java = JAVA_NAMES.get(key)
    field = key if key in fields else java.ours if java is not None else None
    if field is not None and field in fields:
        try:
            value = text if java is None else java_value(java, text)
            return field, convert_value(fields[field], value)
        except ValueError as exc:
            said = key if java is None else f"{key} (Java's name of {field})"
            raise _bad(f"{where}: {said}: {exc}") from None
    if java is not None:
        raise _bad(
            f"{where}: Java's {key!r} is bkeeper's {java.ours}, not one of the {what} options"
        )
    if key in JAVA_REFUSED:
        raise _bad(f"{where}: Java's {key!r} has no bkeeper equivalent: {JAVA_REFUSED[key]}")
    java_here = [j for j, n in JAVA_NAMES.items() if n.ours in fields]
    close = did_you_mean(key, [*fields, *java_here])
    if not close:
        hint = f" (the names are the fields listed in {docs}, and Java BookKeeper's there)"
    elif close[0] in fields:
        hint = f"; did you mean {close[0]!r}?"
    else:
        hint = f"; did you mean {close[0]!r} (Java's name of {JAVA_NAMES[close[0]].ours})?"
    raise _bad(f"{where}: no {what} option named {key!r}{hint}")


def _read_conf(path: str) -> list[tuple[str, object]]:
    try:
        size = Path(path).stat().st_size
        if size > CONF_BYTES_MAX:
            raise _bad(f"--conf {path}: {size} bytes, more than {CONF_BYTES_MAX}")
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _bad(f"--conf {path}: cannot read it: {exc}") from None
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            found.append(_setting(f"--conf {path} line {number}", line))
    return found


def merged(low: Settings, high: Settings) -> Settings:
    """``high``'s values over ``low``'s."""
    return Settings(
        {**low.storage, **high.storage},
        {**low.bookie, **high.bookie},
        {**low.autorecovery, **high.autorecovery},
    )


def read_settings(
    conf: str | None, options: Iterable[str], given: Mapping[str, object] | None = None
) -> Settings:
    """The settings of ``--conf conf`` then each ``-o`` of ``options`` (later ones win), then
    ``given``: values of flags given on the command line, by key (they win over both)."""
    values: dict[str, object] = {}
    if conf is not None:
        values.update(_read_conf(conf))
    for option in options:
        key, value = _setting(f"-o {option}", option)
        values[key] = value
    values.update(given or {})
    storage = {k: v for k, v in values.items() if SETTABLE[k][0] is StorageConfig}
    bookie = {k: v for k, v in values.items() if SETTABLE[k][0] is BookieConfig}
    autorecovery = {k: v for k, v in values.items() if SETTABLE[k][0] is AutoRecoveryConfig}
    return Settings(storage, bookie, autorecovery)
