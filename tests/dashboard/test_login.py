"""The dashboard's login gate, pure: the token check, sessions (bounded, expiring, ended at
logout or the token's expiry) and the limit on refused attempts per address."""

from __future__ import annotations

from bkeeper.common.auth import make_token
from bkeeper.dashboard.login import (
    LOGIN_FAILURE_WINDOW_S,
    LOGIN_FAILURES_MAX,
    SESSION_TTL_S,
    LoginGate,
    LoginOutcome,
)
from bkeeper.testing.clock import FakeClock

SECRET = b"k" * 40
TOKEN = "not-a-signed-token-but-the-dashboards-own"


def test_only_the_dashboards_token_opens_a_session() -> None:
    gate = LoginGate(TOKEN, FakeClock())
    refused = gate.login("10.0.0.1", TOKEN + "x")
    assert (refused.outcome, refused.session_id) == (LoginOutcome.REFUSED, None)
    assert gate.login("10.0.0.1", "").outcome is LoginOutcome.REFUSED
    assert gate.login("10.0.0.1", "é").outcome is LoginOutcome.REFUSED  # not ASCII: no crash
    ok = gate.login("10.0.0.1", TOKEN)
    assert ok.outcome is LoginOutcome.OK and ok.session_id is not None
    assert len(ok.session_id) >= 40 and TOKEN not in ok.session_id
    assert ok.lifetime_s == SESSION_TTL_S
    assert gate.session_valid(ok.session_id)
    assert not gate.session_valid(ok.session_id + "x")
    assert not gate.session_valid(None) and not gate.session_valid("")
    assert gate.login("10.0.0.2", TOKEN).session_id != ok.session_id


def test_sessions_end_at_logout_after_their_time_and_at_the_tokens_expiry() -> None:
    clock = FakeClock()
    gate = LoginGate(TOKEN, clock)
    first = gate.login("a", TOKEN).session_id
    gate.logout(first)
    assert not gate.session_valid(first)
    second = gate.login("a", TOKEN).session_id
    clock.advance(SESSION_TTL_S - 1)
    assert gate.session_valid(second)
    clock.advance(1)
    assert not gate.session_valid(second)

    # A token that expires in an hour: sessions last until then, not 12 h.
    now_s = clock.wall_ms() / 1000
    token = make_token(SECRET, "dash", 3600, now_s=now_s)
    gate = LoginGate(token, clock)
    result = gate.login("a", token)
    assert result.outcome is LoginOutcome.OK and result.lifetime_s == 3600
    clock.advance(3600)
    assert not gate.session_valid(result.session_id)
    assert gate.login("a", token).outcome is LoginOutcome.TOKEN_EXPIRED


def test_sessions_are_bounded_the_oldest_ending_first() -> None:
    gate = LoginGate(TOKEN, FakeClock(), sessions_max=3)
    ids = [gate.login("a", TOKEN).session_id for _ in range(4)]
    assert gate.sessions == 3
    assert [gate.session_valid(i) for i in ids] == [False, True, True, True]


def test_refused_attempts_are_limited_per_address_for_a_window() -> None:
    clock = FakeClock()
    gate = LoginGate(TOKEN, clock)
    for _ in range(LOGIN_FAILURES_MAX):
        assert gate.login("10.0.0.9", "wrong").outcome is LoginOutcome.REFUSED
    limited = gate.login("10.0.0.9", TOKEN)  # not even compared now
    assert limited.outcome is LoginOutcome.LIMITED and limited.session_id is None
    assert 0 < limited.retry_after_s <= LOGIN_FAILURE_WINDOW_S
    assert gate.check("10.0.0.9", TOKEN) is LoginOutcome.LIMITED  # bearer tokens too
    assert gate.login("10.0.0.10", TOKEN).outcome is LoginOutcome.OK  # another address
    clock.advance(LOGIN_FAILURE_WINDOW_S)
    assert gate.login("10.0.0.9", TOKEN).outcome is LoginOutcome.OK


def test_addresses_remembered_are_bounded() -> None:
    gate = LoginGate(TOKEN, FakeClock(), failures_max=1, addresses_max=2)
    for address in ("a", "b", "c"):
        gate.login(address, "wrong")
    assert gate.retry_after_s("a") == 0  # forgotten, the oldest
    assert gate.retry_after_s("b") > 0 and gate.retry_after_s("c") > 0
