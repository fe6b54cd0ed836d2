"""What an operator installs from ``deploy/`` (issue 42; docs/deploy.md) is what the commands
accept: every sample configuration file is read by its command's own loader with no unknown
key (its commented-out settings too), a key nobody knows is refused naming the file and the
line, each systemd unit parses and starts a real ``bkeeper`` command with options that command
accepts and the configuration file of its role, and a bookie, an auto-recovery process and a
dashboard started from the sample files (with flags for what differs on this machine) form a
working cluster on a real ZooKeeper.

The multi-host harness (``bkeeper.testing.multihost``) starts its bookies from
``deploy/conf/bookie.conf`` too.
"""

from __future__ import annotations

import configparser
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from bkeeper.autorecovery.config import AutoRecoveryConfig
from bkeeper.cli._conf import OptionNames, build_config, read_named
from bkeeper.cli._settings import build_configs, read_settings
from bkeeper.cli.autorecovery import AUTORECOVERY_NAMES, ProcessConfig
from bkeeper.cli.dashboard import DASHBOARD_NAMES
from bkeeper.cli.main import cli
from bkeeper.dashboard import DashboardConfig
from bkeeper.testing.child_process import spawn_child
from bkeeper.testing.zookeeper import ZooKeeperServer
from tests.cli.runner import run_cli

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CONF = DEPLOY / "conf"
SYSTEMD = DEPLOY / "systemd"
ROLES = ("bookie", "autorecovery", "dashboard")
#: Where the units expect things (docs/deploy.md, Install).
BKEEPER = "/opt/bkeeper/venv/bin/bkeeper"
ETC = "/etc/bkeeper"
#: A setting commented out, as the sample files show alternatives: ``# key = value``.
COMMENTED_SETTING = re.compile(r"^# ([a-z][a-z_]*) = (\S+)$")
#: How long a process started here may take to say it is ready.
READY_S = 60.0


# -- the sample configuration files ----------------------------------------------------------
def load(role: str, path: Path) -> None:
    """Read ``path`` as ``bkeeper <role> --conf path`` reads it, and build the configurations
    it gives (a usage error for any mistake)."""
    if role == "bookie":
        build_configs("/var/lib/bkeeper", read_settings(str(path), []))
        return
    names: OptionNames = AUTORECOVERY_NAMES if role == "autorecovery" else DASHBOARD_NAMES
    named = read_named(str(path), [], names)
    if role == "autorecovery":
        build_config(ProcessConfig, named)
        build_config(AutoRecoveryConfig, named)
    else:
        build_config(DashboardConfig, named, tls=None, auth=None)


def settings(path: Path) -> list[tuple[int, str, str]]:
    """``(line number, key, value)`` of each setting line of ``path``."""
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            found.append((number, key.strip(), value.strip()))
    return found


@pytest.mark.parametrize("role", ROLES)
def test_every_sample_file_is_read_by_its_command_with_no_unknown_key(role: str) -> None:
    path = CONF / f"{role}.conf"
    assert settings(path), f"{path}: no setting at all"
    load(role, path)


@pytest.mark.parametrize("role", ROLES)
def test_every_commented_out_setting_is_a_key_of_the_command_too(role: str, tmp_path: Path) -> None:
    lines = (CONF / f"{role}.conf").read_text().splitlines()
    uncommented = [COMMENTED_SETTING.sub(r"\1 = \2", line) for line in lines]
    shown = [line for line in lines if COMMENTED_SETTING.match(line)]
    if role in ("bookie", "autorecovery"):
        assert shown, "the alternatives the file shows are commented-out settings"
    path = tmp_path / f"{role}.conf"
    path.write_text("\n".join(uncommented) + "\n")
    load(role, path)


@pytest.mark.parametrize("role", ROLES)
def test_every_key_is_set_once_under_a_comment_saying_what_it_is(role: str) -> None:
    path = CONF / f"{role}.conf"
    lines = path.read_text().splitlines()
    keys = [key for _, key, _ in settings(path)]
    assert len(keys) == len(set(keys)), f"{path}: a key set twice"
    for number, key, _ in settings(path):
        block = []  # the lines above it, up to a blank line
        for line in reversed(lines[: number - 1]):
            if not line.strip():
                break
            block.append(line)
        assert any(line.startswith("#") for line in block), f"{path} line {number}: {key}"


