"""Replicated state machines on named logs: leader election, apply, catch-up.

:mod:`bkeeper.statemachine.dice` is the BookKeeper tutorial's replicated Dice.
"""

from bkeeper.statemachine.dice import Dice, DiceConfig, election_path

__all__ = ["Dice", "DiceConfig", "election_path"]
