"""The secure sandbox's credentials after its token secret file was rotated
(``bkeeper security make-secret --add``): its client token is signed by the newest secret, so
bookies reading the same file admit it (before: the two lines were taken as one secret)."""

from __future__ import annotations

import base64
import secrets
import time
from pathlib import Path

from bkeeper.common.auth import read_token_secret_file, verify_token
from bkeeper.testing.sandbox_security import SandboxSecurity


def test_client_token_signed_by_the_newest_secret_after_a_rotation(
    tmp_path: Path, subprocesses: None
) -> None:
    where = tmp_path / "security"
    first = SandboxSecurity.prepare(where)
    with first.token_secret_file.open("ab") as file:
        file.write(base64.b64encode(secrets.token_bytes(48)) + b"\n")
    first.token_file.unlink()  # as when the old token expired

    again = SandboxSecurity.prepare(where)
    both = read_token_secret_file(str(again.token_secret_file))
    assert len(both) == 2
    token = again.token_file.read_bytes().strip()
    claims = verify_token(both.newest, token, time.time())
    assert claims.subject == "sandbox"