@pytest.mark.parametrize(
    ("role", "what"),
    [
        ("bookie", "bookie, storage or autorecovery"),
        ("autorecovery", "autorecovery"),
        ("dashboard", "dashboard"),
    ],
)
def test_an_unknown_key_in_a_sample_file_is_refused_naming_the_file_and_line(
    role: str, what: str, tmp_path: Path
) -> None:
    path = tmp_path / f"{role}.conf"
    text = (CONF / f"{role}.conf").read_text()
    path.write_text(f"{text}# a setting nobody knows\nhots = 10.0.0.11\n")
    line = len(text.splitlines()) + 2
    message = f"--conf {path} line {line}: no {what} option named 'hots'"
    with pytest.raises(click.UsageError) as caught:
        load(role, path)
    assert caught.value.format_message().startswith(message)
    if role != "bookie":  # the bookie would raise this process's file limit before it says so
        done = run_cli(role, "--conf", str(path))
        assert (done.returncode, done.stderr.splitlines()[0][: len(message) + 7]) == (
            2,
            f"error: {message}",
        )


# -- the systemd units ---------------------------------------------------------------------------
def unit_settings(path: Path) -> dict[str, list[tuple[str, str]]]:
    """``path``'s directives by section, as systemd reads them: ``#`` comments, a line ending
    in a backslash continued on the next, a key given again appended (``ExecStart=`` empty
    resets it). It must parse as an INI file as well."""
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.read_string(path.read_text(), source=str(path))
    sections: dict[str, list[tuple[str, str]]] = {}
    section, pending = "", ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            sections.setdefault(section, [])
            continue
        key, _, value = line.partition("=")
        sections[section].append((key.strip(), " ".join(value.split())))
    assert set(sections) == set(parser.sections()), path
    return sections


def values(sections: dict[str, list[tuple[str, str]]], section: str, key: str) -> list[str]:
    """Every value of ``key`` in ``section``, an empty one dropping those before it."""
    found: list[str] = []
    for name, value in sections.get(section, []):
        if name == key:
            found = [] if not value else [*found, value]
    return found


def exec_start(sections: dict[str, list[tuple[str, str]]]) -> list[str]:
    starts = values(sections, "Service", "ExecStart")
    assert len(starts) == 1, starts
    return shlex.split(starts[0])


def check_command(argv: list[str], role: str) -> click.Context:
    """``argv`` runs ``bkeeper <role>`` installed as docs/deploy.md installs it, with options
    that command parses as given (nothing run)."""
    assert argv[:2] == [BKEEPER, role], argv
    command = cli.get_command(click.Context(cli), role)
    assert command is not None, role
    return command.make_context(f"bkeeper {role}", argv[2:])


def option(context: click.Context, name: str) -> object:
    return context.params[name]


@pytest.mark.parametrize("role", ROLES)
def test_each_unit_starts_its_command_from_its_sample_file(role: str) -> None:
    sections = unit_settings(SYSTEMD / f"bkeeper-{role}.service")
    assert set(sections) == {"Unit", "Service", "Install"}
    context = check_command(exec_start(sections), role)
    assert option(context, "conf") == f"{ETC}/{role}.conf"
    assert (CONF / f"{role}.conf").is_file()
    service = dict(sections["Service"])
    assert (service["User"], service["Group"]) == ("bkeeper", "bkeeper")
    assert (service["Restart"], service["KillSignal"]) == ("on-failure", "SIGTERM")
    assert service["RestartPreventExitStatus"] == "2"  # a usage error: restarting cannot help
    assert int(service["LimitNOFILE"]) >= 65536
    assert "network-online.target" in dict(sections["Unit"])["After"].split()
    assert "network-online.target" in dict(sections["Unit"])["Wants"].split()
    assert dict(sections["Install"])["WantedBy"] == "multi-user.target"
    # What the hardening keeps: the system calls of fsync and friends (@system-service holds
    # @sync), every address family the process opens.
    assert service["SystemCallFilter"] == "@system-service"
    assert {"AF_INET", "AF_INET6", "AF_UNIX"} <= set(service["RestrictAddressFamilies"].split())


