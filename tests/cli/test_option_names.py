"""``-o`` names (issue 39): "did you mean" for a misspelled key, Java BookKeeper's camelCase
server configuration names as aliases (units converted), Java names bkeeper has no
equivalent of refused with the reason, and docs/storage.md's table kept equal to the code's."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import click
import pytest

from bkeeper.cli._java_names import JAVA_NAMES, JAVA_REFUSED
from bkeeper.cli._settings import SETTABLE, read_settings
from bkeeper.cli.autorecovery import autorecovery_config
from bkeeper.cli.shell_admin import admin_url
from bkeeper.common.messages import did_you_mean
from bkeeper.testing.zookeeper import ZooKeeperServer
from tests.client.conftest import RealCluster, _started

DOCS = Path(__file__).resolve().parents[2] / "docs" / "storage.md"


def _refused(*options: str, conf: str | None = None) -> str:
    with pytest.raises(click.UsageError) as caught:
        read_settings(conf, options)
    return caught.value.format_message()


# -- did you mean ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "message"),
    [
        (
            "gc_wait_msec=1",
            "-o gc_wait_msec=1: no bookie, storage or autorecovery option named "
            "'gc_wait_msec'; did you mean 'gc_wait_ms'?",
        ),
        (
            "journal_file_byte_max=1",
            "-o journal_file_byte_max=1: no bookie, storage or autorecovery option named "
            "'journal_file_byte_max'; did you mean 'journal_file_bytes_max'?",
        ),
        (
            "gcWaitTim=5",
            "-o gcWaitTim=5: no bookie, storage or autorecovery option named 'gcWaitTim'; "
            "did you mean 'gcWaitTime' (Java's name of gc_wait_ms)?",
        ),
        (
            "entryLogSizeLimit=5",
            "-o entryLogSizeLimit=5: no bookie, storage or autorecovery option named "
            "'entryLogSizeLimit'; did you mean 'logSizeLimit' (Java's name of "
            "entry_log_bytes_max)?",
        ),
        (
            "nope=1",
            "-o nope=1: no bookie, storage or autorecovery option named 'nope' (the names are "
            "the fields listed in docs/storage.md and docs/autorecovery.md, and Java "
            "BookKeeper's there)",
        ),
    ],
)
def test_a_misspelled_key_gets_the_closest_name(option: str, message: str) -> None:
    assert _refused(option) == message


def test_a_conf_file_line_gets_it_too(tmp_path: Path) -> None:
    conf = tmp_path / "b.conf"
    conf.write_text("# settings\nminor_compaction_treshold=0.1\n")
    assert _refused(conf=str(conf)) == (
        f"--conf {conf} line 2: no bookie, storage or autorecovery option named "
        "'minor_compaction_treshold'; did you mean 'minor_compaction_threshold'?"
    )


def test_did_you_mean_ignores_case_and_keeps_the_known_spelling() -> None:
    assert did_you_mean("LOSTBOOKIERECOVERYDELAY", ["lostBookieRecoveryDelay"]) == [
        "lostBookieRecoveryDelay"
    ]
    assert did_you_mean("zzz", ["gc_wait_ms"]) == []


# -- Java's names ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("option", "key", "value"),
    [
        ("lostBookieRecoveryDelay=60", "lost_bookie_recovery_delay_s", 60),
        ("journalDirectories=/j1,/j2", "journal_dirs", ("/j1", "/j2")),
        ("ledgerDirectories=/l1", "ledger_dirs", ("/l1",)),
        ("bookiePort=3181", "port", 3181),
        ("zkServers=zk1:2181,zk2:2181", "metadata_uri", "zk://zk1:2181,zk2:2181/ledgers"),
        ("metadataServiceUri=zk://zk1:2181/ledgers", "metadata_uri", "zk://zk1:2181/ledgers"),
        ("gcWaitTime=600000", "gc_wait_ms", 600_000),
        ("minorCompactionThreshold=0.3", "minor_compaction_threshold", 0.3),
        ("minorCompactionInterval=3600", "minor_compaction_interval_ms", 3_600_000),
        ("majorCompactionInterval=86400", "major_compaction_interval_ms", 86_400_000),
        ("journalMaxSizeMB=2048", "journal_file_bytes_max", 2048 * 1024 * 1024),
        ("logSizeLimit=1073741824", "entry_log_bytes_max", 1 << 30),
        ("auditorPeriodicCheckInterval=604800", "check_all_ledgers_interval_s", 604_800.0),
        ("replicationRateByBytes=-1", "rate_bytes_per_s", 0),
        ("readOnlyModeOnAnyDiskFullEnabled=true", "readonly_on_any_dir_full", True),
    ],
)
def test_java_names_are_aliases(option: str, key: str, value: object) -> None:
    settings = read_settings(None, [option])
    values = {**settings.storage, **settings.bookie, **settings.autorecovery}
    assert values == {key: value}


def test_a_java_name_and_ours_the_last_wins() -> None:
    settings = read_settings(None, ["gcWaitTime=1000", "gc_wait_ms=2000"])
    assert settings.bookie == {"gc_wait_ms": 2000}
    assert read_settings(None, ["gc_wait_ms=2000", "gcWaitTime=1000"]).bookie == {
        "gc_wait_ms": 1000
    }


def test_a_java_value_of_the_wrong_type_names_both() -> None:
    assert _refused("minorCompactionInterval=soon") == (
        "-o minorCompactionInterval=soon: minorCompactionInterval (Java's name of "
        "minor_compaction_interval_ms): 'soon' is not an integer (seconds)"
    )
    assert _refused("zkServers=zk1:2181/ledgers") == (
        "-o zkServers=zk1:2181/ledgers: zkServers (Java's name of metadata_uri): "
        "'zk1:2181/ledgers' is not host:port[,host:port...]"
    )


@pytest.mark.parametrize("key", sorted(JAVA_REFUSED))
def test_java_names_without_an_equivalent_say_why(key: str) -> None:
    assert _refused(f"{key}=1") == (
        f"-o {key}=1: Java's {key!r} has no bkeeper equivalent: {JAVA_REFUSED[key]}"
    )


def test_autorecovery_takes_its_java_names() -> None:
    assert autorecovery_config(["lostBookieRecoveryDelay=30"]).lost_bookie_recovery_delay_s == 30
    with pytest.raises(click.UsageError) as caught:
        autorecovery_config(["gcWaitTime=5"])
    assert caught.value.format_message() == (
        "-o gcWaitTime=5: Java's 'gcWaitTime' is bkeeper's gc_wait_ms, not one of the "
        "autorecovery options"
    )
    with pytest.raises(click.UsageError) as caught:
        autorecovery_config(["auditorPeriodicCheckInterva=5"])
    assert caught.value.format_message().endswith(
        "did you mean 'auditorPeriodicCheckInterval' (Java's name of check_all_ledgers_interval_s)?"
    )


def test_every_alias_names_a_settable_field_and_no_name_is_both() -> None:
    assert [n.java for n in JAVA_NAMES.values() if n.ours not in SETTABLE] == []
    assert set(JAVA_NAMES) & set(JAVA_REFUSED) == set()
    assert set(JAVA_NAMES) & set(SETTABLE) == set()


# -- the docs' table -------------------------------------------------------------------------
def _docs_rows(header: str) -> list[list[str]]:
    text = DOCS.read_text()
    start = text.index(header)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_docs_table_is_the_codes() -> None:
    aliases = _docs_rows("| Java name | bkeeper name | unit conversion |")
    assert aliases == [[f"`{n.java}`", f"`{n.ours}`", n.unit] for n in JAVA_NAMES.values()]
    refused = _docs_rows("| Java name | why, and what to use |")
    assert refused == [[f"`{k}`", why] for k, why in JAVA_REFUSED.items()]


# -- one CLI run -----------------------------------------------------------------------------
def test_bookie_says_did_you_mean_in_one_line_and_starts_nothing(
    subprocesses: None, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bkeeper", "bookie", "--data-dir", str(tmp_path / "d"),
         "-o", "lostBookieRecoveryDelai=5"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(
        "error: -o lostBookieRecoveryDelai=5: no bookie, storage or autorecovery option named "
        "'lostBookieRecoveryDelai'; did you mean 'lostBookieRecoveryDelay' (Java's name of "
        "lost_bookie_recovery_delay_s)?"
    )
    assert not (tmp_path / "d").exists()


@pytest.fixture
async def java_named_bookie(
    zookeeper: ZooKeeperServer, tmp_path: Path
) -> AsyncIterator[RealCluster]:
    args = ("--http-port", "0", "-o", "gcWaitTime=1234", "-o", "minorCompactionInterval=7",
            "-o", "journalMaxSizeMB=3")  # fmt: skip
    async with _started(zookeeper, tmp_path, (1, args)) as real:
        yield real


async def test_a_bookie_runs_with_java_names(java_named_bookie: RealCluster) -> None:
    url = await admin_url(java_named_bookie.uri, java_named_bookie.bookie_id(0))
    async with (
        aiohttp.ClientSession(trust_env=False) as http,
        http.get(f"{url}/api/v1/config/server_config") as answer,
    ):
        config = await answer.json()
    assert (config["gc_wait_ms"], config["minor_compaction_interval_ms"]) == (1234, 7000)
    assert config["journal_file_bytes_max"] == 3 * 1024 * 1024


def test_no_name_in_the_table_is_spelled_twice() -> None:
    names = [m.group(1) for m in re.finditer(r"^\| `(\w+)` \|", DOCS.read_text(), re.M)]
    java = [n for n in names if n in JAVA_NAMES or n in JAVA_REFUSED]
    assert len(java) == len(set(java)) == len(JAVA_NAMES) + len(JAVA_REFUSED)
