"""A client whose token came from a file takes a new token written there without a restart
(the bookies' own auto-recovery, log consumers, KV members, Spark workers through a rotation:
docs/security.md, "Rotating the token secret"); a file that turns bad keeps the token in use."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.client.handshake import check_credentials, client_security
from bkeeper.common import auth
from bkeeper.common.auth import TokenClientProvider, make_token, read_token_file
from bkeeper.common.errors import AuthenticationError

OLD = make_token(b"o" * 40, "worker", 3600)
NEW = make_token(b"n" * 40, "worker", 3600)


def write(path: Path, text: str) -> None:
    """As the rotation steps say: a new file renamed over the old one (mode 600)."""
    fresh = path.with_suffix(".new")
    fd = os.open(fresh, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as file:
        file.write(text + "\n")
    fresh.rename(path)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_changed_token_file_is_read_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "worker.token"
    write(path, OLD)
    clock = Clock()
    provider = TokenClientProvider(read_token_file(str(path), "--auth-token-file"), clock)
    assert provider.token == OLD

    write(path, NEW)
    assert provider.token == OLD  # looked at no more often than TOKEN_FILE_REFRESH_S
    clock.now += auth.TOKEN_FILE_REFRESH_S
    with caplog.at_level(logging.INFO, logger="bkeeper.common.auth"):
        assert provider.token == NEW
        assert provider.new_session("b:1").first() == NEW.encode()
    assert f"token reloaded from {path}" in caplog.text

    caplog.clear()
    write(path, "not ascII: \u00e9")
    for _ in range(3):
        clock.now += auth.TOKEN_FILE_REFRESH_S
        with caplog.at_level(logging.INFO, logger="bkeeper.common.auth"):
            assert provider.token == NEW  # kept
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, caplog.text  # one line per problem
    assert "keeping the token in use" in warnings[0].getMessage()
    assert NEW not in caplog.text and "not ascII" not in caplog.text

    path.unlink()
    clock.now += auth.TOKEN_FILE_REFRESH_S
    assert provider.token == NEW  # a missing file keeps it too


def test_a_token_given_inline_never_looks_at_files(tmp_path: Path) -> None:
    clock = Clock()
    provider = TokenClientProvider(auth.ClientAuthConfig(token=OLD), clock)
    clock.now += 10 * auth.TOKEN_FILE_REFRESH_S
    assert provider.token == OLD


def test_an_expired_token_renewed_in_its_file_is_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client's own expiry check looks at the token it would present now."""
    monkeypatch.setattr(auth, "TOKEN_FILE_REFRESH_S", 0.0)
    path = tmp_path / "worker.token"
    write(path, make_token(b"o" * 40, "worker", 60, now_s=1_000_000))
    security = client_security(ClientConfig(auth=read_token_file(str(path), "--auth-token-file")))
    assert security is not None
    with pytest.raises(AuthenticationError, match="expired at"):
        check_credentials("127.0.0.1:3181", None, security)
    write(path, NEW)
    check_credentials("127.0.0.1:3181", None, security)
