"""Loaded at start by every Python process of ``test_spark_kill``'s copy job (the job's
``PYTHONPATH`` starts with this directory, and Spark passes it on to its Python workers).

With ``BKEEPER_TEST_HOLD_COMMIT`` naming a file, the streaming sink's commit of batch
``BKEEPER_TEST_HOLD_FROM`` (or a later one) writes that batch's id to the file and then waits
to be killed instead of committing: the batch's task ledgers are made and no log holds them.
The test waits for the file and kills the job, so the kill lands inside a batch every time
(before, it searched for such a moment by polling, and a run in CI found none in 25 batches).

The sink module is patched when it is first imported (a finder on ``sys.meta_path``), not
imported here: Spark's daemon forks its workers from a process that must start no threads.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import time
from types import ModuleType
from typing import Any

_TARGET = "bkeeper.spark.sink"
_MARKER = os.environ.get("BKEEPER_TEST_HOLD_COMMIT")
_HOLD_FROM = int(os.environ.get("BKEEPER_TEST_HOLD_FROM", "4"))


def _patch(module: ModuleType) -> None:
    commit = module._commit

    def held(options: Any, messages: Any, job_id: str, batch_id: int | None) -> None:
        if _MARKER is not None and batch_id is not None and batch_id >= _HOLD_FROM:
            with open(_MARKER, "w") as marker:
                marker.write(str(batch_id))
            while True:  # until the test kills the job
                time.sleep(60)
        commit(options, messages, job_id, batch_id)

    module._commit = held


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: Any) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


if _MARKER is not None:
    sys.meta_path.insert(0, _Finder())
