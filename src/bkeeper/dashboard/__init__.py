"""The web dashboard (``bkeeper dashboard``): a cluster at a glance in a browser.

:class:`Dashboard` serves one page and a JSON API (:mod:`bkeeper.dashboard.app`) from the
snapshots :class:`ClusterMonitor` keeps (:mod:`bkeeper.dashboard.monitor`): bookies
(writable, read-only, down; disk; adds/s, reads/s and add p99 from their ``/metrics``,
:mod:`bkeeper.dashboard.series`), ledgers, named logs and auto-recovery
(:mod:`bkeeper.dashboard.metadata_view`). Charts are plotly.js from the ``plotly`` package.
"""

from bkeeper.dashboard.app import Dashboard
from bkeeper.dashboard.config import DashboardConfig
from bkeeper.dashboard.monitor import ClusterMonitor

__all__ = ["ClusterMonitor", "Dashboard", "DashboardConfig"]
