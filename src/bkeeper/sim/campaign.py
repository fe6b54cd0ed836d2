"""Many seeds: runs spread over worker processes, results as they come, a failing run shrunk.

Workers are spawned with ``PYTHONHASHSEED=0``: Python randomizes string hashes per process,
which orders sets of strings differently from one process to the next; with the hash seed
fixed, a seed's run is the same in every worker, in every campaign, on every machine with
this code (its trace hash says so). Seeds go to workers in blocks of :data:`BLOCK_SEEDS`.

:func:`shrink` runs a failing seed again with fewer of its faults (halves, then quarters,
down to single faults, keeping each removal after which the run still fails), at most
``runs_max`` times: what is left is the shortest fault schedule found that still leads to a
violation, and its run's trace is the one to read.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import logging
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator, Sequence

from bkeeper.sim.run import SimResult, SimRunConfig, run_seed

__all__ = [
    "BLOCK_SEEDS",
    "SHRINK_RUNS_MAX",
    "run_campaign",
    "run_seeds",
    "shrink",
    "shrink_in_worker",
]

#: Seeds a worker takes at a time.
BLOCK_SEEDS = 4
#: Runs a shrink makes at most.
SHRINK_RUNS_MAX = 64


def _quiet() -> None:
    logging.disable(logging.CRITICAL)


def run_seeds(configs: Sequence[SimRunConfig]) -> list[SimResult]:
    """Run ``configs`` here, one after another (a worker's block)."""
    return [run_seed(config) for config in configs]


@contextlib.contextmanager
def _hash_seed_zero() -> Iterator[None]:
    old = os.environ.get("PYTHONHASHSEED")
    os.environ["PYTHONHASHSEED"] = "0"
    try:
        yield
    finally:
        if old is None:
            del os.environ["PYTHONHASHSEED"]
        else:
            os.environ["PYTHONHASHSEED"] = old


def run_campaign(
    base: SimRunConfig,
    seeds: Iterable[int],
    jobs: int,
    on_result: Callable[[SimResult], None],
    *,
    quiet: bool = True,
) -> None:
    """Run ``base`` for each seed in ``jobs`` worker processes; ``on_result`` for each
    result as it comes (in no particular order)."""
    blocks: list[list[SimRunConfig]] = []
    block: list[SimRunConfig] = []
    for seed in seeds:
        block.append(dataclasses.replace(base, seed=seed))
        if len(block) == BLOCK_SEEDS:
            blocks.append(block)
            block = []
    if block:
        blocks.append(block)
    context = multiprocessing.get_context("spawn")
    with (
        _hash_seed_zero(),
        concurrent.futures.ProcessPoolExecutor(
            max_workers=jobs, mp_context=context, initializer=_quiet if quiet else None
        ) as pool,
    ):
        pending = {pool.submit(run_seeds, b) for b in blocks[: jobs * 2]}
        queued = blocks[jobs * 2 :]
        while pending:
            done, pending = concurrent.futures.wait(
                pending, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for future in done:
                for result in future.result():
                    on_result(result)
                if queued:
                    pending.add(pool.submit(run_seeds, queued.pop(0)))


def shrink(
    config: SimRunConfig,
    failed: SimResult,
    runs_max: int = SHRINK_RUNS_MAX,
    on_run: Callable[[int, int], None] = lambda runs, faults: None,
) -> SimResult:
    """The failing run with the fewest faults found within ``runs_max`` runs (module doc)."""
    faults = list(failed.plan)
    best = failed
    runs = 0
    chunk = max(1, len(faults) // 2)
    while faults and runs < runs_max:
        i = 0
        while i < len(faults) and runs < runs_max:
            candidate = faults[:i] + faults[i + chunk :]
            result = run_seed(dataclasses.replace(config, faults=tuple(candidate)))
            runs += 1
            on_run(runs, len(faults))
            if not result.ok:
                faults, best = candidate, result
            else:
                i += chunk
        if chunk == 1:
            break
        chunk = max(1, chunk // 2)
    return best


def shrink_in_worker(
    config: SimRunConfig, failed: SimResult, runs_max: int = SHRINK_RUNS_MAX
) -> SimResult:
    """:func:`shrink` in a worker process of its own (the hash seed of the campaign's
    workers, so that its runs are the campaign's runs)."""
    context = multiprocessing.get_context("spawn")
    with (
        _hash_seed_zero(),
        concurrent.futures.ProcessPoolExecutor(
            max_workers=1, mp_context=context, initializer=_quiet
        ) as pool,
    ):
        return pool.submit(shrink, config, failed, runs_max).result()
