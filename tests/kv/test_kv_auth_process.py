"""``bkeeper kv serve`` on a secure sandbox, with the sandbox's printed environment: the member
takes its token from BKEEPER_AUTH_TOKEN_FILE and refuses requests without it; the ``bkeeper
kv`` commands with the same environment send it, without it they end with one error line
naming what is missing (and never the token)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from bkeeper.testing.sandbox import Sandbox
from tests.security.commands import run, secure_sandbox_config

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")


def status_code(url: str, headers: dict[str, str]) -> tuple[int, str]:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


SERVE = ["kv", "serve", "--name", "sec", "--member-id", "m0", "--session-timeout-ms", "4000"]


def test_a_member_of_a_secure_cluster_needs_its_token(tmp_path: Path) -> None:
    config = secure_sandbox_config(tmp_path / "sb")
    with Sandbox(config) as box:
        env = box.client_env
        token = Path(env["BKEEPER_AUTH_TOKEN_FILE"]).read_text().strip()
        out = tmp_path / "member.log"
        clean = {k: v for k, v in os.environ.items() if not k.startswith("BKEEPER_")}
        with open(out, "wb") as sink:
            member = subprocess.Popen(
                [sys.executable, "-m", "bkeeper", *SERVE],
                env={**clean, **env},
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        try:
            url = ""
            deadline = time.monotonic() + 60
            while not url:
                assert time.monotonic() < deadline, out.read_text()
                assert member.poll() is None, out.read_text()
                for line in out.read_text().splitlines():
                    if line.startswith("kv: member ") and " at " in line:
                        url = line.rpartition(" at ")[2].strip()
                time.sleep(0.05)
            ok = run(env, "kv", "put", "--name", "sec", "k", "v")
            assert ok.returncode == 0 and "version 1" in ok.stdout, ok.stdout + ok.stderr
            ok = run(env, "kv", "get", "--name", "sec", "--url", url, "k")
            assert ok.returncode == 0 and ok.stdout.strip() == "v", ok.stdout + ok.stderr
            # The metadata URI alone (its digest file) finds the member but holds no token.
            bare = {"BKEEPER_METADATA": env["BKEEPER_METADATA"]}
            refused = run(bare, "kv", "get", "--name", "sec", "--url", url, "k")
            assert refused.returncode != 0
            last = refused.stderr.strip().splitlines()[-1]
            assert last.startswith("error: ") and "401" in last, refused.stderr
            assert "BKEEPER_AUTH_TOKEN_FILE" in last and "Traceback" not in refused.stderr
            for path in ("/v1/kv/k", "/v1/range", "/v1/status"):
                code, body = status_code(url + path, {})
                assert code == 401 and '"v"' not in body, (path, code, body)
                code, _ = status_code(url + path, {"Authorization": "Bearer not-the-token"})
                assert code == 403, path
                code, body = status_code(url + path, {"Authorization": f"Bearer {token}"})
                assert code == 200, (path, code, body)
            assert json.loads(body)["leading"] is True
        finally:
            member.terminate()
            member.wait(15)
        assert token not in out.read_text()
