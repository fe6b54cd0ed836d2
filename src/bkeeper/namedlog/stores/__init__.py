"""The stored side of named logs: every node a log owns in the metadata store and the cursor
ledgers of subscriptions; every update through compare-and-set
(:func:`bkeeper.common.cas.cas_update`).

- :mod:`~bkeeper.namedlog.stores.log_nodes`: a log's node (:class:`LogStore`);
- :mod:`~bkeeper.namedlog.stores.subscription_nodes`: subscriptions and their owners
  (:class:`SubscriptionStore`);
- :mod:`~bkeeper.namedlog.stores.pending_ledgers`: ledgers written for a log, not appended yet
  (:class:`PendingLedgers`);
- :mod:`~bkeeper.namedlog.stores.watched_logs`: log metadata kept while its node's watch
  reports no change (:class:`WatchedLogs`);
- :mod:`~bkeeper.namedlog.stores.cursor_ledgers`: a consumer's acks in a ledger of its own
  (:class:`CursorLedger`).
"""

from bkeeper.namedlog.stores.cursor_ledgers import CursorLedger, drop_cursor, load, peek
from bkeeper.namedlog.stores.log_nodes import LogStore
from bkeeper.namedlog.stores.pending_ledgers import PendingLedgers
from bkeeper.namedlog.stores.subscription_nodes import SubscriptionStore
from bkeeper.namedlog.stores.watched_logs import WatchedLogs

__all__ = [
    "CursorLedger",
    "LogStore",
    "PendingLedgers",
    "SubscriptionStore",
    "WatchedLogs",
    "drop_cursor",
    "load",
    "peek",
]
