"""``bkeeper sandbox --secure``: ZooKeeper with ACLs, bookies with TLS required and token
authentication; a ``bkeeper`` command with the environment the sandbox prints is a client of
it, and one without any part of it is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bkeeper.testing.sandbox import Sandbox
from tests.security.commands import run, secure_sandbox_config

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")


def test_secure_sandbox_admits_its_clients_only(tmp_path: Path) -> None:
    config = secure_sandbox_config(tmp_path / "sb")
    with Sandbox(config) as box:
        uri, env = box.metadata_uri, box.client_env
        assert "?digest-file=" in uri
        assert env == {
            "BKEEPER_METADATA": uri,
            "BKEEPER_TLS_CA": str(config.data_dir / "security" / "ca.pem"),
            "BKEEPER_AUTH_TOKEN_FILE": str(config.data_dir / "security" / "client.token"),
        }
        for path in [env["BKEEPER_AUTH_TOKEN_FILE"], uri.split("digest-file=")[1]]:
            assert Path(path).stat().st_mode & 0o077 == 0, path
        ok = run(env, "shell", "simpletest", "--metadata", uri, "--entries", "20")
        assert ok.returncode == 0, ok.stderr
        assert "simpletest ok" in ok.stdout + ok.stderr

        # Without the token: refused, saying what the bookies require and how to give it.
        no_token = run({"BKEEPER_TLS_CA": env["BKEEPER_TLS_CA"]}, "shell", "simpletest",
                       "--metadata", uri, "--entries", "5")  # fmt: skip
        assert no_token.returncode != 0
        assert "Traceback" not in no_token.stderr, no_token.stderr
        assert no_token.stderr.strip().splitlines()[-1].startswith("error: bookie "), (
            no_token.stderr
        )
        assert "requires a token (authentication BKeeperToken): give one" in no_token.stderr
        # Without TLS (token alone): the token is not taken in the clear.
        no_tls = run({"BKEEPER_AUTH_TOKEN_FILE": env["BKEEPER_AUTH_TOKEN_FILE"]}, "shell",
                     "simpletest", "--metadata", uri, "--entries", "5")  # fmt: skip
        assert no_tls.returncode != 0
        assert "Traceback" not in no_tls.stderr, no_tls.stderr
        # Without ZooKeeper's identity: metadata refused.
        plain_uri = uri.split("?")[0]
        no_zk = run(env, "shell", "listledgers", "--metadata", plain_uri)
        assert no_zk.returncode != 0
        assert "Traceback" not in no_zk.stderr, no_zk.stderr
        assert "not authorized for" in no_zk.stderr.strip().splitlines()[-1], no_zk.stderr
        bookie_log = (config.data_dir / "bookie-0.log").read_text()
        token = Path(env["BKEEPER_AUTH_TOKEN_FILE"]).read_text().strip()
        assert token not in bookie_log
