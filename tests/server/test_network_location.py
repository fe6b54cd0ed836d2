"""A bookie's failure domain and advertised address: published at start, looked up in a
mapping file or by a script by the command, refused with a clear line when wrong."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import click
import pytest

from bkeeper.cli._network_location import resolve_network_location
from bkeeper.common.errors import ConfigError
from bkeeper.meta.cluster import ClusterMetadata
from bkeeper.server import BookieConfig
from tests.server.test_admin_bookie import wait_registered


@pytest.fixture
def uri() -> str:
    return f"memory://{uuid.uuid4().hex[:8]}/ledgers"


@pytest.fixture
async def cluster(uri: str) -> AsyncIterator[ClusterMetadata]:
    async with await ClusterMetadata.open(uri) as metadata:
        await metadata.format()
        yield metadata


async def test_bookie_writes_its_location_and_registers_its_advertised_address(
    start_bookie, cluster, uri
) -> None:
    bookie = await start_bookie(
        metadata_uri=uri, host="0.0.0.0", advertised_address="127.0.0.1",
        network_location="/eu/rack-7",
    )  # fmt: skip
    await wait_registered(cluster, bookie, read_only=False)
    assert bookie.bookie_id == f"127.0.0.1:{bookie.port}"
    assert await cluster.racks.locations() == {bookie.bookie_id: "/eu/rack-7"}
    groups, _ = await cluster.racks.groups()
    assert groups["default"][bookie.bookie_id].hostname == "127.0.0.1"
    endpoint = (await cluster.registry.service_info(bookie.bookie_id)).endpoint()
    assert endpoint is not None and (endpoint.host, endpoint.port) == ("127.0.0.1", bookie.port)


def test_bad_locations_and_addresses_are_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="network_location 'rack-1': expected /rack"):
        BookieConfig(data_dir="/d", network_location="rack-1")
    with pytest.raises(ConfigError, match=r"advertised_address: '0\.0\.0\.0' is not an address"):
        BookieConfig(data_dir="/d", advertised_address="0.0.0.0")
    with pytest.raises(ConfigError, match="give one way"):
        BookieConfig(data_dir="/d", network_location_file="f", network_location_script="s")


def test_the_command_looks_the_location_up_in_a_file(tmp_path: Path) -> None:
    mapping = tmp_path / "racks.txt"
    mapping.write_text("# bookies\n10.0.0.5 /east/r1\nbk-2:3181 /west/r2\n")
    by_host = BookieConfig(data_dir="/d", host="10.0.0.5", network_location_file=str(mapping))
    assert resolve_network_location(by_host).network_location == "/east/r1"
    by_id = BookieConfig(data_dir="/d", bookie_id="bk-2:3181", network_location_file=str(mapping))
    assert resolve_network_location(by_id).network_location == "/west/r2"
    given = BookieConfig(
        data_dir="/d", network_location="/x", network_location_file=str(tmp_path / "none")
    )
    assert resolve_network_location(given).network_location == "/x"  # given wins, file unread
    missing = BookieConfig(data_dir="/d", host="10.9.9.9", network_location_file=str(mapping))
    with pytest.raises(click.UsageError, match=r"names neither 10\.9\.9\.9:3181 nor 10\.9\.9\.9"):
        resolve_network_location(missing)
    gone = BookieConfig(data_dir="/d", network_location_file=str(tmp_path / "none"))
    with pytest.raises(click.UsageError, match="No such file or directory"):
        resolve_network_location(gone)


def _script(path: Path, body: str) -> str:
    path.write_text("#!/bin/sh\n" + body)
    os.chmod(path, stat.S_IRWXU)
    return str(path)


def test_the_command_asks_a_script_and_names_what_it_got_wrong(
    tmp_path: Path, subprocesses: None
) -> None:
    good = _script(tmp_path / "good.sh", 'echo "/dc-$1/r1"\n')
    config = BookieConfig(data_dir="/d", host="10.1.2.3", network_location_script=good)
    assert resolve_network_location(config).network_location == "/dc-10.1.2.3/r1"
    failing = _script(tmp_path / "bad.sh", "echo nope >&2; exit 3\n")
    with pytest.raises(click.UsageError, match="exit code 3: nope"):
        resolve_network_location(BookieConfig(data_dir="/d", network_location_script=failing))
    wrong = _script(tmp_path / "wrong.sh", "echo rack-1\n")
    with pytest.raises(click.UsageError, match="answer 'rack-1': expected /rack"):
        resolve_network_location(BookieConfig(data_dir="/d", network_location_script=wrong))
