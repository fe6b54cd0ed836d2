"""Auto-recovery: keeping every entry at its replication factor.

For now the bookie's data integrity check (``integrity``: repair the ledgers in limbo), the
pure decision of which entries a bookie should hold (``expected``) and the entry copier that
the replication worker will reuse (``entry_copy``). On the layer above ``server`` and
``client``: may import both, and ``meta``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from bkeeper.autorecovery.entry_copy import EntrySink, copy_entries
    from bkeeper.autorecovery.expected import expected_entries, missing_entries
    from bkeeper.autorecovery.integrity import (
        IntegrityCheckConfig,
        IntegrityReport,
        check_bookie,
        check_storage,
        run_integrity_check,
    )

__all__ = [
    "EntrySink",
    "IntegrityCheckConfig",
    "IntegrityReport",
    "check_bookie",
    "check_storage",
    "copy_entries",
    "expected_entries",
    "missing_entries",
    "run_integrity_check",
]

# Each name is imported on first use from its module: a module of the package (``admin``,
# read by ``bkeeper shell whoisauditor``) loads without the bookie that ``integrity`` checks.
_MODULES = {
    "EntrySink": "entry_copy",
    "copy_entries": "entry_copy",
    "expected_entries": "expected",
    "missing_entries": "expected",
    "IntegrityCheckConfig": "integrity",
    "IntegrityReport": "integrity",
    "check_bookie": "integrity",
    "check_storage": "integrity",
    "run_integrity_check": "integrity",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'bkeeper.autorecovery' has no attribute {name!r}")
    return getattr(importlib.import_module(f"bkeeper.autorecovery.{module}"), name)
