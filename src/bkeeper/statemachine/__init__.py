"""Replicated state machines on named logs: leader election, terms, catch-up, apply after
acknowledgement, followers that tail, snapshots in ledgers and log truncation.

:mod:`~bkeeper.statemachine.protocol` holds what a state machine is made of
(:class:`StateMachine`, :class:`RsmConfig`, the record formats);
:mod:`~bkeeper.statemachine.core` decides for a member, purely;
:mod:`~bkeeper.statemachine.machine` runs one (:class:`ReplicatedStateMachine`);
:mod:`~bkeeper.statemachine.snapshot_store` keeps snapshots;
:mod:`~bkeeper.statemachine.dice` is the BookKeeper tutorial's replicated Dice on it.
"""

from bkeeper.statemachine.dice import Dice, DiceConfig
from bkeeper.statemachine.machine import ReplicatedStateMachine
from bkeeper.statemachine.protocol import (
    NOOP_PROPERTIES,
    Role,
    RsmConfig,
    StateMachine,
    election_path,
)
from bkeeper.statemachine.snapshot_store import SnapshotInfo, SnapshotStore, snapshot_path

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
