"""Test-only switches that put known bugs back, so that the simulator shows it finds them.

Each name is a bug of the kind this project fixed or guards against (docs/verification.md
lists them with the seeds the simulator needs to find each). All are off; nothing but the
simulator's runs (``bkeeper.sim``, ``SimRunConfig.bugs``) turns one on, for the length of a
run. A check costs one test of an empty frozenset on its path.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["BUGS", "active", "set_active"]

#: name -> what goes wrong with it on
BUGS: dict[str, str] = {
    "recovery-no-fence": "ledger recovery reads without fencing: the old writer goes on "
    "adding (and being acknowledged) past the end recovery sealed",
    "recovery-one-absent": "ledger recovery takes one bookie's 'no such entry' for the end of "
    "the ledger instead of a recovery quorum's: an acknowledged entry is cut off",
    "ack-quorum-one": "a writer confirms an entry once one bookie acknowledged it, not the ack "
    "quorum: a crash of that bookie loses an acknowledged entry",
    "fence-ignored-on-add": "a bookie's batch add path skips the fenced check: a fenced-out "
    "writer's adds are stored and acknowledged after the seal",
    "lac-from-last-stored": "a reader takes the last entry a bookie stored for the last add "
    "confirmed, not the LAC that entry carries: it reads entries no ack quorum holds, which "
    "a recovery may then leave out",
    "roll-lost-answer-deleted": "a log writer takes a roll whose compare-and-set answer was lost "
    "for a roll that did not go in, and deletes the new ledger: the log's list names a ledger "
    "that is gone",
    "journal-tail-absent": "journal replay takes damage in the last group for a torn write and "
    "cuts it: entries that group held, acknowledged, answer 'absent' instead of 'unknown', "
    "and a recovery may end the ledger before them",
    "kv-read-no-barrier": "a kv member answers a linearizable read from its own state without "
    "a read barrier or lease: a follower (or a deposed leader) answers from a stale state",
}

#: The switches on (empty: every bug off, as always outside a simulator run).
ACTIVE: frozenset[str] = frozenset()


def active(name: str) -> bool:
    return name in ACTIVE


def set_active(names: Iterable[str]) -> frozenset[str]:
    """Turn exactly ``names`` on; returns the set it replaces. Unknown names: ValueError."""
    global ACTIVE
    wanted = frozenset(names)
    unknown = sorted(wanted - BUGS.keys())
    if unknown:
        raise ValueError(f"unknown bug switch {', '.join(unknown)} (known: {', '.join(BUGS)})")
    previous, ACTIVE = ACTIVE, wanted
    return previous
