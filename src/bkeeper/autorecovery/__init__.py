"""Auto-recovery: keeping every entry at its replication factor.

For now the bookie's data integrity check (``integrity``: repair the ledgers in limbo), the
pure decision of which entries a bookie should hold (``expected``) and the entry copier that
the replication worker will reuse (``entry_copy``). On the layer above ``server`` and
``client``: may import both, and ``meta``.
"""

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
