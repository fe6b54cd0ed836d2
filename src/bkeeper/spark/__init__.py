"""The ``bkeeper`` data source for PySpark (extra ``spark``): batch and streaming reads and
exactly-once writes of named logs. See docs/spark.md.

``bkeeper.spark.register(spark)`` registers it; then ``spark.read.format("bkeeper")``,
``readStream``, ``write`` and ``writeStream`` work. The planning and conversion modules
(:mod:`~bkeeper.spark.options`, :mod:`~bkeeper.spark.plan`, :mod:`~bkeeper.spark.planner`,
:mod:`~bkeeper.spark.arrow`) do not import pyspark; the data source classes are loaded on
first use. ``LagListener`` (:mod:`~bkeeper.spark.listener`) reports how far streams are behind.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BKeeperDataSource", "LagListener", "register"]


def __getattr__(name: str) -> Any:
    if name == "LagListener":
        from bkeeper.spark import listener

        return listener.LagListener
    if name in __all__:
        from bkeeper.spark import source

        return getattr(source, name)
    raise AttributeError(f"module 'bkeeper.spark' has no attribute {name!r}")
