"""What a client refused by a bookie is told: one line naming what the bookie requires and
the option (and environment variable) that supplies it, not a bare status code
(docs/security.md, "What a refused client is told").

Pure: each message is built from what the client has (:class:`ClientOffer`), what the
bookie's registration says it requires (its ``bookie-rpc`` :class:`Endpoint`, or None when
it published nothing: Java BookKeeper, an older bkeeper) and what happened. Where the client
cannot know which of two causes it met, the message names both.

When they are used (never on the add or read path of an admitted connection):

- before connecting: :func:`expired_token` (the token's claims are readable without the
  secret) and :func:`unmet_requirements` (the registration says the bookie requires what the
  client lacks; connecting would only earn EUA);
- during the handshake: :func:`auth_refused` (the bookie answered AUTH with EUA),
  :func:`auth_refused_unknown` (it closed the connection), :func:`auth_disabled` (it has
  authentication off, or, over v2, it may be a TLS-only bookie refusing AUTH in the clear);
- on an EUA answer to a request: :func:`eua_answered` (a wrong ledger password, or a bookie
  whose requirements were not published), through :func:`status_error` on the read paths.

A token's subject is read from the client's own token without checking it: it is shown
printable and cut to :data:`SUBJECT_SHOWN_MAX` characters, so that the message stays one line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from bkeeper.common.auth import TokenClaims
from bkeeper.common.errors import BKeeperError, UnauthorizedAccessError
from bkeeper.meta.bookie_info import Endpoint
from bkeeper.wire.codes import StatusCode, error_for_status

__all__ = [
    "CERT_OPTION",
    "DOCS",
    "MAKE_TOKEN",
    "SUBJECT_SHOWN_MAX",
    "TLS_OPTION",
    "TOKEN_OPTION",
    "ClientOffer",
    "auth_disabled",
    "auth_refused",
    "auth_refused_unknown",
    "eua_answered",
    "eua_unadmitted",
    "expired_token",
    "status_error",
    "unmet_requirements",
    "utc_stamp",
]

#: The options (and variables) that give a client what a bookie may require.
TLS_OPTION = "--client-tls-ca (BKEEPER_TLS_CA)"
CERT_OPTION = "--client-tls-cert and --client-tls-key (BKEEPER_TLS_CERT, BKEEPER_TLS_KEY)"
TOKEN_OPTION = "--auth-token-file (BKEEPER_AUTH_TOKEN_FILE)"
MAKE_TOKEN = "`bkeeper security make-token`"
DOCS = "docs/security.md"
#: Characters of a token's subject a message shows.
SUBJECT_SHOWN_MAX = 64


@dataclass(frozen=True)
class ClientOffer:
    """What a client brings to a bookie: TLS (and a client certificate), the auth plugin it
    speaks (None: no AUTH sent), its token's claims (None: no token, or not a readable one)
    and where the token came from (a file name, for messages; "" when not known)."""

    tls: bool = False
    client_cert: bool = False
    auth_plugin: str | None = None
    token: TokenClaims | None = None
    token_source: str = ""

    @property
    def token_named(self) -> str:
        """The token as messages name it: "the token in FILE (subject S)", as much as known."""
        where = f" in {self.token_source}" if self.token_source else ""
        subject = "" if self.token is None else f" (subject {_shown(self.token.subject)})"
        return f"the token{where}{subject}"


def _shown(subject: str) -> str:
    text = subject if subject.isprintable() else repr(subject)
    if len(text) > SUBJECT_SHOWN_MAX:
        return text[:SUBJECT_SHOWN_MAX] + "..."
    return text


def utc_stamp(unix_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(unix_s))


def expired_token(offer: ClientOffer, now_s: float) -> str | None:
    """The message when the client's token has expired by ``now_s``, else None."""
    claims = offer.token
    if claims is None or now_s <= claims.expires_at_s:
        return None
    return (
        f"{offer.token_named} expired at {utc_stamp(claims.expires_at_s)}: "
        f"make a new one with {MAKE_TOKEN} ({DOCS})"
    )


