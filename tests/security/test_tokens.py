"""The token plugin and the security settings, without processes: what a token proves, every
way one is refused, and that secrets never show in ``repr`` or errors."""

from __future__ import annotations

import pytest

from bkeeper.common.auth import (
    AUTH_DISABLED_PLUGIN,
    TOKEN_PLUGIN,
    ClientAuthConfig,
    ServerAuthConfig,
    TokenClaims,
    TokenServerProvider,
    client_provider,
    make_token,
    peek_claims,
    server_provider,
    verify_token,
)
from bkeeper.common.errors import AuthenticationError, ConfigError
from bkeeper.common.tls import TlsClientConfig, TlsServerConfig

SECRET = b"0123456789abcdef0123456789abcdef-secret"
NOW = 1_800_000_000


def test_a_token_names_its_subject_and_expiry() -> None:
    token = make_token(SECRET, "alice", 60, now_s=NOW)
    claims = verify_token(SECRET, token.encode(), NOW + 59)
    assert (claims.subject, claims.expires_at_s) == ("alice", NOW + 60)


@pytest.mark.parametrize(
    ("token", "now", "reason"),
    [
        (make_token(SECRET, "alice", 60, now_s=NOW), NOW + 61, "token of 'alice' expired at "),
        (make_token(b"x" * 32, "alice", 60, now_s=NOW), NOW, "bad token signature"),
        ("v2" + make_token(SECRET, "a", 60, now_s=NOW)[2:], NOW, "token version 'v2'"),
        ("garbage", NOW, "malformed token"),
        ("v1.not-base64!.AAAA", NOW, "bad token signature"),  # checked before parsing
        ("a" * 5000, NOW, "token longer than 4096 bytes"),
    ],
)
def test_refused_tokens_say_why(token: str, now: int, reason: str) -> None:
    with pytest.raises(AuthenticationError, match=f"^{reason}") as caught:
        verify_token(SECRET, token.encode(), now)
    assert token not in str(caught.value)


def test_peek_claims_reads_without_the_secret() -> None:
    token = make_token(SECRET, "alice", 60, now_s=NOW)
    other = make_token(b"z" * 32, "bob", 5, now_s=NOW)  # another secret: still readable
    expired = make_token(SECRET, "carol", 1, now_s=NOW - 10**6)
    assert peek_claims(token) == peek_claims(token.encode()) == TokenClaims("alice", NOW + 60)
    assert peek_claims(other) == TokenClaims("bob", NOW + 5)
    assert peek_claims(expired) == TokenClaims("carol", NOW - 10**6 + 1)


@pytest.mark.parametrize(
    "token",
    [
        "",
        "garbage",
        "v1.a.b.c",
        "v2" + make_token(SECRET, "a", 60, now_s=NOW)[2:],
        "v1.not-base64!.AAAA",
        "v1." + make_token(SECRET, "a", 60, now_s=NOW).split(".")[1] + ".",  # no signature
        "v1.e30.AAAA",  # {} : no sub, no exp
        "v1.eyJzdWIiOiAiYSIsICJleHAiOiAiMSJ9.AAAA",  # exp a string
        "v1.eyJzdWIiOiAiYSIsICJleHAiOiB0cnVlfQ.AAAA",  # exp true
        "v1." + "a" * 5000 + ".AAAA",
        "v1.\u00e9.AAAA",
        b"v1.\xff.AAAA",
    ],
)
def test_peek_claims_of_a_malformed_token_is_none(token: str | bytes) -> None:
    assert peek_claims(token) is None


def test_claims_cannot_be_changed_without_the_secret() -> None:
    version, _claims, signature = make_token(SECRET, "alice", 60, now_s=NOW).split(".")
    other_claims = make_token(b"y" * 32, "admin", 10**6, now_s=NOW).split(".")[1]
    with pytest.raises(AuthenticationError, match="bad token signature"):
        verify_token(SECRET, f"{version}.{other_claims}.{signature}".encode(), NOW)


def test_clock_skew_and_allowed_subjects() -> None:
    provider = TokenServerProvider(
        ServerAuthConfig(TOKEN_PLUGIN, SECRET, frozenset({"alice"}), clock_skew_s=5),
        clock=lambda: NOW + 64,
    )
    ok = provider.new_session("peer").process(make_token(SECRET, "alice", 60, NOW).encode())
    assert ok.identity == "alice"
    with pytest.raises(AuthenticationError, match="subject 'bob' is not allowed"):
        provider.new_session("peer").process(make_token(SECRET, "bob", 60, NOW).encode())
    with pytest.raises(AuthenticationError, match="expired"):
        provider.new_session("peer").process(make_token(SECRET, "alice", 58, NOW).encode())


def test_secrets_and_tokens_are_not_in_repr() -> None:
    token = make_token(SECRET, "alice", 60)
    for shown in (
        repr(ServerAuthConfig(TOKEN_PLUGIN, SECRET)),
        repr(ClientAuthConfig(TOKEN_PLUGIN, token)),
        repr(client_provider(ClientAuthConfig(TOKEN_PLUGIN, token))),
    ):
        assert SECRET.decode() not in shown and token not in shown
        assert token.split(".")[-1] not in shown


def test_disabled_plugin_on_both_sides() -> None:
    assert server_provider(None) is None
    assert server_provider(ServerAuthConfig(AUTH_DISABLED_PLUGIN)) is None
    assert client_provider(ClientAuthConfig(AUTH_DISABLED_PLUGIN)) is None


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: ServerAuthConfig(TOKEN_PLUGIN, b"short"), "auth.token_secret: must be at least 32 bytes"),
        (lambda: ServerAuthConfig("SASL"), "auth.plugin: 'SASL' is not one of"),
        (lambda: ClientAuthConfig(TOKEN_PLUGIN, ""), "client_auth.token: the token plugin needs a token"),
        (lambda: make_token(SECRET, "", 60), "subject: must be a non-empty printable string"),
        (lambda: make_token(SECRET, "a", 0), "ttl_s: must be a positive integer, got 0"),
        (lambda: TlsServerConfig("", "k"), "tls.cert_file: a PEM certificate chain is required"),
        (lambda: TlsServerConfig("c", "k", client_auth=True), "tls.ca_file: client_auth"),
        (lambda: TlsClientConfig(key_file="k"), "client_tls.cert_file: key_file is set"),
        (lambda: TlsServerConfig("/nope.pem", "/nope.key").context(),
         r"tls.cert_file/key_file: cannot load '/nope.pem' / '/nope.key': No such file"),
        (lambda: TlsClientConfig(ca_file="/nope.pem").context(),
         r"client_tls.ca_file: cannot load '/nope.pem': No such file"),
    ],
)  # fmt: skip
def test_settings_refused_name_the_field(make: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        make()  # type: ignore[operator]
