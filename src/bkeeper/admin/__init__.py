"""The cluster's endpoints on a bookie's admin HTTP server (Apache BookKeeper's HTTP admin):
bookies, ledgers and auto-recovery, through a client of the cluster.

The bookie's own endpoints are in :mod:`bkeeper.server.admin_routes`; these need the client
and auto-recovery, which the server layer may not import, so the process that runs the
bookie (``bkeeper bookie``, :mod:`bkeeper.cli.bookie`) adds them::

    admin = ClusterAdmin(metadata_uri, lambda: bookie.bookie_id)
    add_admin_routes(bookie.admin_server, admin)   # before bookie.start()
    ...
    await admin.aclose()                            # after the bookie stopped
"""

from __future__ import annotations

from bkeeper.admin.cluster_routes import add_cluster_routes
from bkeeper.admin.context import AdminLimits, ClusterAdmin
from bkeeper.admin.recovery_routes import add_recovery_routes
from bkeeper.server.admin_http import AdminHttpServer

__all__ = ["AdminLimits", "ClusterAdmin", "add_admin_routes"]


def add_admin_routes(server: AdminHttpServer, admin: ClusterAdmin) -> None:
    """Add every cluster endpoint (bookies, ledgers, auto-recovery) to ``server``."""
    add_cluster_routes(server, admin)
    add_recovery_routes(server, admin)
