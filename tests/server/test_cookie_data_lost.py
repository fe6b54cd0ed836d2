"""A bookie whose data is gone (its directory formatted or replaced) while the metadata still
holds its cookie refuses to start, before it stamps a new cookie: served empty, it would
answer "no such entry" for entries it acknowledged."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest

from bkeeper.common.errors import CookieMismatchError
from bkeeper.meta.cluster import ClusterMetadata


async def test_a_bookie_with_no_local_cookie_but_a_stored_one_refuses_to_start(
    start_bookie, tmp_path: Path
) -> None:
    uri = f"memory://{uuid.uuid4().hex}/ledgers"
    async with await ClusterMetadata.open(uri) as cluster:
        await cluster.format()
        data = tmp_path / "bookie"
        bookie = await start_bookie(data, bookie_id="bookie-a", metadata_uri=uri)
        await bookie.aclose()
        shutil.rmtree(data)
        with pytest.raises(CookieMismatchError) as refused:
            await start_bookie(data, bookie_id="bookie-a", metadata_uri=uri)
        assert str(refused.value).startswith(
            f"bookie bookie-a has a cookie in the metadata store but none in {data}: "
        )
        assert not (data / "current" / "VERSION").exists()  # refused before stamping one
        # Once the stored cookie is deleted, it joins as a new, empty bookie.
        await cluster.cookies.delete("bookie-a")
        again = await start_bookie(data, bookie_id="bookie-a", metadata_uri=uri)
        assert (await cluster.cookies.read("bookie-a")).value.bookie_id == "bookie-a"
        await again.aclose()
