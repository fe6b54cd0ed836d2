"""How one consumer subscribes: :class:`SubscribeOptions`, checked when made.

``NamedLog.subscribe`` takes them (or the same names as keyword arguments, which make one);
the consumers read theirs from it.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, fields, replace
from typing import Any

from bkeeper.common.errors import ConfigError
from bkeeper.namedlog.core.subscription_state import AckStore, Mode

__all__ = [
    "ACK_FLUSH_MS",
    "ACK_TIMEOUT_MS",
    "CLAIM_RECORDS",
    "SubscribeOptions",
    "default_consumer_id",
]

#: How often a consumer writes the acks it gathered, at most (ms).
ACK_FLUSH_MS = 200
#: A claim not acknowledged this long after it was taken goes to another consumer (ms).
ACK_TIMEOUT_MS = 30_000
#: Records one claim takes at most.
CLAIM_RECORDS = 100


def default_consumer_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{id(object()):x}"


@dataclass(frozen=True)
class SubscribeOptions:
    """One consumer's subscription options.

    ``consumer_id``: names the consumer (None: host, process and a unique suffix);
    ``wait_s``: how long to stand by while another consumer holds an exclusive subscription
    (None: for ever); ``skip_truncated``: records truncated away before they were consumed are
    skipped with a warning instead of raising ``LogTruncatedError``; ``ack_flush_ms``: acks
    are written at most this often; ``create`` False: a subscription that does not exist is
    ``SubscriptionNotFoundError``; ``mode``: "exclusive" or "shared" (fixed when the
    subscription is created); ``ack_timeout_ms`` and ``claim_records``: a shared consumer's
    claims; ``ack_store``: where an exclusive consumer's flushes go, the subscription's node
    ("metadata") or a cursor ledger of its own ("ledger")."""

    consumer_id: str | None = None
    wait_s: float | None = 0.0
    skip_truncated: bool = False
    ack_flush_ms: int = ACK_FLUSH_MS
    create: bool = True
    mode: Mode = "exclusive"
    ack_timeout_ms: int = ACK_TIMEOUT_MS
    claim_records: int = CLAIM_RECORDS
    ack_store: AckStore = "metadata"

    def __post_init__(self) -> None:
        if self.mode not in ("exclusive", "shared"):
            raise ConfigError(f"mode {self.mode!r}: exclusive or shared")
        if self.ack_store not in ("metadata", "ledger"):
            raise ConfigError(f"ack_store {self.ack_store!r}: metadata or ledger")
        if self.ack_store == "ledger" and self.mode == "shared":
            raise ConfigError(
                "ack_store ledger: exclusive subscriptions only (shared consumers "
                "coordinate through the subscription's node)"
            )
        if self.ack_flush_ms < 1:
            raise ConfigError(f"ack_flush_ms: must be at least 1, got {self.ack_flush_ms}")
        if self.mode == "shared" and (self.ack_timeout_ms < 1 or self.claim_records < 1):
            raise ConfigError("ack_timeout_ms and claim_records must be at least 1")

    @classmethod
    def of(cls, options: SubscribeOptions | None, changes: dict[str, Any]) -> SubscribeOptions:
        """``options`` (None: the defaults) with ``changes`` (option names as keywords);
        ``ConfigError`` naming a name that is not an option."""
        unknown = sorted(set(changes) - {field.name for field in fields(cls)})
        if unknown:
            raise ConfigError(f"subscribe: no option {', '.join(map(repr, unknown))}")
        return replace(options or cls(), **changes)

    def with_consumer_id(self) -> SubscribeOptions:
        """These options, ``consumer_id`` chosen when not given."""
        if self.consumer_id is not None:
            return self
        return replace(self, consumer_id=default_consumer_id())
