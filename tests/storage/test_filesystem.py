"""The FileSystem port: one conformance suite for the real and the in-memory filesystem,
then the in-memory crash model."""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from bkeeper.storage import FileSystem, MemoryFileSystem, OsFileSystem
from bkeeper.storage.filesystem import write_file_atomic


@pytest.fixture(params=["os", "memory"])
def fs_dir(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[FileSystem, str]]:
    if request.param == "os":
        yield OsFileSystem(), str(tmp_path / "d")
    else:
        yield MemoryFileSystem(), "/d"


#: The real filesystem's parameter mounts a tmpfs (an integration test: tests/tiers.py).
OS_ON_TMPFS = pytest.param("os", marks=pytest.mark.takes("small_tmpfs"))


@pytest.fixture(params=[OS_ON_TMPFS, "memory"])
def small_fs_dir(request: pytest.FixtureRequest) -> tuple[FileSystem, str, int]:
    """A filesystem of 64 MiB: a real tmpfs, and the in-memory one given that capacity."""
    size = 64 * 1024 * 1024
    if request.param == "os":
        return OsFileSystem(), str(request.getfixturevalue("small_tmpfs") / "d"), size
    return MemoryFileSystem(capacity_bytes=size), "/d", size


def test_append_read_and_sizes(fs_dir: tuple[FileSystem, str]) -> None:
    fs, d = fs_dir
    fs.makedirs(d)
    path = os.path.join(d, "a")
    f = fs.open_append(path)
    f.write(b"hello ")
    f.write(memoryview(b"world"))
    f.sync()
    assert f.size() == 11
    f.close()
    again = fs.open_append(path)
    assert again.size() == 11
    again.write(b"!")
    again.close()
    r = fs.open_read(path)
    assert r.read_at(6, 5) == b"world"
    assert r.read_at(10, 100) == b"d!"
    assert r.read_at(50, 10) == b""
    assert r.size() == 12
    r.close()
    assert fs.read_file(path) == b"hello world!"
    assert fs.size(path) == 12


def test_rename_truncate_list_remove(fs_dir: tuple[FileSystem, str]) -> None:
    fs, d = fs_dir
    fs.makedirs(os.path.join(d, "sub"))
    a, b = os.path.join(d, "a"), os.path.join(d, "b")
    for path, data in ((a, b"aaaa"), (b, b"bb")):
        f = fs.open_append(path)
        f.write(data)
        f.close()
    fs.rename(a, b)
    fs.fsync_dir(d)
    assert fs.read_file(b) == b"aaaa"
    assert not fs.exists(a)
    assert sorted(fs.list_dir(d)) == ["b"]
    fs.truncate(b, 1)
    assert fs.read_file(b) == b"a"
    fs.remove(b)
    assert not fs.exists(b)
    assert fs.exists(d)
    total, free = fs.disk_usage(d)
    assert total >= free > 0


def test_write_file_atomic_replaces(fs_dir: tuple[FileSystem, str]) -> None:
    fs, d = fs_dir
    fs.makedirs(d)
    path = os.path.join(d, "root")
    write_file_atomic(fs, path, b"one")
    write_file_atomic(fs, path, b"two")
    assert fs.read_file(path) == b"two"
    assert fs.list_dir(d) == ["root"]


def test_missing_files_raise(fs_dir: tuple[FileSystem, str]) -> None:
    fs, d = fs_dir
    fs.makedirs(d)
    with pytest.raises(FileNotFoundError):
        fs.read_file(os.path.join(d, "nope"))
    with pytest.raises(FileNotFoundError):
        fs.open_read(os.path.join(d, "nope"))


def test_a_full_disk_fails_writes_with_enospc_and_truncate_frees_space(
    small_fs_dir: tuple[FileSystem, str, int],
) -> None:
    fs, d, size = small_fs_dir
    fs.makedirs(d)
    total, free = fs.disk_usage(d)
    assert total == size and free > size - 64 * 1024
    path = os.path.join(d, "filler")
    f = fs.open_append(path)
    with pytest.raises(OSError) as failed:
        while True:
            f.write(b"x" * (1024 * 1024 + 1))
    assert failed.value.errno == errno.ENOSPC
    written = f.size()  # a short write appended what fitted before the write failed
    assert free - 64 * 1024 <= written <= free
    assert fs.size(path) == written and fs.read_file(path) == b"x" * written
    assert fs.disk_usage(d)[1] < 64 * 1024
    more = os.path.join(d, "more")
    g = fs.open_append(more)
    with pytest.raises(OSError) as again:
        g.write(b"y" * 65536)
    assert again.value.errno == errno.ENOSPC
    kept = g.size()
    f.close()
    fs.truncate(path, 0)
    assert fs.disk_usage(d)[1] >= free - 128 * 1024
    g.write(b"z" * 65536)
    g.sync()
    g.close()
    assert fs.read_file(more) == b"y" * kept + b"z" * 65536