def test_the_bookie_unit_leaves_time_to_drain_and_lets_it_write_its_directories() -> None:
    sections = unit_settings(SYSTEMD / "bkeeper-bookie.service")
    service = dict(sections["Service"])
    conf = {key: value for _, key, value in settings(CONF / "bookie.conf")}
    drain_s = int(conf["shutdown_drain_timeout_ms"]) / 1000
    # drain, then a checkpoint that flushes the write cache: far more than the drain alone
    assert int(service["TimeoutStopSec"]) >= drain_s + 60
    context = check_command(exec_start(sections), "bookie")
    writable = set(values(sections, "Service", "ReadWritePaths")[0].split())
    writable |= {f"/var/lib/{name}" for name in service.get("StateDirectory", "").split()}
    assert service["ProtectSystem"] == "strict"  # so only those are writable
    wanted = {str(option(context, "data_dir"))}
    for key in ("journal_dirs", "ledger_dirs"):
        wanted |= {d.strip() for d in conf.get(key, "").split(",") if d.strip()}
    outside = {d for d in wanted if not any(d == w or d.startswith(f"{w}/") for w in writable)}
    assert outside == set(), "directories the bookie writes that the unit keeps read-only"


#: The client settings of every ``bkeeper`` command, as environment variables.
CLIENT_VARIABLES = {envvar for p in cli.params for envvar in [getattr(p, "envvar", None)] if envvar}


@pytest.mark.parametrize("role", ROLES)
def test_each_secure_drop_in_gives_options_and_variables_the_command_takes(role: str) -> None:
    sections = unit_settings(SYSTEMD / "secure" / f"bkeeper-{role}.conf")
    assert set(sections) == {"Service"}
    variables = {v.partition("=")[0] for v in values(sections, "Service", "Environment")}
    assert variables == {"BKEEPER_TLS_CA", "BKEEPER_AUTH_TOKEN_FILE"}
    assert variables <= CLIENT_VARIABLES
    if role != "bookie":
        assert values(sections, "Service", "ExecStart") == []
        return
    given = [value for key, value in sections["Service"] if key == "ExecStart"]
    assert len(given) == 2 and given[0] == "", "the unit's ExecStart reset, then replaced"
    secure = check_command(exec_start(sections), "bookie")
    plain = check_command(exec_start(unit_settings(SYSTEMD / "bkeeper-bookie.service")), "bookie")
    for name in ("conf", "data_dir"):
        assert option(secure, name) == option(plain, name)
    assert option(secure, "tls_required") is True
    assert str(option(secure, "auth_token_secret_file")).startswith(f"{ETC}/")


