"""Replicated state machines on named logs: leader election, terms, catch-up, apply after
acknowledgement, followers that tail, snapshots in ledgers and log truncation.

:mod:`bkeeper.statemachine.machine` is the framework (:class:`StateMachine`,
:class:`ReplicatedStateMachine`), :mod:`bkeeper.statemachine.snapshots` keeps snapshots, and
:mod:`bkeeper.statemachine.dice` is the BookKeeper tutorial's replicated Dice on it.
"""

from bkeeper.statemachine.dice import Dice, DiceConfig
from bkeeper.statemachine.machine import (
    NOOP_PROPERTIES,
    ReplicatedStateMachine,
    Role,
    RsmConfig,
    StateMachine,
    election_path,
)
from bkeeper.statemachine.snapshots import SnapshotInfo, SnapshotStore, snapshot_path

__all__ = [
    "NOOP_PROPERTIES",
    "Dice",
    "DiceConfig",
    "ReplicatedStateMachine",
    "Role",
    "RsmConfig",
    "SnapshotInfo",
    "SnapshotStore",
    "StateMachine",
    "election_path",
    "snapshot_path",
]
