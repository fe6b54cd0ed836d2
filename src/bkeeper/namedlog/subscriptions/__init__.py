"""Durable subscriptions of a named log and their consumers.

- :mod:`~bkeeper.namedlog.subscriptions.options`: :class:`SubscribeOptions`, one consumer's
  options, checked when made;
- :mod:`~bkeeper.namedlog.subscriptions.opening`: subscribing (and, for consumers that keep
  their own progress, ensuring a subscription and committing up to a position);
- :mod:`~bkeeper.namedlog.subscriptions.shared`: one consumer among several, by claims;
- :mod:`~bkeeper.namedlog.subscriptions.exclusive`: the one consumer of a subscription (its
  rules: that module's docstring);
- :mod:`~bkeeper.namedlog.subscriptions.progress`: backlog and positions, read from the log.
"""

from bkeeper.namedlog.subscriptions.exclusive import Consumer
from bkeeper.namedlog.subscriptions.opening import commit_before, ensure_subscription, subscribe
from bkeeper.namedlog.subscriptions.options import (
    ACK_FLUSH_MS,
    ACK_TIMEOUT_MS,
    CLAIM_RECORDS,
    SubscribeOptions,
    default_consumer_id,
)
from bkeeper.namedlog.subscriptions.progress import Backlog, backlog, check_in_log, ledger_ends
from bkeeper.namedlog.subscriptions.shared import SharedConsumer

__all__ = [
    "ACK_FLUSH_MS",
    "ACK_TIMEOUT_MS",
    "CLAIM_RECORDS",
    "Backlog",
    "Consumer",
    "SharedConsumer",
    "SubscribeOptions",
    "backlog",
    "check_in_log",
    "commit_before",
    "default_consumer_id",
    "ensure_subscription",
    "ledger_ends",
    "subscribe",
]
