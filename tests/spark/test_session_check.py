"""The check the shared ``spark`` fixture makes after each test (tests/spark/conftest.py):
it reads the SQL conf in one py4j call, names what a test changed and undoes it."""

from __future__ import annotations

import pytest

from tests.spark.conftest import _conf, _left_behind

pytest.importorskip("pyspark")


def test_the_check_names_a_changed_conf_and_restores_it(spark) -> None:  # type: ignore[no-untyped-def]
    before = _conf(spark)
    assert before == dict(spark.conf.getAll)  # the one-call reading is the whole conf
    partitions = before["spark.sql.shuffle.partitions"]
    spark.conf.set("spark.sql.shuffle.partitions", "7")
    spark.conf.set("spark.bkeeper.test.arrow", "a -> b")  # the separator inside a value
    left = _left_behind(spark, before)
    assert left == [
        "conf spark.bkeeper.test.arrow is 'a -> b', was None (restored now)",
        f"conf spark.sql.shuffle.partitions is '7', was {partitions!r} (restored now)",
    ]
    assert _conf(spark) == before
    assert _left_behind(spark, before) == []
