"""Options by name: ``-o KEY=VALUE`` and ``--conf FILE``, one reader for every command that
takes them (``bkeeper bookie`` and ``bkeeper sandbox`` through :mod:`bkeeper.cli._settings`,
``bkeeper autorecovery``, ``bkeeper dashboard``).

A command names the keys it takes (:class:`OptionNames`: key -> type, as its configuration
dataclasses write the field; :func:`fields_of`). A config file holds one ``key=value`` a
line; blank lines and lines starting with ``#`` are skipped; it is at most
:data:`CONF_BYTES_MAX`. Values are read by the field's type (:func:`convert_value`):
integers (``64_000``, ``0x10``), numbers, ``true``/``false``, ``none`` where a field may be
unset, text, and lists of paths separated by commas. Apache BookKeeper's names of the same
settings are aliases (:mod:`bkeeper.cli._java_names`), a Java name with no equivalent is
refused saying why, and an unknown key gets the closest known name ("did you mean").

Which wins (:func:`command_values`): a flag given on the command line, then ``-o`` (the last
of a key), then the config file, then the flags' defaults. Every mistake is one usage error
(exit status 2) naming where it is, the ``-o`` or the file and line, and the key: an unknown
key, a value of the wrong type, a line with no ``=``, a file that cannot be read; and a value
the configuration then refuses (out of range: :func:`config_refused`) names where it was set
the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click
from click.core import ParameterSource

from bkeeper.cli._java_names import JAVA_NAMES, JAVA_REFUSED, java_value
from bkeeper.common.errors import ConfigError
from bkeeper.common.messages import did_you_mean

__all__ = [
    "CONF_BYTES_MAX",
    "NamedValues",
    "OptionNames",
    "build_config",
    "command_values",
    "config_refused",
    "convert_value",
    "fields_of",
    "named_options",
    "named_setting",
    "read_named",
    "usage_error",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")

#: A config file larger than this is refused (it is a list of options, not data).
CONF_BYTES_MAX = 1024 * 1024


def usage_error(message: str) -> click.UsageError:
    """A mistake in the options: one line and exit status 2, as for any bad option."""
    return click.UsageError(message, ctx=click.get_current_context(silent=True))


def fields_of(cls: type[Any], excluded: Iterable[str] = ()) -> dict[str, str]:
    """The fields of the dataclass ``cls`` but ``excluded``: name -> type as written."""
    left_out = frozenset(excluded)
    return {f.name: str(f.type) for f in dataclasses.fields(cls) if f.name not in left_out}


@dataclasses.dataclass(frozen=True)
class OptionNames:
    """The keys one command's ``-o`` and ``--conf`` take (name -> type, as the dataclass
    writes it), and how its messages name them: ``what`` ("dashboard": "no dashboard option
    named ..."), ``docs`` (where the names are listed)."""

    fields: Mapping[str, str]
    what: str
    docs: str


@dataclasses.dataclass(frozen=True)
class NamedValues:
    """Values by key, and where each one read from ``-o`` or a file was set
    (``--conf FILE line N``, ``-o KEY=VALUE``; a flag's value has no entry)."""

    values: Mapping[str, object]
    origins: Mapping[str, str] = dataclasses.field(default_factory=dict)


def named_options(o_help: str, conf_help: str) -> Callable[[F], F]:
    """A command's ``-o KEY=VALUE`` (parameter ``options``) and ``--conf FILE`` (``conf``)."""
    option = click.option(
        "-o", "--option", "options", multiple=True, metavar="KEY=VALUE", help=o_help
    )
    conf = click.option("--conf", type=click.Path(dir_okay=False), default=None, help=conf_help)

    def apply(command: F) -> F:
        return option(conf(command))

    return apply


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
            raise usage_error(f"{where}: {said}: {exc}") from None
    if java is not None:
        raise usage_error(
            f"{where}: Java's {key!r} is bkeeper's {java.ours}, not one of the {what} options"
        )
    if key in JAVA_REFUSED:
        raise usage_error(f"{where}: Java's {key!r} has no bkeeper equivalent: {JAVA_REFUSED[key]}")
    java_here = [j for j, n in JAVA_NAMES.items() if n.ours in fields]
    close = did_you_mean(key, [*fields, *java_here])
    if not close:
        hint = f" (the names are the fields listed in {docs}, and Java BookKeeper's there)"
    elif close[0] in fields:
        hint = f"; did you mean {close[0]!r}?"
    else:
        hint = f"; did you mean {close[0]!r} (Java's name of {JAVA_NAMES[close[0]].ours})?"
    raise usage_error(f"{where}: no {what} option named {key!r}{hint}")


def _setting(where: str, line: str, names: OptionNames) -> tuple[str, object]:
    key, equals, text = line.partition("=")
    key, text = key.strip(), text.strip()
    if not equals or not key:
        raise usage_error(f"{where}: {line.strip()!r} is not key=value")
    return named_setting(where, key, text, names.fields, names.what, names.docs)


def _conf_lines(path: str) -> list[tuple[str, str]]:
    """``(where, line)`` of each setting line of the file (not blank, not a comment)."""
    try:
        size = Path(path).stat().st_size
        if size > CONF_BYTES_MAX:
            raise usage_error(f"--conf {path}: {size} bytes, more than {CONF_BYTES_MAX}")
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise usage_error(f"--conf {path}: cannot read it: {exc}") from None
    return [
        (f"--conf {path} line {number}", line)
        for number, line in enumerate(text.splitlines(), 1)
        if line.strip() and not line.lstrip().startswith("#")
    ]


def read_named(conf: str | None, options: Iterable[str], names: OptionNames) -> NamedValues:
    """The values of the file ``conf``, then of each ``-o`` of ``options`` (later ones
    win), by key, with where each was set."""
    lines = _conf_lines(conf) if conf is not None else []
    lines += [(f"-o {option}", option) for option in options]
    values: dict[str, object] = {}
    origins: dict[str, str] = {}
    for where, line in lines:
        key, value = _setting(where, line, names)
        values[key], origins[key] = value, where
    return NamedValues(values, origins)


def command_values(
    conf: str | None,
    options: Iterable[str],
    names: OptionNames,
    flags: Mapping[str, tuple[str, object]],
) -> NamedValues:
    """What the running command's settings are: ``flags`` maps each flag's parameter name to
    ``(key, value)``; a flag given on the command line wins, then ``-o``, then ``--conf``,
    then the flag's default (its value when not given: the environment variable behind a
    default is a default too)."""
    context = click.get_current_context()
    given = {
        key: value
        for parameter, (key, value) in flags.items()
        if context.get_parameter_source(parameter) is not ParameterSource.DEFAULT
    }
    named = read_named(conf, options, names)
    values = {**dict(flags.values()), **named.values, **given}
    origins = {key: where for key, where in named.origins.items() if key not in given}
    return NamedValues(values, origins)


def config_refused(exc: ConfigError, origins: Mapping[str, str]) -> click.UsageError:
    """A value a configuration refused (its message starts with the field's name) as a usage
    error, naming where the value was set when ``-o`` or a file set it."""
    where = origins.get(str(exc).partition(":")[0])
    return usage_error(f"{where}: {exc}" if where else str(exc))


def build_config(cls: Callable[..., T], named: NamedValues, **fixed: object) -> T:
    """``cls`` (a configuration dataclass) from the values of ``named`` that are its fields,
    and ``fixed``; a value it refuses is a usage error (:func:`config_refused`)."""
    fields = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values = {key: value for key, value in named.values.items() if key in fields}
    try:
        return cls(**values, **fixed)
    except ConfigError as exc:
        raise config_refused(exc, named.origins) from None