def unmet_requirements(address: str, endpoint: Endpoint | None, offer: ClientOffer) -> str | None:
    """What the bookie at ``address`` requires (its registered ``endpoint``) that the client
    lacks, as one message; None when nothing is known to be missing."""
    if endpoint is None:
        return None
    needs: list[str] = []
    gives: list[str] = []
    if endpoint.requires_tls and not offer.tls:
        needs.append("TLS")
        gives.append(TLS_OPTION)
    if endpoint.requires_client_cert and offer.tls and not offer.client_cert:
        needs.append("a client certificate (mutual TLS)")
        gives.append(CERT_OPTION)
    plugins = endpoint.auth_plugins
    if plugins and offer.auth_plugin is None:
        needs.append(f"a token (authentication {', '.join(plugins)})")
        gives.append(TOKEN_OPTION)
    elif plugins and offer.auth_plugin not in plugins:
        return (
            f"bookie {address} requires authentication {', '.join(plugins)}, this client "
            f"speaks {offer.auth_plugin} ({DOCS})"
        )
    if not needs:
        return None
    one = "them" if len(needs) > 1 else "it" if needs == ["TLS"] else "one"
    return (
        f"bookie {address} requires {' and '.join(needs)}: give {one} with "
        f"{' and '.join(gives)} ({DOCS})"
    )


def _token_refused(address: str, offer: ClientOffer) -> str:
    return (
        f"bookie {address} refused {offer.token_named}: signed with another secret, or the "
        "subject is not admitted (the bookie's log says which)"
    )


def auth_refused(address: str, offer: ClientOffer, *, tls_on: bool, plugin_answered: bool) -> str:
    """The bookie at ``address`` answered the client's AUTH with EUA: naming its plugin
    (``plugin_answered``: its plugin read the token and refused it), or naming none (a TLS-only
    bookie takes no credentials in the clear)."""
    if plugin_answered or tls_on:
        return _token_refused(address, offer)
    return (
        f"bookie {address} requires TLS before it takes a token: give it with {TLS_OPTION} ({DOCS})"
    )


def auth_refused_unknown(address: str, offer: ClientOffer, *, tls_on: bool) -> str:
    """The bookie at ``address`` closed the connection during the AUTH exchange (a v2 AUTH
    answer carries no status, so a bookie refusing it closes): over TLS, the token was
    refused; in the clear, that or a TLS-only bookie that takes no token in the clear."""
    if tls_on:
        return _token_refused(address, offer)
    return (
        f"bookie {address} closed the connection at authentication: it refused "
        f"{offer.token_named} (signed with another secret, or the subject is not admitted: "
        f"the bookie's log says which), or it requires TLS first ({TLS_OPTION}; {DOCS})"
    )


def auth_disabled(address: str, plugin: str, *, maybe_tls: bool) -> str:
    """The bookie at ``address`` answered the client's AUTH (plugin ``plugin``) naming the
    disabled plugin: authentication is off there. Over v2 in the clear (``maybe_tls``) a
    TLS-only bookie refusing AUTH unread answers the same (a v2 answer has no status)."""
    off = (
        f"bookie {address} has authentication off (AuthDisabledPlugin); this client uses "
        f"{plugin!r} (configure the client without auth for it)"
    )
    if not maybe_tls:
        return off
    return f"{off}; or it requires TLS before it takes a token: give it with {TLS_OPTION} ({DOCS})"


def eua_answered(context: str) -> str:
    """``context`` (the ledger, entry and bookie) was answered EUA by a bookie the client
    connected to: the ledger's password is wrong, or the bookie requires credentials its
    registration did not say (a bkeeper bookie's does: the client would have said so)."""
    return (
        f"{context}: refused (EUA): the ledger's password is wrong, or the bookie requires "
        f"what this client lacks (TLS: {TLS_OPTION}; a token: {TOKEN_OPTION}; {DOCS})"
    )


def eua_unadmitted(context: str) -> str:
    """``context`` (a request no password goes with) was answered EUA: the bookie requires
    credentials this client lacks and its registration did not say which."""
    return (
        f"{context}: refused (EUA): the bookie requires what this client lacks (TLS: "
        f"{TLS_OPTION}; a token: {TOKEN_OPTION}; {DOCS})"
    )


def status_error(status: StatusCode, context: str) -> BKeeperError:
    """The error of a read's non-OK answer ``status`` to the request ``context`` names: EUA
    as :func:`eua_answered` says it, any other as its class and name."""
    if status is StatusCode.EUA:
        return UnauthorizedAccessError(eua_answered(context))
    return error_for_status(status, context)
