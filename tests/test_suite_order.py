"""The suite's file order (tests/suite_order.py): longest recorded file first, a file not
recorded as the mean, each file's tests in their own order; a bad durations file named."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from tests.suite_order import DURATIONS_FILE, IN_PROCESS, load_durations, order_items


@dataclass
class Item:
    nodeid: str
    integration: bool = True

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "integration" and self.integration else None


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


def test_a_files_in_process_tests_are_timed_apart_from_its_integration_tests() -> None:
    items = [Item("tests/a.py::pure", integration=False), Item("tests/b.py::pure", False)]
    durations = {"a.py": 100.0, "a.py [in-process]": 1.0, "b.py [in-process]": 2.0}
    order_items(cast(list[pytest.Item], items), durations)
    assert [item.nodeid for item in items] == ["tests/b.py::pure", "tests/a.py::pure"]


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
    missing = sorted(
        name for name in durations if not (tests_dir / name.removesuffix(IN_PROCESS)).is_file()
    )
    assert not missing, f"recorded, but no such test file (rerun --update-durations): {missing}"
