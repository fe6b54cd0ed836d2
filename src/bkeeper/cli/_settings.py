"""Bookie settings by name: ``-o key=value`` and ``--conf FILE`` for ``bkeeper bookie`` and
``bkeeper sandbox``.

Every field of :class:`~bkeeper.storage.StorageConfig`,
:class:`~bkeeper.server.BookieConfig` and (for ``--autorecovery``)
:class:`~bkeeper.autorecovery.config.AutoRecoveryConfig` can be set by its own name
(``journal_file_bytes_max``, ``connection_idle_timeout_ms``; the lists are in docs/storage.md
and docs/autorecovery.md), except ``data_dir``, which is ``--data-dir``, and ``tls`` and
``auth``, which have options of their own (:mod:`bkeeper.cli._security`). The file's format,
the values by type, Java BookKeeper's names as aliases and how mistakes are named are
:mod:`bkeeper.cli._conf`'s, the reader every command with ``--conf`` shares; lists of paths
are separated by commas (``ledger_dirs=/mnt/a,/mnt/b``; empty: the default).

Which wins: a flag given on the command line, then ``-o`` (the last of a key), then the
config file, then the flags' defaults. Every mistake is one line naming where it is (the
``-o`` or the file and line) and the key: an unknown key, a value of the wrong type, a line
with no ``=``, a file that cannot be read; and a value the configurations then refuse
(``ConfigError``, as for any other caller) names where it was set the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.cli._conf import (
    CONF_BYTES_MAX,
    NamedValues,
    OptionNames,
    build_config,
    convert_value,
    fields_of,
    named_options,
    named_setting,
    read_named,
)
from bkeeper.server import BookieConfig
from bkeeper.storage import StorageConfig

__all__ = [
    "BOOKIE_NAMES",
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

#: ``tls`` and ``auth`` have options of their own (``bkeeper.cli._security``).
_NOT_SETTABLE = frozenset({"data_dir", "extra", "tls", "auth"})

#: Key -> (the configuration it belongs to, its type as written in the dataclass).
SETTABLE: dict[str, tuple[type[Any], str]] = {
    name: (cls, kind)
    for cls in (StorageConfig, BookieConfig, AutoRecoveryConfig)
    for name, kind in fields_of(cls, _NOT_SETTABLE).items()
}

#: The keys of a bookie's ``-o`` and ``--conf``.
BOOKIE_NAMES = OptionNames(
    {name: kind for name, (_, kind) in SETTABLE.items()},
    "bookie, storage or autorecovery",
    "docs/storage.md and docs/autorecovery.md",
)


def settings_options(whose: str) -> Callable[[F], F]:
    """The ``-o KEY=VALUE`` and ``--conf FILE`` options of a command; ``whose``: "this
    bookie" or "every bookie", for the help."""
    return named_options(
        f"Set a storage or bookie option of {whose} by its name (docs/storage.md lists "
        "them); repeatable. Flags given win over -o, -o over --conf.",
        f"A file of KEY=VALUE lines (# comments) for {whose}, read before -o.",
    )


def build_configs(data_dir: str, settings: Settings) -> tuple[BookieConfig, StorageConfig]:
    """The bookie's and the storage's configurations; a value they refuse is a usage error
    naming where it was set."""
    named = settings.named()
    bookie = build_config(BookieConfig, named, data_dir=data_dir)
    storage = build_config(StorageConfig, named, data_dir=data_dir)
    return bookie, storage


def build_autorecovery_config(settings: Settings) -> AutoRecoveryConfig:
    """The configuration of auto-recovery run inside a bookie (``--autorecovery``)."""
    return build_config(AutoRecoveryConfig, settings.named())


def _text(value: object) -> str:
    """A value as ``-o`` reads it back."""
    return ",".join(value) if isinstance(value, tuple) else str(value)


@dataclasses.dataclass(frozen=True)
class Settings:
    """Values by key, split by the configuration they belong to; ``origins``: where each
    value read from ``-o`` or a file was set (not compared)."""

    storage: Mapping[str, object]
    bookie: Mapping[str, object]
    autorecovery: Mapping[str, object] = dataclasses.field(default_factory=dict)
    origins: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

    def args(self) -> list[str]:
        """The same settings as ``-o key=value`` arguments (for bookies a sandbox starts)."""
        values = {**self.storage, **self.bookie, **self.autorecovery}
        return [arg for key, value in values.items() for arg in ("-o", f"{key}={_text(value)}")]

    def named(self) -> NamedValues:
        """Every value by key, with their origins."""
        return NamedValues({**self.storage, **self.bookie, **self.autorecovery}, self.origins)


def merged(low: Settings, high: Settings) -> Settings:
    """``high``'s values over ``low``'s."""
    high_keys = {*high.storage, *high.bookie, *high.autorecovery}
    return Settings(
        {**low.storage, **high.storage},
        {**low.bookie, **high.bookie},
        {**low.autorecovery, **high.autorecovery},
        {
            **{key: where for key, where in low.origins.items() if key not in high_keys},
            **high.origins,
        },
    )


def read_settings(
    conf: str | None, options: Iterable[str], given: Mapping[str, object] | None = None
) -> Settings:
    """The settings of ``--conf conf`` then each ``-o`` of ``options`` (later ones win), then
    ``given``: values of flags given on the command line, by key (they win over both)."""
    named = read_named(conf, options, BOOKIE_NAMES)
    values = {**named.values, **(given or {})}
    origins = {key: where for key, where in named.origins.items() if key not in (given or {})}
    storage = {k: v for k, v in values.items() if SETTABLE[k][0] is StorageConfig}
    bookie = {k: v for k, v in values.items() if SETTABLE[k][0] is BookieConfig}
    autorecovery = {k: v for k, v in values.items() if SETTABLE[k][0] is AutoRecoveryConfig}
    return Settings(storage, bookie, autorecovery, origins)
