"""Who may see the dashboard of a secured cluster: the token check, sessions, and the limit
on refused logins. Pure (a :class:`Clock` is passed in); :mod:`bkeeper.dashboard.app` puts
it in front of the page and the API.

The token a browser must present is the dashboard's own (the file of ``--auth-token-file``,
the token it uses as a client of the bookies). The dashboard holds no token secret, so it
cannot check the signature of another token; comparing with its own token, in constant time
(:func:`hmac.compare_digest`), admits exactly the holders of that token, who could read the
cluster with it anyway.

Invariants:

- a session id is 32 random bytes (:func:`secrets.token_urlsafe`), known only to the browser
  that logged in (an HttpOnly cookie) and to this table;
- at most ``sessions_max`` sessions: a new one past that ends the oldest;
- a session ends ``session_ttl_s`` after the login, or when the dashboard's token expires
  (its claims, read unverified: it is our own token), whichever comes first, or at logout;
- a client address gets at most ``failures_max`` refused attempts per ``failure_window_s``;
  past that every attempt from it is answered "too many" without being compared, until the
  oldest refusal leaves the window. At most ``addresses_max`` addresses are remembered (the
  oldest forgotten first).
"""

from __future__ import annotations

import enum
import hmac
import secrets
from collections import OrderedDict, deque
from dataclasses import dataclass

from bkeeper.common.auth import peek_claims
from bkeeper.common.clock import Clock

__all__ = [
    "ADDRESSES_TRACKED_MAX",
    "LOGIN_FAILURES_MAX",
    "LOGIN_FAILURE_WINDOW_S",
    "SESSIONS_MAX",
    "SESSION_TTL_S",
    "LoginGate",
    "LoginOutcome",
    "LoginResult",
]

#: Sessions open at once (one per browser that logged in).
SESSIONS_MAX = 256
#: A session lasts this long at most.
SESSION_TTL_S = 12 * 3600
#: Refused logins (wrong token) per client address within LOGIN_FAILURE_WINDOW_S.
LOGIN_FAILURES_MAX = 5
LOGIN_FAILURE_WINDOW_S = 60.0
#: Client addresses whose refused logins are counted.
ADDRESSES_TRACKED_MAX = 1024


class LoginOutcome(enum.Enum):
    OK = "ok"
    REFUSED = "refused"  # wrong token
    LIMITED = "limited"  # too many refused attempts from this address: not compared
    TOKEN_EXPIRED = "token expired"  # the dashboard's own token has expired


@dataclass(frozen=True)
class LoginResult:
    outcome: LoginOutcome
    session_id: str | None = None  # OK: the cookie's value
    lifetime_s: int = 0  # OK: how long the session lasts
    retry_after_s: int = 0  # LIMITED: when the next attempt is compared


class LoginGate:
    """The table of sessions and refused attempts (module doc)."""

    def __init__(
        self,
        token: str,
        clock: Clock,
        *,
        sessions_max: int = SESSIONS_MAX,
        session_ttl_s: int = SESSION_TTL_S,
        failures_max: int = LOGIN_FAILURES_MAX,
        failure_window_s: float = LOGIN_FAILURE_WINDOW_S,
        addresses_max: int = ADDRESSES_TRACKED_MAX,
    ) -> None:
        self._token = token.encode("utf-8")
        claims = peek_claims(token)
        self._token_expires_ms = None if claims is None else claims.expires_at_s * 1000
        self._clock = clock
        self._sessions_max = sessions_max
        self._session_ttl_s = session_ttl_s
        self._failures_max = failures_max
        self._failure_window_s = failure_window_s
        self._addresses_max = addresses_max
        self._sessions: OrderedDict[str, float] = OrderedDict()  # id -> monotonic deadline
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()  # address -> times

    def token_matches(self, presented: str) -> bool:
        """Whether ``presented`` is the dashboard's token (constant time)."""
        return hmac.compare_digest(presented.encode("utf-8", "replace"), self._token)

    def retry_after_s(self, address: str) -> int:
        """0 when an attempt from ``address`` may be compared, else seconds to wait."""
        times = self._failures.get(address)
        if times is None:
            return 0
        now = self._clock.monotonic()
        while times and times[0] <= now - self._failure_window_s:
            times.popleft()
        if len(times) < self._failures_max:
            return 0
        return max(1, int(times[0] + self._failure_window_s - now + 0.999))

    def check(self, address: str, presented: str) -> LoginOutcome:
        """Compare a token from ``address`` (a login or a bearer), counting a refusal."""
        if self.retry_after_s(address):
            return LoginOutcome.LIMITED
        if not self.token_matches(presented):
            self._refused(address)
            return LoginOutcome.REFUSED
        if self._lifetime_s() <= 0:
            return LoginOutcome.TOKEN_EXPIRED
        return LoginOutcome.OK

    def login(self, address: str, presented: str) -> LoginResult:
        """A new session for the right token; otherwise why not."""
        outcome = self.check(address, presented)
        if outcome is LoginOutcome.LIMITED:
            return LoginResult(outcome, retry_after_s=self.retry_after_s(address))
        if outcome is not LoginOutcome.OK:
            return LoginResult(outcome)
        lifetime_s = self._lifetime_s()
        self._drop_expired()
        while len(self._sessions) >= self._sessions_max:
            self._sessions.popitem(last=False)
        session_id = secrets.token_urlsafe(32)
        self._sessions[session_id] = self._clock.monotonic() + lifetime_s
        return LoginResult(LoginOutcome.OK, session_id, lifetime_s)

    def session_valid(self, session_id: str | None) -> bool:
        if not session_id:
            return False
        deadline = self._sessions.get(session_id)
        if deadline is None:
            return False
        if self._clock.monotonic() >= deadline:
            del self._sessions[session_id]
            return False
        return True

    def logout(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(session_id, None)

    @property
    def sessions(self) -> int:
        return len(self._sessions)

    def _lifetime_s(self) -> int:
        if self._token_expires_ms is None:
            return self._session_ttl_s
        left_s = (self._token_expires_ms - self._clock.wall_ms()) // 1000
        return int(min(self._session_ttl_s, left_s))

    def _drop_expired(self) -> None:
        now = self._clock.monotonic()
        for session_id in [s for s, deadline in self._sessions.items() if deadline <= now]:
            del self._sessions[session_id]

    def _refused(self, address: str) -> None:
        times = self._failures.pop(address, None) or deque(maxlen=self._failures_max)
        times.append(self._clock.monotonic())
        self._failures[address] = times  # the most recent last
        while len(self._failures) > self._addresses_max:
            self._failures.popitem(last=False)
