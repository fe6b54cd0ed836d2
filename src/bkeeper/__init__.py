"""bkeeper: Apache BookKeeper rebuilt in Python.

Layers (imports only go down; checked by import-linter, see pyproject.toml)::

    cli | spark | testing
    namedlog | autorecovery | statemachine
    server | client
    storage | wire | meta
    common

``from bkeeper import BookKeeper`` works, but the client is loaded only when asked for, so
``import bkeeper.wire`` (or ``bkeeper.storage``) loads that layer and what it needs, nothing
above it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bkeeper.client import BookKeeper, ClientConfig

__version__ = "0.1.0"

__all__ = ["BookKeeper", "ClientConfig", "__version__"]

_LAZY = {"BookKeeper", "ClientConfig"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:  # imported on first use, by name: the root loads no layer eagerly
        return getattr(importlib.import_module("bkeeper.client"), name)
    raise AttributeError(f"module 'bkeeper' has no attribute {name!r}")