@pytest.mark.usefixtures("subprocesses")
def test_systemd_analyze_finds_nothing_to_say(tmp_path: Path) -> None:
    """``systemd-analyze verify`` on each unit with its drop-in, the program path made this
    checkout's ``bkeeper`` (verify wants it to exist; nothing else is changed)."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the units are checked as INI files only")
    program = Path(sys.executable).with_name("bkeeper")
    assert program.exists(), program
    units = []
    for role in ROLES:
        unit = tmp_path / f"bkeeper-{role}.service"
        unit.write_text((SYSTEMD / unit.name).read_text().replace(BKEEPER, str(program)))
        drop_in = tmp_path / f"{unit.name}.d" / "secure.conf"
        drop_in.parent.mkdir()
        text = (SYSTEMD / "secure" / f"bkeeper-{role}.conf").read_text()
        drop_in.write_text(text.replace(BKEEPER, str(program)))
        units.append(str(unit))
    done = subprocess.run(
        [analyze, "verify", "--man=false", *units],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr, done.stdout) == (0, "", "")


# -- a cluster started from the sample files -------------------------------------------------
@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes started by the test: stopped with SIGTERM (then killed) at its end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in started:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def start(
    children: list[subprocess.Popen[bytes]], args: list[str], log: Path, ready: str
) -> re.Match[str]:
    """``bkeeper ARGS`` as a process logging to ``log``: the match of ``ready`` in its log
    once it is there; a process that exits first, or not ready in time, fails the test."""
    proc = spawn_child([sys.executable, "-m", "bkeeper", *args], log)
    children.append(proc)
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        found = re.search(ready, log.read_text(errors="replace"))
        if found:
            return found
        if proc.poll() is not None:
            pytest.fail(f"bkeeper {args[0]} exited with {proc.returncode}: {log.read_text()}")
        time.sleep(0.05)
    pytest.fail(f"bkeeper {args[0]} not ready within {READY_S:g} s: {log.read_text()}")


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as answer:
        assert answer.status == 200, url
        return str(answer.read().decode())


def wait_for(what: str, check: object, timeout_s: float = READY_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.2)


def test_a_bookie_auto_recovery_and_dashboard_start_from_the_sample_files(
    zookeeper: ZooKeeperServer, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    uri = zookeeper.uri(f"/deploy-{uuid.uuid4().hex[:12]}/ledgers")
    done = run_cli("shell", "initnewcluster", "--metadata", uri)
    assert done.returncode == 0, done.stderr
    # What differs on this machine is given as flags, which win over the file: the data
    # directory, addresses and ports (none of the file's is free or reachable here), the
    # cluster. The rest (bookie_id, timeouts, disk thresholds, ...) is the file's.
    bookie = start(
        children,
        ["bookie", "--conf", str(CONF / "bookie.conf"), "--data-dir", str(tmp_path / "bookie"),
         "--host", "127.0.0.1", "--port", "0", "--http-port", "0", "-o", "http_host=127.0.0.1",
         "--metadata", uri],
        tmp_path / "bookie.log",
        r"bookie (\S+) ready on 127\.0\.0\.1:(\d+) \(admin (http://127\.0\.0\.1:\d+)\)",
    )  # fmt: skip
    assert bookie.group(1) == "bk1"  # the file's id
    recovery = start(
        children,
        ["autorecovery", "--conf", str(CONF / "autorecovery.conf"), "--metadata", uri,
         "--metrics-port", "0"],
        tmp_path / "autorecovery.log",
        r"autorecovery (\S+) ready \(metadata (\S+), metrics (http://127\.0\.0\.1:\d+/metrics)\)",
    )  # fmt: skip
    assert recovery.group(2) == uri
    dashboard = start(
        children,
        ["dashboard", "--conf", str(CONF / "dashboard.conf"), "--metadata", uri, "--port", "0"],
        tmp_path / "dashboard.log",
        r"dashboard ready on (http://127\.0\.0\.1:\d+/)",
    )
    # The bookie registered and serves: the shell writes a ledger to it and reads it back.
    listed = run_cli("shell", "listbookies", "--metadata", uri)
    row = [line.split() for line in listed.stdout.splitlines() if " bk1 " in line]
    assert row and {"writable", f"127.0.0.1:{bookie.group(2)}"} <= set(row[0]), listed.stdout
    sane = run_cli("shell", "bookiesanity", "--metadata", uri, "--bookie", "bk1")
    assert sane.returncode == 0 and sane.stdout.startswith("bookie bk1 is sane"), sane
    assert "bkeeper_bookie_requests_total" in get(f"{bookie.group(3)}/metrics")
    # Auto-recovery answers on its metrics port and is the auditor.
    assert "bkeeper_autorecovery_under_replicated_ledgers" in get(recovery.group(3))
    auditor = run_cli("shell", "whoisauditor", "--metadata", uri)
    assert auditor.stdout.strip() == recovery.group(1)

    # The dashboard shows the bookie, its admin HTTP probed at the address it registered.
    def bookie_probed() -> bool:
        overview = json.loads(get(f"{dashboard.group(1)}api/overview"))
        rows = [row for row in overview["bookies"] if row["bookie_id"] == "bk1"]
        return bool(rows) and rows[0]["http_url"] == bookie.group(3) and not rows[0]["http_error"]

    wait_for("the dashboard probed bk1", bookie_probed)
    # Each stops on SIGTERM with status 0, as the units expect.
    for proc in reversed(children):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0


@pytest.mark.parametrize(
    ("role", "key"),
    [("bookie", "http_host"), ("autorecovery", "rate_bytes_per_s"), ("dashboard", "port")],
)
def test_the_walk_through_names_the_lines_of_the_sample_files(role: str, key: str) -> None:
    """docs/deploy.md shows a mistake in each file by its line: that line sets the key."""
    doc = (DEPLOY.parent / "docs" / "deploy.md").read_text()
    found = re.search(rf"error: --conf {ETC}/{role}\.conf line (\d+): ", doc)
    assert found, role
    number = int(found.group(1))
    assert [k for n, k, _ in settings(CONF / f"{role}.conf") if n == number] == [key]
