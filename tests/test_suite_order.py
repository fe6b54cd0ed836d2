"""The suite's file order (tests/suite_order.py): longest recorded file first, a file not
recorded as the mean, each file's tests in their own order; a bad durations file named."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from tests.suite_order import DURATIONS_FILE, load_durations, order_items


@dataclass
class Item:
    nodeid: str


def test_files_run_longest_first_an_unrecorded_one_as_the_mean() -> None:
    items = [
        Item("tests/a.py::one"),
        Item("tests/new.py::one"),
        Item("tests/b.py::one"),
        Item("tests/a.py::two"),
        Item("tests/c.py::one"),
    ]
    durations = {"a.py": 1.0, "b.py": 50.0, "c.py": 9.0}  # mean 20
    order_items(cast(list[pytest.Item], items), durations)
    assert [item.nodeid for item in items] == [
        "tests/b.py::one",
        "tests/new.py::one",
        "tests/c.py::one",
        "tests/a.py::one",
        "tests/a.py::two",
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [("{", "not JSON"), ('["a.py"]', "not an object"), ('{"a.py": "slow"}', "not an object")],
)
def test_a_bad_durations_file_is_refused_naming_it(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "durations.json"
    path.write_text(text)
    with pytest.raises(pytest.UsageError, match=f"{path}: {says}"):
        load_durations(path)


def test_the_recorded_durations_are_valid_and_name_existing_files() -> None:
    durations = load_durations()
    assert durations, f"{DURATIONS_FILE} is missing: bash scripts/test.sh --update-durations"
    tests_dir = DURATIONS_FILE.parent
    missing = sorted(name for name in durations if not (tests_dir / name).is_file())
    assert not missing, f"recorded, but no such test file (rerun --update-durations): {missing}"
