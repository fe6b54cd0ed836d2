"""A secure sandbox (TLS required, token authentication) and the ``bkeeper`` command run
without each credential: each run ends with one ``error:`` line naming what the bookie
requires and the option (variable) that gives it, not a bare EUA."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bkeeper.common.auth import make_token
from bkeeper.testing.sandbox import Sandbox
from tests.security.commands import run, secure_sandbox_config

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: "), result.stderr
    return last


def token_file(where: Path, name: str, token: str) -> str:
    path = where / name
    path.write_text(token + "\n")
    path.chmod(0o600)
    return str(path)


def test_each_missing_credential_is_named(tmp_path: Path) -> None:
    config = secure_sandbox_config(tmp_path / "sb")
    with Sandbox(config) as box:
        uri, env = box.metadata_uri, box.client_env
        ca, token = env["BKEEPER_TLS_CA"], env["BKEEPER_AUTH_TOKEN_FILE"]
        secret = (config.data_dir / "security" / "token.secret").read_bytes().rstrip(b"\r\n")
        expired = token_file(tmp_path, "expired.token", make_token(secret, "sandbox", 60, 1e9))
        foreign = token_file(tmp_path, "foreign.token", make_token(b"f" * 40, "sandbox", 600))
        ok = run(env, "log", "create", "events", "--metadata", uri)
        assert ok.returncode == 0, ok.stderr
        ok = run(env, "log", "append", "events", "a", "b", "--metadata", uri)
        assert ok.returncode == 0, ok.stderr

        simpletest = ("shell", "simpletest", "--metadata", uri, "--entries", "5")
        append = ("log", "append", "events", "c", "--metadata", uri)
        read = ("log", "read", "events", "--metadata", uri)
        cases = [
            ({}, "requires TLS and a token (authentication BKeeperToken): give them with "
                 "--client-tls-ca (BKEEPER_TLS_CA) and --auth-token-file (BKEEPER_AUTH_TOKEN_FILE)"),
            ({"BKEEPER_TLS_CA": ca}, "requires a token (authentication BKeeperToken): give one "
                                     "with --auth-token-file (BKEEPER_AUTH_TOKEN_FILE)"),
            ({"BKEEPER_AUTH_TOKEN_FILE": token}, "requires TLS: give it with --client-tls-ca "
                                                 "(BKEEPER_TLS_CA)"),
            ({"BKEEPER_TLS_CA": ca, "BKEEPER_AUTH_TOKEN_FILE": foreign},
             f"refused the token in {foreign} (subject sandbox): signed with another secret, or "
             "the subject "
             "is not admitted (the bookie's log says which)"),
        ]  # fmt: skip
        for case_env, expected in cases:
            for command in (simpletest, append, read):
                line = error_line(run(case_env, *command))
                assert "bookie 127.0.0.1:" in line and expected in line, (case_env, command, line)
                assert "EUA" not in line, line
        # An expired token is refused by the client itself, before any connection.
        expired_env = {"BKEEPER_TLS_CA": ca, "BKEEPER_AUTH_TOKEN_FILE": expired}
        for command in (simpletest, append, read):
            line = error_line(run(expired_env, *command))
            assert (
                f"the token in {expired} (subject sandbox) expired at 2001-09-09 01:47:40 UTC: "
                "make a new one with `bkeeper security make-token` (docs/security.md)"
            ) in line, line
        # The foreign token reached the bookies, the expired one none.
        logs = "".join((config.data_dir / f"bookie-{i}.log").read_text() for i in range(3))
        assert "authentication refused: bad token signature" in logs
        assert "expired" not in logs
        # With everything, the log reads back and every bookie tells its disk space.
        ok = run(env, *read)
        assert ok.returncode == 0 and "a" in ok.stdout, ok.stderr
        info = ("shell", "bookieinfo", "--json", "--metadata", uri)
        ok = run(env, *info)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert '"error": null' in ok.stdout and '"error": "' not in ok.stdout, ok.stdout
        refused = run({"BKEEPER_TLS_CA": ca}, *info)
        assert refused.returncode != 0
        assert refused.stdout.count("requires a token (authentication BKeeperToken)") == 3, (
            refused.stdout
        )
