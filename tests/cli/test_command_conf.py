"""``--conf FILE`` for ``bkeeper autorecovery`` and ``bkeeper dashboard`` (issue 42), read by
the reader the bookie's ``--conf`` uses (``bkeeper.cli._conf``): the same names as ``-o``,
flags given winning over ``-o`` and ``-o`` over the file, and every mistake one line naming
the file, the line and the key: an unknown key, a value of the wrong type, a value the
configuration refuses. Each command here stops at its mistake, before it connects to
anything, so it runs in this process (tests/cli/runner.py); tests/cli/test_deploy_files.py
starts them from deploy/conf."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from bkeeper.cli._settings import build_configs, merged, read_settings
from tests.cli.runner import run_cli

NOWHERE = "zk://127.0.0.1:1/nowhere"


def _conf(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "role.conf"
    path.write_text("\n".join(["# a comment", "", *lines]) + "\n")
    return str(path)


def _refused(*args: str, env: dict[str, str | None] | None = None) -> str:
    done = run_cli(*args, env=env)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    return done.stderr


@pytest.mark.parametrize("command", ["autorecovery", "dashboard"])
def test_help_shows_conf_and_o(command: str) -> None:
    done = run_cli(command, "--help")
    assert done.returncode == 0, done.stderr
    assert "--conf FILE" in done.stdout
    assert "-o, --option KEY=VALUE" in done.stdout
    assert "Flags given win over -o, -o over --conf." in " ".join(done.stdout.split())


@pytest.mark.parametrize(
    ("command", "line", "message"),
    [
        (
            "autorecovery",
            "ledgers_in_paralel = 4",
            "no autorecovery option named 'ledgers_in_paralel'; "
            "did you mean 'ledgers_in_parallel'?",
        ),
        (
            "dashboard",
            "scrape_intervl_ms = 500",
            "no dashboard option named 'scrape_intervl_ms'; did you mean 'scrape_interval_ms'?",
        ),
        ("autorecovery", "gcWaitTime = 5", "Java's 'gcWaitTime' is bkeeper's gc_wait_ms"),
        ("autorecovery", "metrics_port = x", "metrics_port: 'x' is not an integer"),
        ("dashboard", "history_points_max = many", "history_points_max: 'many' is not an integer"),
        ("dashboard", "host", "'host' is not key=value"),
        # values the configuration refuses, named where they were set all the same
        ("autorecovery", "ledgers_in_parallel = 0", "ledgers_in_parallel: must be a positive"),
        ("autorecovery", "id = two words", "id: 'two words' has characters other than"),
        ("autorecovery", "metrics_port = 70000", "metrics_port: 70000 is not a TCP port"),
        ("dashboard", "port = 70000", "port: 70000 is not a TCP port (0..65535)"),
        ("dashboard", "bookies_max = 0", "bookies_max: must be a positive integer, got 0"),
    ],
)
def test_a_mistake_in_the_file_names_the_file_the_line_and_the_key(
    tmp_path: Path, command: str, line: str, message: str
) -> None:
    conf = _conf(tmp_path, f"metadata_uri = {NOWHERE}", line)
    err = _refused(command, "--conf", conf)
    assert err.startswith(f"error: --conf {conf} line 4: {message}"), err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command", ["autorecovery", "dashboard"])
def test_a_file_that_cannot_be_read_is_named(tmp_path: Path, command: str) -> None:
    missing = tmp_path / "missing.conf"
    err = _refused(command, "--conf", str(missing))
    assert err.startswith(f"error: --conf {missing}: cannot read it: "), err


def test_autorecovery_o_wins_over_the_file_and_a_flag_over_o(tmp_path: Path) -> None:
    conf = _conf(tmp_path, f"metadata_uri = {NOWHERE}", "id = from the file")
    # Each id is refused (a space), by where the winning one was set.
    assert "error: -o id=from o: id: 'from o'" in _refused(
        "autorecovery", "--conf", conf, "-o", "id=from o"
    )
    assert "error: id: 'from flag' has characters" in _refused(
        "autorecovery", "--conf", conf, "-o", "id=from o", "--id", "from flag"
    )


def test_autorecovery_the_file_wins_over_the_environment(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "metadata_uri =")
    err = _refused("autorecovery", "--conf", conf, env={"BKEEPER_METADATA": NOWHERE})
    assert err.startswith(f"error: --conf {conf} line 3: metadata_uri: the cluster"), err


def test_dashboard_o_wins_over_the_file_and_a_flag_over_o(tmp_path: Path) -> None:
    conf = _conf(tmp_path, f"metadata_uri = {NOWHERE}", "port = 70000")
    assert f"error: --conf {conf} line 4: port: 70000" in _refused("dashboard", "--conf", conf)
    assert "error: -o port=80000: port: 80000 is not a TCP port" in _refused(
        "dashboard", "--conf", conf, "-o", "port=80000"
    )
    # The flag's empty metadata URI wins over -o's: refused before the file's port is looked at.
    assert "error: metadata_uri: the dashboard needs a cluster" in _refused(
        "dashboard", "--conf", conf, "-o", f"metadata_uri={NOWHERE}", "--metadata", ""
    )


def test_the_file_takes_javas_names_for_autorecovery(tmp_path: Path) -> None:
    conf = _conf(tmp_path, f"metadataServiceUri = {NOWHERE}", "auditorPeriodicCheckInterval=-1")
    err = _refused("autorecovery", "--conf", conf)
    # Java's name of check_all_ledgers_interval_s, whose value is refused where it was set
    assert f"--conf {conf} line 4: check_all_ledgers_interval_s: must be" in err, err


def test_a_bookie_value_its_configuration_refuses_names_the_line(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "port = 3181", "journal_file_bytes_max = 0")
    settings = read_settings(conf, [], {"host": "127.0.0.1"})
    with pytest.raises(click.UsageError) as caught:
        build_configs("/d", merged(read_settings(None, [], {"port": 3181}), settings))
    assert caught.value.format_message() == (
        f"--conf {conf} line 4: journal_file_bytes_max: must be a positive integer, got 0"
    )
    # A flag given over the file's value: the flag's value is refused, named by its field.
    settings = read_settings(conf, [], {"journal_file_bytes_max": -1})
    with pytest.raises(click.UsageError) as caught:
        build_configs("/d", settings)
    assert caught.value.format_message().startswith("journal_file_bytes_max: must be")
