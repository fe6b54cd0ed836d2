"""What a refused client is told (``bkeeper.client.refusal``): one line naming what the
bookie requires and the option (variable) that gives it, per case; and the client's checks
before connecting (``bkeeper.client.handshake.check_credentials``)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bkeeper.client.config import ClientConfig
from bkeeper.client.handshake import check_credentials, client_security
from bkeeper.client.refusal import (
    ClientOffer,
    auth_disabled,
    auth_refused,
    auth_refused_unknown,
    eua_answered,
    eua_unadmitted,
    expired_token,
    status_error,
    unmet_requirements,
)
from bkeeper.common.auth import (
    TOKEN_PLUGIN,
    ClientAuthConfig,
    TokenClaims,
    make_token,
    read_token_file,
)
from bkeeper.common.errors import AuthenticationError, NoSuchEntryError, UnauthorizedAccessError
from bkeeper.common.tls import TlsClientConfig
from bkeeper.meta.bookie_info import Endpoint
from bkeeper.wire.codes import StatusCode

ADDRESS = "10.0.0.1:3181"
SECURE = Endpoint(
    "bookie", "10.0.0.1", 3181, "bookie-rpc", (TOKEN_PLUGIN,), ("tls", "tls-required")
)
CLAIMS = TokenClaims("writer", 1_700_000_000)
TOKEN = ClientOffer(auth_plugin=TOKEN_PLUGIN, token=CLAIMS, token_source="/etc/bk/client.token")
TLS_AND_TOKEN = dataclasses.replace(TOKEN, tls=True)


def test_no_tls_no_token_names_both_and_their_options() -> None:
    message = unmet_requirements(ADDRESS, SECURE, ClientOffer())
    assert message == (
        "bookie 10.0.0.1:3181 requires TLS and a token (authentication BKeeperToken): give them "
        "with --client-tls-ca (BKEEPER_TLS_CA) and --auth-token-file (BKEEPER_AUTH_TOKEN_FILE) "
        "(docs/security.md)"
    )


def test_tls_without_a_token_names_the_token() -> None:
    message = unmet_requirements(ADDRESS, SECURE, ClientOffer(tls=True))
    assert message == (
        "bookie 10.0.0.1:3181 requires a token (authentication BKeeperToken): give one with "
        "--auth-token-file (BKEEPER_AUTH_TOKEN_FILE) (docs/security.md)"
    )


def test_a_token_without_tls_names_tls() -> None:
    message = unmet_requirements(ADDRESS, SECURE, TOKEN)
    assert message == (
        "bookie 10.0.0.1:3181 requires TLS: give it with --client-tls-ca (BKEEPER_TLS_CA) "
        "(docs/security.md)"
    )


def test_mutual_tls_without_a_certificate_names_the_certificate() -> None:
    mutual = dataclasses.replace(SECURE, extensions=("tls", "tls-client-cert"))
    message = unmet_requirements(ADDRESS, mutual, TLS_AND_TOKEN)
    assert message is not None and "requires a client certificate (mutual TLS)" in message
    assert "--client-tls-cert and --client-tls-key" in message
    assert (
        unmet_requirements(ADDRESS, mutual, dataclasses.replace(TLS_AND_TOKEN, client_cert=True))
        is None
    )


def test_nothing_missing_or_nothing_known_says_nothing() -> None:
    assert unmet_requirements(ADDRESS, SECURE, TLS_AND_TOKEN) is None
    assert unmet_requirements(ADDRESS, None, ClientOffer()) is None  # no registration
    offered = Endpoint("bookie", "h", 1, "bookie-rpc", (), ("tls",))  # TLS offered, not required
    assert unmet_requirements(ADDRESS, offered, ClientOffer()) is None


def test_another_plugin_is_named() -> None:
    other = dataclasses.replace(SECURE, auth=("SASL",))
    message = unmet_requirements(ADDRESS, other, TLS_AND_TOKEN)
    assert message is not None and "requires authentication SASL" in message
    assert "this client speaks BKeeperToken" in message


def test_an_expired_token_names_its_file_subject_and_time() -> None:
    assert expired_token(TOKEN, CLAIMS.expires_at_s) is None
    assert expired_token(TOKEN, CLAIMS.expires_at_s + 1) == (
        "the token in /etc/bk/client.token (subject writer) expired at 2023-11-14 22:13:20 UTC: "
        "make a new one with `bkeeper security make-token` (docs/security.md)"
    )
    assert expired_token(ClientOffer(tls=True), 2e9) is None  # no token


def test_a_refused_token_says_what_the_bookie_may_have_disliked() -> None:
    refused = (
        "bookie 10.0.0.1:3181 refused the token in /etc/bk/client.token (subject writer): signed "
        "with another secret, or the subject is not admitted (the bookie's log says which)"
    )
    assert auth_refused(ADDRESS, TLS_AND_TOKEN, tls_on=True, plugin_answered=True) == refused
    assert auth_refused(ADDRESS, TOKEN, tls_on=False, plugin_answered=True) == refused
    assert auth_refused_unknown(ADDRESS, TLS_AND_TOKEN, tls_on=True) == refused


def test_auth_in_the_clear_on_a_tls_only_bookie_names_tls() -> None:
    assert auth_refused(ADDRESS, TOKEN, tls_on=False, plugin_answered=False) == (
        "bookie 10.0.0.1:3181 requires TLS before it takes a token: give it with "
        "--client-tls-ca (BKEEPER_TLS_CA) (docs/security.md)"
    )
    both = auth_refused_unknown(ADDRESS, TOKEN, tls_on=False)  # v2: closed, cause unknown
    assert "refused the token" in both and "requires TLS first (--client-tls-ca" in both


def test_an_eua_answer_names_both_causes() -> None:
    message = eua_answered("ledger 7 entry 0 on 10.0.0.1:3181")
    assert message.startswith("ledger 7 entry 0 on 10.0.0.1:3181: refused (EUA): ")
    for part in ("password is wrong", "--client-tls-ca (BKEEPER_TLS_CA)", "--auth-token-file"):
        assert part in message


def test_check_credentials_refuses_an_expired_token_before_connecting() -> None:
    token = make_token(b"s" * 32, "writer", 60, now_s=1_700_000_000)
    security = client_security(ClientConfig(tls=None, auth=ClientAuthConfig(token=token)))
    assert security is not None and security.offer.token == TokenClaims("writer", 1_700_000_060)
    with pytest.raises(AuthenticationError, match=r"^the token \(subject writer\) expired at"):
        check_credentials(ADDRESS, None, security)
    fresh = dataclasses.replace(security, clock=lambda: 1_700_000_000.0)
    check_credentials(ADDRESS, None, fresh)  # in time, and nothing known required
    with pytest.raises(AuthenticationError, match="requires TLS: give it with --client-tls-ca"):
        check_credentials(ADDRESS, SECURE, fresh)


def test_check_credentials_of_a_client_without_security() -> None:
    with pytest.raises(UnauthorizedAccessError, match="requires TLS and a token"):
        check_credentials(ADDRESS, SECURE, None)
    check_credentials(ADDRESS, None, None)


def test_client_security_knows_what_it_offers() -> None:
    tls = TlsClientConfig()  # the system's CAs: no file to load
    security = client_security(ClientConfig(tls=tls, auth=None))
    assert security is not None
    assert security.offer == ClientOffer(tls=True)


def test_a_read_answered_eua_names_both_causes_other_statuses_their_name() -> None:
    refused = status_error(StatusCode.EUA, "ledger 7 entry 0 on 10.0.0.1:3181")
    assert type(refused) is UnauthorizedAccessError
    assert str(refused) == eua_answered("ledger 7 entry 0 on 10.0.0.1:3181")
    missing = status_error(StatusCode.ENOENTRY, "ledger 7 entry 0 on 10.0.0.1:3181")
    assert isinstance(missing, NoSuchEntryError)
    assert str(missing) == (
        "ledger 7 entry 0 on 10.0.0.1:3181: ENOENTRY (the bookie has no such entry)"
    )


def test_a_bookie_with_authentication_off_and_v2_s_ambiguity() -> None:
    off = auth_disabled(ADDRESS, TOKEN_PLUGIN, maybe_tls=False)
    assert off == (
        "bookie 10.0.0.1:3181 has authentication off (AuthDisabledPlugin); this client uses "
        "'BKeeperToken' (configure the client without auth for it)"
    )
    assert auth_disabled(ADDRESS, TOKEN_PLUGIN, maybe_tls=True) == (
        f"{off}; or it requires TLS before it takes a token: give it with --client-tls-ca "
        "(BKEEPER_TLS_CA) (docs/security.md)"
    )


def test_a_subject_is_shown_on_one_line_and_short() -> None:
    odd = ClientOffer(token=TokenClaims("a\nb", 0))
    assert odd.token_named == "the token (subject 'a\\nb')"
    long = ClientOffer(token=TokenClaims("x" * 100, 0))
    assert long.token_named == f"the token (subject {'x' * 64}...)"


def test_an_eua_to_a_request_without_a_password_names_the_credentials_only() -> None:
    message = eua_unadmitted("bookie 10.0.0.1:3181")
    assert message == (
        "bookie 10.0.0.1:3181: refused (EUA): the bookie requires what this client lacks (TLS: "
        "--client-tls-ca (BKEEPER_TLS_CA); a token: --auth-token-file (BKEEPER_AUTH_TOKEN_FILE); "
        "docs/security.md)"
    )


def test_a_token_read_from_its_file_is_named_by_the_file(tmp_path: Path) -> None:
    """``--auth-token-file`` / ``BKEEPER_AUTH_TOKEN_FILE`` / Spark's ``auth.tokenFile`` read the
    token with :func:`read_token_file`, which keeps where it came from for the message."""
    path = tmp_path / "writer.token"
    path.write_text(make_token(b"s" * 32, "writer", 60, now_s=1_700_000_000) + "\n")
    path.chmod(0o600)
    security = client_security(ClientConfig(auth=read_token_file(str(path), "--auth-token-file")))
    assert security is not None
    with pytest.raises(AuthenticationError, match=rf"^the token in {path} \(subject writer\)"):
        check_credentials(ADDRESS, None, security)
