"""Group commit: tokens per fsync group, the group window, limits, failures, rolling."""

from __future__ import annotations

import pytest
from storage_helpers import KEY, entry_body, open_storage, small_config

from bkeeper.common.errors import BookieIOError, TooManyRequestsError
from bkeeper.storage import MemoryFileSystem
from bkeeper.storage.journal import cut_reason

JOURNAL_DIR = "/data/current/journal"


def test_lone_add_is_written_at_once_and_tokens_come_in_order() -> None:
    storage, acks = open_storage(MemoryFileSystem(), small_config(journal_max_group_wait_ms=500))
    storage.add_entry(1, 0, KEY, entry_body(1, 0), token="first")
    acks.wait_for("first")
    # an idle journal does not wait for the window: the group was cut because it woke idle
    assert storage.stats().journal_groups_cut == {"idle": 1}
    for entry_id in range(1, 50):
        storage.add_entry(1, entry_id, KEY, entry_body(1, entry_id), token=entry_id)
    storage.force_ledger(1, token="force")
    acks.wait_for("force")
    assert acks.tokens == ["first", *range(1, 50), "force"]
    assert sum(len(g) for g in acks.groups) == 51
    assert len(acks.groups) <= 3  # records arriving within the window share a group
    assert storage.stats().journal_groups_written == len(acks.groups)
    storage.close()


def test_group_bytes_threshold_cuts_the_window_short() -> None:
    config = small_config(
        journal_max_group_wait_ms=1000, journal_group_bytes_max=4096, write_cache_bytes_max=1 << 20
    )
    storage, acks = open_storage(MemoryFileSystem(), config)
    storage.add_entry(1, 0, KEY, entry_body(1, 0), token=0)
    acks.wait_for(0)
    for entry_id in range(1, 11):
        storage.add_entry(
            1, entry_id, KEY, entry_body(1, entry_id, payload=b"p" * 1000), token=entry_id
        )
    acks.wait_for(10)
    assert acks.tokens == list(range(11))
    storage.close()


@pytest.mark.parametrize(
    ("state", "reason"),
    [
        ({"records": 0}, None),
        ({"woke_idle": True, "due_in_s": 0.5}, "idle"),
        ({"closing": True, "due_in_s": 0.5}, "closing"),
        ({"records": 10_000, "due_in_s": 0.5}, "entries"),
        ({"group_bytes": 512 * 1024, "due_in_s": 0.5}, "bytes"),
        ({"due_in_s": 0.0}, "window"),
        ({"due_in_s": 0.001}, None),
        ({"records": 9_999, "group_bytes": 512 * 1024 - 1, "due_in_s": 0.2}, None),
    ],
)
def test_when_a_group_is_cut(state: dict[str, object], reason: str | None) -> None:
    """The group-commit rule (see the journal's docstring), decided purely."""
    config = small_config(
        journal_max_group_wait_ms=1000,
        journal_group_bytes_max=512 * 1024,
        journal_group_entries_max=10_000,
    )
    given: dict[str, object] = {
        "records": 1,
        "group_bytes": 100,
        "due_in_s": 1.0,
        "woke_idle": False,
        "closing": False,
        **state,
    }
    assert cut_reason(config, **given) == reason  # type: ignore[arg-type]


def test_queue_limit_pushes_back_and_close_drains() -> None:
    config = small_config(journal_max_group_wait_ms=1000, journal_queue_entries_max=5)
    storage, acks = open_storage(MemoryFileSystem(), config)
    storage.add_entry(1, 0, KEY, entry_body(1, 0), token=0)
    acks.wait_for(0)  # the next group may only start a second after this one
    for entry_id in range(1, 6):
        storage.add_entry(1, entry_id, KEY, entry_body(1, entry_id), token=entry_id)
    with pytest.raises(TooManyRequestsError):
        storage.add_entry(1, 6, KEY, entry_body(1, 6), token=6)
    with pytest.raises(TooManyRequestsError):
        storage.fence(1, KEY, token="fence")
    storage.close()
    assert acks.tokens == [0, 1, 2, 3, 4, 5]


def test_write_cache_limit_pushes_back() -> None:
    fs = MemoryFileSystem()
    config = small_config(journal_max_group_wait_ms=1000, write_cache_bytes_max=4096)
    storage, _ = open_storage(fs, config)
    storage.add_entry(1, 0, KEY, entry_body(1, 0, payload=b"x" * 3000), token=0)
    with pytest.raises(TooManyRequestsError):
        storage.add_entry(1, 1, KEY, entry_body(1, 1, payload=b"x" * 3000), token=1)
    storage.close()


def test_failed_fsync_fails_the_group_and_stops_the_journal() -> None:
    fs = MemoryFileSystem()
    storage, acks = open_storage(fs)
    storage.add_entry(1, 0, KEY, entry_body(1, 0), token=0)
    acks.wait_for(0)
    fs.fail_syncs(OSError(5, "disk on fire"))
    storage.add_entry(1, 1, KEY, entry_body(1, 1), token=1)
    acks.wait_count(2)
    assert acks.errors and acks.errors[0][0] == [1]
    assert isinstance(acks.errors[0][1], OSError)
    with pytest.raises(BookieIOError):
        storage.add_entry(1, 2, KEY, entry_body(1, 2), token=2)
    storage.abort()


def test_journal_rolls_by_size_and_checkpoint_deletes_old_files() -> None:
    fs = MemoryFileSystem()
    storage, acks = open_storage(fs, small_config(journal_file_bytes_max=4096))
    for entry_id in range(60):
        storage.add_entry(
            1, entry_id, KEY, entry_body(1, entry_id, payload=b"y" * 500), token=entry_id
        )
        acks.wait_for(entry_id)  # one group each, so that the journal rolls often
    files = sorted(fs.list_dir(JOURNAL_DIR))
    assert len(files) >= 6
    assert all(fs.size(f"{JOURNAL_DIR}/{name}") <= 4096 for name in files[:-1])
    storage.checkpoint()
    assert fs.list_dir(JOURNAL_DIR) == [files[-1]]
    storage.add_entry(1, 60, KEY, entry_body(1, 60), token=60)
    acks.wait_for(60)
    after = fs.crash()
    storage.abort()
    restarted, _ = open_storage(after, small_config(journal_file_bytes_max=4096))
    assert restarted.list_entries(1) == list(range(61))
    assert restarted.read_entry(1, 60) == entry_body(1, 60)
    restarted.close()
