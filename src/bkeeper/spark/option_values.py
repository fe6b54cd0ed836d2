"""One option of the Spark data source read and typed: found whatever its case, an integer
above 0, a boolean, a duration; a ``ConfigError`` naming the option when it is not."""

from __future__ import annotations

import re
from collections.abc import Mapping

from bkeeper.common.errors import ConfigError

__all__ = ["bool_option", "duration_ms", "option_text", "positive_int"]

_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def option_text(options: Mapping[str, str], name: str) -> str | None:
    """The option ``name`` whatever its case (Spark lower-cases keys; tests may not)."""
    lowered = name.lower()
    for key, value in options.items():
        if key.lower() == lowered:
            return str(value)
    return None


def positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    text = option_text(options, name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"option {name}: {text!r} is not an integer") from None
    if value <= 0:
        raise ConfigError(f"option {name}: must be a positive integer, got {value}")
    return value


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = option_text(options, name)
    if text is None:
        return default
    if text.strip().lower() in ("true", "1", "yes"):
        return True
    if text.strip().lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {name}: {text!r} is not true or false")


def duration_ms(options: Mapping[str, str], name: str, default: int) -> int:
    """A duration such as ``500ms``, ``30s``, ``15m``, ``1h`` (a bare number is ms)."""
    text = option_text(options, name)
    if text is None:
        return default
    match = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|h|d)?\s*", text.lower())
    if match is None:
        raise ConfigError(f"option {name}: {text!r} is not a duration such as 500ms, 30s or 15m")
    return int(match.group(1)) * _DURATION_UNITS_MS[match.group(2) or "ms"]
