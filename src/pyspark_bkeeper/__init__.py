"""Lets Spark find bkeeper's data source by its short name, with no ``register`` call.

Spark 4 looks for Python data sources in every top-level module whose name starts with
``pyspark_`` and registers the ``DefaultSource`` it exports under ``DefaultSource.name()``
(here ``"bkeeper"``), as ``format("kafka")`` works without set-up. Installing bkeeper with
its ``spark`` extra is all a session needs: ``spark.read.format("bkeeper")``.
"""

from bkeeper.spark.source import BKeeperDataSource as DefaultSource

__all__ = ["DefaultSource"]
