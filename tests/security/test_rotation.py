"""Token secret rotation without processes: tokens of either of two secrets admitted, the
secret file's format and every way it is refused, the bookie's reload of a changed file (and
keeping its secrets when the file turns bad), and the ``bkeeper security`` rotation commands.
docs/security.md, "Rotating the token secret"."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from bkeeper.cli.security import security
from bkeeper.common.auth import (
    TOKEN_PLUGIN,
    ServerAuthConfig,
    TokenSecrets,
    TokenServerProvider,
    make_token,
    parse_token_secrets,
    read_token_secret_file,
    verify_token,
)
from bkeeper.common.errors import AuthenticationError, ConfigError
from bkeeper.server.config import BookieConfig
from bkeeper.server.security import BookieSecurity, TokenSecretReloader

OLD = b"old-secret-0123456789abcdef-0123456789"
NEW = b"new-secret-0123456789abcdef-0123456789"
OTHER = b"other-secret-0123456789abcdef-01234567"
NOW = 1_800_000_000


def token(secret: bytes, subject: str = "writer") -> bytes:
    return make_token(secret, subject, 600, now_s=NOW).encode()


def write_private(path: Path, data: bytes) -> None:
    """Replace ``path`` (mode 600) as ``bkeeper security`` does: a new file renamed over it."""
    temporary = path.with_suffix(".tmp")
    temporary.write_bytes(data)
    temporary.chmod(0o600)
    os.replace(temporary, path)


# -- two secrets -------------------------------------------------------------------------------
def test_tokens_of_either_secret_are_admitted_and_no_other() -> None:
    both = TokenSecrets(OLD, NEW)
    assert verify_token(both, token(OLD), NOW).subject == "writer"
    assert verify_token(both, token(NEW, "reader"), NOW).subject == "reader"
    with pytest.raises(AuthenticationError, match="bad token signature"):
        verify_token(both, token(OTHER), NOW)
    with pytest.raises(AuthenticationError, match="bad token signature"):
        verify_token(TokenSecrets(NEW), token(OLD), NOW)
    provider = TokenServerProvider(ServerAuthConfig(TOKEN_PLUGIN, both), clock=lambda: NOW)
    assert provider.new_session("peer").process(token(OLD)).identity == "writer"
    assert provider.new_session("peer").process(token(NEW)).identity == "writer"


def test_secrets_are_hidden_from_repr_and_asdict() -> None:
    config = ServerAuthConfig(TOKEN_PLUGIN, TokenSecrets(OLD, NEW), token_secret_file="/s")
    bookie = BookieConfig(data_dir="-", auth=config)
    provider = TokenServerProvider(config)
    for shown in (repr(config), repr(bookie), str(dataclasses.asdict(bookie)), repr(provider)):
        assert OLD.decode() not in shown and NEW.decode() not in shown
    dumped = dataclasses.asdict(bookie)["auth"]
    assert repr(dumped["token_secret"]) == "TokenSecrets(<2 hidden>)"
    assert dumped["token_secret_file"] == "/s" and dumped["token_secret_refresh_ms"] == 5000
    # One secret given as bytes (as before rotation existed) is a TokenSecrets of one.
    assert ServerAuthConfig(TOKEN_PLUGIN, OLD).secrets == TokenSecrets(OLD)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (TokenSecrets, "auth.token_secret: 1 to 2 secrets, got 0"),
        (lambda: TokenSecrets(OLD, NEW, OTHER), "auth.token_secret: 1 to 2 secrets, got 3"),
        (lambda: TokenSecrets(OLD, b"short"), "auth.token_secret: must be at least 32 bytes"),
        (lambda: ServerAuthConfig(TOKEN_PLUGIN, OLD, token_secret_refresh_ms=0),
         "auth.token_secret_refresh_ms: must be a positive integer, got 0"),
    ],
)  # fmt: skip
def test_secret_settings_refused(make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()  # type: ignore[operator]


# -- the secret file ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "secrets"),
    [
        (OLD, (OLD,)),
        (OLD + b"\n", (OLD,)),
        (OLD + b"\r\n" + NEW + b"\r\n", (OLD, NEW)),
        (OLD + b"\n" + NEW + b"\n\n", (OLD, NEW)),
    ],
)
def test_secret_file_one_secret_a_line_newest_last(data: bytes, secrets: tuple[bytes]) -> None:
    parsed = parse_token_secrets(data, "f")
    assert parsed.secrets == secrets and parsed.newest == secrets[-1]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "f: empty"),
        (b"\n\n", "f: empty"),
        (OLD + b"\n\n" + NEW, "f line 2: empty"),
        (b"  \n" + NEW, "f line 1: empty"),
        (OLD + b"\n" + b"short-secret", "f line 2: a secret must be at least 32 bytes, this one has 12"),
        (OLD + b"\n" + NEW + b"\n" + OTHER, "f line 3: more than 2 secrets .*drop the old one first"),
    ],
)  # fmt: skip
def test_secret_file_errors_name_the_line_never_the_content(data: bytes, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{message}") as caught:
        parse_token_secrets(data, "f")
    for secret in (OLD, NEW, OTHER, b"short-secret"):
        assert secret.decode() not in str(caught.value)


def test_secret_file_readable_by_others_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_bytes(OLD + b"\n")
    path.chmod(0o640)
    with pytest.raises(ConfigError, match=r"readable by others \(mode 640\); chmod 600 it"):
        read_token_secret_file(str(path))


# -- reloading ---------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def monotonic(self) -> float:
        return self.now_s

    def wall_ms(self) -> int:
        return int(self.now_s * 1000)


def reloading(path: Path) -> tuple[TokenServerProvider, TokenSecretReloader, Clock]:
    config = ServerAuthConfig(
        TOKEN_PLUGIN, read_token_secret_file(str(path)), token_secret_file=str(path)
    )
    provider = TokenServerProvider(config, clock=lambda: NOW)
    clock = Clock()
    return provider, TokenSecretReloader(provider, str(path), 5.0, clock), clock


def admits(provider: TokenServerProvider, secret: bytes) -> bool:
    try:
        provider.new_session("peer").process(token(secret))
    except AuthenticationError:
        return False
    return True


def test_a_changed_file_is_read_again_after_the_refresh_interval(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "bkeeper.server.security")
    path = tmp_path / "secret"
    write_private(path, OLD + b"\n")
    provider, reloader, clock = reloading(path)
    reloader.maybe_reload()
    assert admits(provider, OLD) and not admits(provider, NEW)

    write_private(path, OLD + b"\n" + NEW + b"\n")  # a rotation's first step
    clock.now_s += 4.9
    reloader.maybe_reload()  # not looked at yet: at most every 5 s
    assert not admits(provider, NEW)
    clock.now_s += 0.2
    reloader.maybe_reload()
    assert admits(provider, OLD) and admits(provider, NEW)
    assert caplog.messages[-1] == f"token secrets reloaded: 2 (from {path})"

    write_private(path, NEW + b"\n")  # its last step
    clock.now_s += 5
    reloader.maybe_reload()
    assert admits(provider, NEW) and not admits(provider, OLD)
    assert caplog.messages[-1] == f"token secrets reloaded: 1 (from {path})"
    clock.now_s += 5
    reloader.maybe_reload()  # unchanged: not read, not logged again
    assert len(caplog.messages) == 2


def test_an_invalid_or_missing_file_keeps_the_secrets_in_use(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "bkeeper.server.security")
    path = tmp_path / "secret"
    write_private(path, OLD + b"\n" + NEW + b"\n")
    provider, reloader, clock = reloading(path)
    for bad, why in [
        (OLD + b"\n\n" + NEW, f"token secret file {path} line 2: empty"),
        (NEW + b"\n" + b"x" * 10, f"token secret file {path} line 2: a secret must be at least"),
        (OLD + b"\n" + NEW + b"\n" + OTHER, f"token secret file {path} line 3: more than 2"),
        (None, f"token secret file {path}: No such file or directory"),
    ]:
        if bad is None:
            path.unlink()
        else:
            write_private(path, bad)
        caplog.clear()
        for _ in range(3):  # one line per problem, not one per look
            clock.now_s += 5
            reloader.maybe_reload()
            assert admits(provider, OLD) and admits(provider, NEW)
        (line,) = caplog.messages
        assert line.startswith("token secrets not reloaded, keeping the 2 in use: " + why)
        for secret in (OLD, NEW, OTHER):
            assert secret.decode() not in line
    write_private(path, NEW + b"\n")  # valid again
    clock.now_s += 5
    reloader.maybe_reload()
    assert admits(provider, NEW) and not admits(provider, OLD)


def test_bookie_security_reloads_for_connections_and_admin_http(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    write_private(path, OLD + b"\n")
    auth = ServerAuthConfig(
        TOKEN_PLUGIN,
        read_token_secret_file(str(path)),
        token_secret_file=str(path),
        token_secret_refresh_ms=1,
    )
    bookie = BookieSecurity.from_config(BookieConfig(data_dir="-", auth=auth))
    assert bookie is not None and bookie.auth is not None
    authenticate = bookie.authenticate
    assert authenticate is not None
    fresh = make_token(NEW, "admin", 600).encode()
    with pytest.raises(AuthenticationError, match="bad token signature"):
        authenticate(fresh)
    write_private(path, OLD + b"\n" + NEW + b"\n")  # renamed over: another inode
    time.sleep(0.01)  # past the 1 ms refresh interval
    assert authenticate(fresh) == "admin"
    bookie.refresh_credentials()
    session = bookie.auth.new_session("peer")  # what a new connection does after refreshing
    assert session.process(make_token(NEW, "w", 600).encode()).identity == "w"


async def test_bookie_security_run_reloads_an_idle_bookie(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "bkeeper.server.security")
    path = tmp_path / "secret"
    write_private(path, OLD + b"\n")
    auth = ServerAuthConfig(
        TOKEN_PLUGIN, TokenSecrets(OLD), token_secret_file=str(path), token_secret_refresh_ms=10
    )
    bookie = BookieSecurity.from_config(BookieConfig(data_dir="-", auth=auth))
    assert bookie is not None and isinstance(bookie.auth, TokenServerProvider)
    stopping = asyncio.Event()
    task = asyncio.create_task(bookie.run(stopping))
    write_private(path, OLD + b"\n" + NEW + b"\n")
    async with asyncio.timeout(10):  # no authentication at all: the loop reloads
        while bookie.auth.secrets != TokenSecrets(OLD, NEW):
            await asyncio.sleep(0.01)
    assert f"token secrets reloaded: 2 (from {path})" in caplog.messages
    stopping.set()
    async with asyncio.timeout(10):
        await task
    # Without a secret file there is nothing to look at: it returns at once.
    plain = BookieSecurity.from_config(
        BookieConfig(data_dir="-", auth=ServerAuthConfig(TOKEN_PLUGIN, OLD))
    )
    assert plain is not None and plain.secret_reloader is None
    async with asyncio.timeout(1):
        await plain.run(asyncio.Event())


async def test_a_failing_refresh_does_not_end_the_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "secret"
    write_private(path, OLD + b"\n")
    auth = ServerAuthConfig(
        TOKEN_PLUGIN, TokenSecrets(OLD), token_secret_file=str(path), token_secret_refresh_ms=5
    )
    bookie = BookieSecurity.from_config(BookieConfig(data_dir="-", auth=auth))
    assert bookie is not None and bookie.secret_reloader is not None
    calls = 0

    def broken() -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("a bug")

    monkeypatch.setattr(bookie.secret_reloader, "maybe_reload", broken)
    stopping = asyncio.Event()
    task = asyncio.create_task(bookie.run(stopping))
    async with asyncio.timeout(10):
        while calls < 3:
            await asyncio.sleep(0.01)
    assert not task.done()
    stopping.set()
    await task
    failures = [r for r in caplog.records if "token secret refresh failed" in r.getMessage()]
    assert len(failures) == 1


# -- the commands ------------------------------------------------------------------------------
def test_rotation_commands(tmp_path: Path) -> None:
    runner = CliRunner()
    path = str(tmp_path / "secret")

    def run(*args: str) -> str:
        result = runner.invoke(security, list(args))
        return f"{result.exit_code} {result.output}{result.exception or ''}"

    assert run("make-secret", path).startswith("0 ")
    (first,) = read_token_secret_file(path).secrets
    assert run("make-secret", "--add", path).startswith("0 new secret added")
    both = read_token_secret_file(path)
    assert both.secrets[0] == first and len(both) == 2 and os.stat(path).st_mode & 0o777 == 0o600
    third = run("make-secret", "--add", path)
    assert "holds 2 secrets already" in third and f"drop-old-secret {path}" in third
    assert read_token_secret_file(path) == both

    made = run("make-token", "--secret-file", path, "--subject", "s", "--ttl-s", "60")
    assert made.startswith("0 v1.")
    signed = made.split()[1].encode()
    assert verify_token(both.newest, signed, time.time()).subject == "s"
    with pytest.raises(AuthenticationError, match="bad token signature"):
        verify_token(first, signed, time.time())
    for secret in both.secrets:
        assert secret.decode() not in made

    assert run("drop-old-secret", path).startswith("0 old secret dropped")
    assert read_token_secret_file(path) == TokenSecrets(both.newest)
    assert "holds one secret only, none to drop" in run("drop-old-secret", path)
    assert not list(tmp_path.glob("*.new-*"))
