"""The metadata-store side of named logs: every node a log owns and every update of one
through compare-and-set (:func:`bkeeper.common.cas.cas_update`)."""

from bkeeper.namedlog.stores.rounds import cas_update_or

__all__ = ["cas_update_or"]