@pytest.fixture(params=[OS_ON_TMPFS, "memory"])
def two_filesystems(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[FileSystem, str, str]:
    """A directory on a large filesystem and one on a 64 MiB one."""
    if request.param == "os":
        small = request.getfixturevalue("small_tmpfs")
        return OsFileSystem(), str(tmp_path / "d"), str(small / "d")
    fs = MemoryFileSystem()
    fs.mount("/small", 64 * 1024 * 1024)
    return fs, "/d", "/small/d"


def test_filesystem_id_is_one_per_filesystem(two_filesystems: tuple[FileSystem, str, str]) -> None:
    fs, big, small = two_filesystems
    for d in (big, small):
        fs.makedirs(os.path.join(d, "a"))
        fs.makedirs(os.path.join(d, "b"))
    big_id = fs.filesystem_id(os.path.join(big, "a"))
    assert fs.filesystem_id(os.path.join(big, "b")) == fs.filesystem_id(big) == big_id
    small_id = fs.filesystem_id(os.path.join(small, "a"))
    assert fs.filesystem_id(os.path.join(small, "b")) == small_id != big_id
    assert fs.disk_usage(small)[0] == 64 * 1024 * 1024 != fs.disk_usage(big)[0]
    with pytest.raises(FileNotFoundError):
        fs.filesystem_id(os.path.join(big, "missing"))


def test_a_memory_mount_fills_up_on_its_own_and_survives_a_crash() -> None:
    fs = MemoryFileSystem(capacity_bytes=1024 * 1024)
    fs.mount("/m", 4096)
    f = fs.open_append("/m/a")
    with pytest.raises(OSError) as full:
        f.write(b"x" * 5000)
    assert full.value.errno == errno.ENOSPC and f.size() == 4096
    f.sync()
    _new_file(fs, "/b", b"y" * 5000)  # the root disk has room
    assert fs.disk_usage("/m/a") == (4096, 0)
    assert fs.disk_usage("/") == (1024 * 1024, 1024 * 1024 - 5000)
    fs.fsync_dir("/m")
    fs.fsync_dir("/")
    fs = fs.crash()
    assert fs.disk_usage("/m") == (4096, 0) and fs.filesystem_id("/m") == "/m"
    with pytest.raises(ValueError, match="cannot mount over files"):
        fs.mount("/m")


# -- the crash model -----------------------------------------------------------------------


def _new_file(fs: MemoryFileSystem, path: str, data: bytes, sync: bool = True) -> None:
    f = fs.open_append(path)
    f.write(data)
    if sync:
        f.sync()


def test_crash_keeps_synced_bytes_only() -> None:
    fs = MemoryFileSystem()
    fs.makedirs("/d")
    f = fs.open_append("/d/f")
    f.write(b"durable")
    f.sync()
    fs.fsync_dir("/d")
    f.write(b" lost")
    assert fs.unsynced_bytes("/d/f") == 5
    after = fs.crash()
    assert after.read_file("/d/f") == b"durable"


def test_crash_loses_names_not_fsynced_in_their_directory() -> None:
    fs = MemoryFileSystem()
    fs.makedirs("/d")
    _new_file(fs, "/d/kept", b"k")
    fs.fsync_dir("/d")
    _new_file(fs, "/d/new", b"n")  # synced content, but the name is not durable
    fs.rename("/d/kept", "/d/renamed")  # not durable either: no fsync of /d after it
    after = fs.crash()
    assert sorted(after.list_dir("/d")) == ["kept"]
    assert after.read_file("/d/kept") == b"k"


def test_removal_is_durable_after_directory_fsync() -> None:
    fs = MemoryFileSystem()
    fs.makedirs("/d")
    _new_file(fs, "/d/a", b"a")
    fs.fsync_dir("/d")
    fs.remove("/d/a")
    assert fs.crash().exists("/d/a")
    fs = MemoryFileSystem()
    fs.makedirs("/d")
    _new_file(fs, "/d/a", b"a")
    fs.fsync_dir("/d")
    fs.remove("/d/a")
    fs.fsync_dir("/d")
    assert not fs.crash().exists("/d/a")


def test_torn_crash_keeps_a_prefix_of_unsynced_bytes() -> None:
    kept = set()
    for seed in range(30):
        fs = MemoryFileSystem()
        fs.makedirs("/d")
        f = fs.open_append("/d/f")
        f.write(b"S" * 4)
        f.sync()
        fs.fsync_dir("/d")
        f.write(b"0123456789")
        data = fs.crash(torn=random.Random(seed)).read_file("/d/f")
        assert data == (b"SSSS" + b"0123456789")[: len(data)] and len(data) >= 4
        kept.add(len(data))
    assert len(kept) > 3


def test_crashed_process_can_no_longer_touch_the_disk() -> None:
    fs = MemoryFileSystem()
    fs.makedirs("/d")
    f = fs.open_append("/d/f")
    f.write(b"x")
    f.sync()
    fs.fsync_dir("/d")
    after = fs.crash()
    with pytest.raises(OSError):
        f.write(b"y")
    with pytest.raises(OSError):
        fs.open_append("/d/g")
    with pytest.raises(OSError):
        fs.list_dir("/d")
    assert after.read_file("/d/f") == b"x"


def test_corrupt_overwrites_in_place() -> None:
    fs = MemoryFileSystem()
    fs.makedirs("/d")
    _new_file(fs, "/d/f", b"abcdef")
    fs.fsync_dir("/d")
    fs.corrupt("/d/f", 2, b"XY")
    assert fs.crash().read_file("/d/f") == b"abXYef"
