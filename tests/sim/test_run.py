"""Whole simulated runs: replay, the CI block of seeds, what a run reports."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from bkeeper.common.bugs import BUGS
from bkeeper.sim.faults import Fault
from bkeeper.sim.run import SimRunConfig, run_seed

#: The CI block: seeds every CI run goes through (each a 30 simulated seconds run with every
#: fault kind); a seed that once found a bug joins :data:`REGRESSION_SEEDS`.
CI_SEEDS = range(1, 9)
#: The CI block of the log workload (its runs cost about three times a ledger run's CPU).
CI_LOG_SEEDS = range(1, 4)
#: The CI block of the kv workload (about five times a ledger run's CPU).
CI_KV_SEEDS = range(1, 3)
#: Seeds that found a bug, with what it was (each must pass now).
REGRESSION_SEEDS: dict[int, str] = {
    137: "the simulator: a restart called off while its bookie's start failed went on, and "
    "the last start found the port taken",
    198: "the simulator: two corrupt faults damaged one ledger on two bookies (its ack quorum) "
    "before the first was repaired",
    255: "the simulator: a corrupt fault on a bookie still starting damaged a running "
    "bookie's journal",
    10577: "bkeeper: a mark again for a replica the mark named already was not written, so "
    "the worker refilling that replica from older metadata (the ledger open, its LAC 2; "
    "closed meanwhile at 3) removed it: the replica lacked entry 3 for good",
    10765: "the same",
}


@pytest.mark.parametrize("workload", ["ledger", "log", "kv"])
def test_a_seed_replays_with_the_same_trace_hash(workload: str) -> None:
    config = SimRunConfig(seed=11, duration_s=10.0, workload=workload)
    first = run_seed(config)
    again = run_seed(config)
    assert first.ok, first.violations
    assert first.trace_hash == again.trace_hash
    assert first.acknowledged == again.acknowledged > 0
    other = run_seed(dataclasses.replace(config, seed=12))
    assert other.trace_hash != first.trace_hash


_RUN_AFTER = """
import sys
from bkeeper.sim.run import SimRunConfig, run_seed
*before, seed = (int(x) for x in sys.argv[1:])
for other in before:
    run_seed(SimRunConfig(seed=other, workload="kv", duration_s=10.0))
print(run_seed(SimRunConfig(seed=seed, workload="kv", duration_s=10.0)).trace_hash)
"""


def _hash_after(*seeds: int) -> str:
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # as the campaign's workers
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AFTER, *map(str, seeds)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.split()[-1]


def test_a_seed_runs_the_same_whatever_ran_before_it_in_the_process(subprocesses: None) -> None:
    """Orders that follow memory addresses (sets of objects: tasks cancelled, connections
    closed, aiohttp's resolver waiters) made a kv seed's run depend on the seeds run before
    it in a campaign's worker: seed 61 failed in a campaign and passed alone."""
    assert _hash_after(61) == _hash_after(60, 61)


@pytest.mark.parametrize("seed", [*CI_SEEDS, *REGRESSION_SEEDS])
def test_the_ci_block_of_seeds_finds_no_violation(seed: int) -> None:
    result = run_seed(SimRunConfig(seed=seed))
    assert result.ok, "\n".join([*result.violations, *result.trace[-40:]])
    assert result.faults > 0 and result.acknowledged > 0


@pytest.mark.parametrize("seed", CI_KV_SEEDS)
def test_the_ci_block_of_kv_seeds_finds_no_violation(seed: int) -> None:
    result = run_seed(SimRunConfig(seed=seed, workload="kv"))
    assert result.ok, "\n".join([*result.violations, *result.trace[-40:]])
    assert result.faults > 0 and result.acknowledged > 0


@pytest.mark.parametrize("seed", CI_LOG_SEEDS)
def test_the_ci_block_of_log_seeds_finds_no_violation(seed: int) -> None:
    result = run_seed(SimRunConfig(seed=seed, workload="log"))
    assert result.ok, "\n".join([*result.violations, *result.trace[-40:]])
    assert result.faults > 0 and result.acknowledged > 0 and result.ledgers > 1


def test_a_run_with_a_given_plan_applies_exactly_it() -> None:
    plan = (Fault(1.0, "crash", "bookie-0", 2.0), Fault(2.0, "partition", "writer|bookie-1", 1.0))
    result = run_seed(SimRunConfig(seed=5, duration_s=6.0, faults=plan))
    assert result.ok, result.violations
    assert result.faults == 2 and result.plan == plan


#: Each bug switch (bkeeper.common.bugs) with the workload and the first seed, from 1 up, whose
#: run finds it (docs/verification.md): the simulator must keep finding each one there.
FOUND_AT = {
    "recovery-no-fence": ("ledger", 1),
    "fence-ignored-on-add": ("ledger", 1),
    "ack-quorum-one": ("ledger", 2),
    "lac-from-last-stored": ("ledger", 7),
    "recovery-one-absent": ("ledger", 12),
    "roll-lost-answer-deleted": ("log", 19),
    "journal-tail-absent": ("ledger", 2),
    "kv-read-no-barrier": ("kv", 1),
}


def test_every_bug_switch_is_listed_with_the_seed_that_finds_it() -> None:
    assert set(FOUND_AT) == set(BUGS)


@pytest.mark.parametrize(
    ("bug", "workload", "seed"), [(bug, *found) for bug, found in sorted(FOUND_AT.items())]
)
def test_a_bug_put_back_is_found_at_its_seed(bug: str, workload: str, seed: int) -> None:
    result = run_seed(SimRunConfig(seed=seed, workload=workload, bugs=(bug,)))
    assert not result.ok, f"{bug} went unnoticed at seed {seed}"
    clean = run_seed(SimRunConfig(seed=seed, workload=workload))
    assert clean.ok, clean.violations
