"""Shared validators for the frozen configuration dataclasses.

Each component's config checks itself in ``__post_init__`` with these, so the same mistake is
reported in the same words everywhere: one :class:`ConfigError` line that names the field, what
it must be, and what it got (``write_cache_bytes_max: must be a positive integer, got 0``).
Booleans are refused where integers are expected (``True`` is an ``int`` to Python, never a
size to a user).
"""

from __future__ import annotations

from bkeeper.common.errors import ConfigError

__all__ = [
    "check_int_in_range",
    "check_non_negative_ints",
    "check_number_in_range",
    "check_port",
    "check_positive_ints",
    "check_quorum",
]


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_positive_ints(config: object, *names: str) -> None:
    """Each named field of ``config`` is an integer > 0."""
    for name in names:
        value = getattr(config, name)
        if not _is_int(value) or value <= 0:
            raise ConfigError(f"{name}: must be a positive integer, got {value!r}")


def check_non_negative_ints(config: object, *names: str) -> None:
    """Each named field of ``config`` is an integer >= 0 (0 usually meaning "off")."""
    for name in names:
        value = getattr(config, name)
        if not _is_int(value) or value < 0:
            raise ConfigError(f"{name}: must be an integer >= 0, got {value!r}")


def check_int_in_range(name: str, value: object, low: int, high: int) -> None:
    """``value`` is an integer in ``low..high`` (both included)."""
    if not (isinstance(value, int) and not isinstance(value, bool) and low <= value <= high):
        raise ConfigError(f"{name}: must be an integer in {low}..{high}, got {value!r}")


def check_number_in_range(name: str, value: object, low: float, high: float) -> None:
    """``value`` is a number (int or float, not bool) in ``low..high`` (both included)."""
    if not (
        isinstance(value, int | float) and not isinstance(value, bool) and low <= value <= high
    ):
        raise ConfigError(f"{name}: must be {low}..{high}, got {value!r}")


def check_port(name: str, value: object, *, zero_allowed: bool = True) -> None:
    """``value`` is a TCP port (0 meaning "any free port" unless ``zero_allowed`` is false)."""
    low = 0 if zero_allowed else 1
    if not (isinstance(value, int) and not isinstance(value, bool) and low <= value <= 65535):
        raise ConfigError(f"{name}: {value!r} is not a TCP port ({low}..65535)")


def check_quorum(ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
    """``ensemble_size >= write_quorum >= ack_quorum >= 1``, as BookKeeper requires."""
    sizes = (ensemble_size, write_quorum, ack_quorum)
    if not all(_is_int(size) for size in sizes) or not (
        ensemble_size >= write_quorum >= ack_quorum >= 1
    ):
        raise ConfigError(
            "need ensemble_size >= write_quorum >= ack_quorum >= 1, got "
            f"{ensemble_size}/{write_quorum}/{ack_quorum}"
        )
