"""HTTPS for the bookie's admin HTTP server (:mod:`bkeeper.server.admin_http`): TLS run on
memory BIOs per connection, then aiohttp's protocol on a transport that encrypts.

A connection counts against the server's ``connections_max`` until its handshake ends (it is
in the server's ``handshakes`` set); the handshake must end within its timeout; a failed one
is one rate-limited line (peer and reason), and the connection is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Iterable
from typing import cast

from bkeeper.common.tls import describe_tls_error
from bkeeper.server.ratelimit import RateLimitedLog

__all__ = ["TLS_READ_BYTES", "TlsConnection", "TlsTransport"]


class TlsConnection(asyncio.Protocol):
    """An HTTPS connection: TLS run here on memory BIOs (as asyncio's own SSL transport does:
    the same on uvloop and asyncio's loop, no bytes lost between accept and handshake), then
    aiohttp's protocol on :class:`TlsTransport`. The handshake must end within
    ``tls_handshake_timeout_ms``; a failed one (plain HTTP sent to the port, a client
    certificate refused, ...) is one rate-limited line (peer and reason), and the connection is
    closed. Until its handshake ends the connection counts against ``connections_max``."""

    def __init__(
        self,
        context: ssl.SSLContext,
        handshake_timeout_ms: int,
        handshakes: set[TlsConnection],
        web_protocol: Callable[[], asyncio.Protocol | None],
        refused: RateLimitedLog,
    ) -> None:
        """``handshakes``: the server's connections still handshaking (this one joins it
        until its handshake ends); ``web_protocol``: the HTTP protocol of a connection (None:
        the server is closing); ``refused``: where failed handshakes are told."""
        self._context = context
        self._handshake_timeout_ms = handshake_timeout_ms
        self._handshakes = handshakes
        self._web_protocol = web_protocol
        self._refused = refused
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self.ssl_object = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self.raw: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._inner: asyncio.Protocol | None = None
        self._received = 0
        self._failed = False
        self._peer = "?"

    # -- the TCP connection's events ---------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.raw = cast(asyncio.Transport, transport)
        self._handshakes.add(self)
        timeout_ms = self._handshake_timeout_ms
        self._timer = asyncio.get_running_loop().call_later(
            timeout_ms / 1000, self._fail, f"no TLS handshake within {timeout_ms} ms"
        )

    def data_received(self, data: bytes) -> None:
        if self._failed:
            return
        self._received += len(data)
        self._incoming.write(data)
        if self._inner is None and not self._handshake():
            return
        self._decrypt()

    def eof_received(self) -> bool | None:
        if self._inner is None:
            return None  # close
        return self._inner.eof_received()

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._done_handshaking()
        if self._inner is not None:
            self._inner.connection_lost(exc)
        elif self._received and not self._failed:
            self.log("closed during the TLS handshake")

    # -- TLS -------------------------------------------------------------------------------
    def _handshake(self) -> bool:
        """Go on with the handshake; whether it is done (aiohttp's protocol then attached)."""
        try:
            self.ssl_object.do_handshake()
        except ssl.SSLWantReadError:
            self.flush()
            return False
        except (ssl.SSLError, OSError) as exc:
            self.flush()  # the alert, if any
            reason = describe_tls_error(exc)
            if "http request" in reason:
                reason += " (plain HTTP sent to the HTTPS admin port: use https://)"
            self._fail(reason)
            return False
        self.flush()
        self._done_handshaking()
        inner = self._inner = self._web_protocol()
        if inner is None:  # closing
            self.abort()
            return False
        transport = TlsTransport(self)
        transport.set_protocol(inner)
        inner.connection_made(transport)
        return True

    def _decrypt(self) -> None:
        inner = self._inner
        while inner is not None and self.raw is not None and not self.raw.is_closing():
            try:
                chunk = self.ssl_object.read(TLS_READ_BYTES)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:  # the client's close_notify
                if not inner.eof_received():
                    self.raw.close()
                break
            except (ssl.SSLError, OSError) as exc:
                self._failed = True
                self.log(f"broke TLS: {describe_tls_error(exc)}")
                self.abort()
                break
            if not chunk:
                break
            inner.data_received(chunk)
        self.flush()

    def flush(self) -> None:
        """Send what TLS has written."""
        data = self._outgoing.read()
        if data and self.raw is not None and not self.raw.is_closing():
            self.raw.write(data)

    def _fail(self, reason: str) -> None:
        self._failed = True
        self.log(f"failed the TLS handshake: {reason}")
        self._done_handshaking()
        if self.raw is not None:
            self.raw.close()

    def log(self, what: str) -> None:
        self._refused.info("admin https: a connection from %s %s", self._peer, what)

    def _done_handshaking(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._handshakes.discard(self)

    def abort(self) -> None:
        self._done_handshaking()
        if self.raw is not None:
            self.raw.abort()


#: Plaintext read from TLS at once, at most.
TLS_READ_BYTES = 64 * 1024


class TlsTransport(asyncio.Transport):
    """What aiohttp's protocol writes to and reads about: a :class:`TlsConnection`."""

    def __init__(self, conn: TlsConnection) -> None:
        super().__init__()
        self._conn = conn
        assert conn.raw is not None
        self._raw = conn.raw
        self._closing = False
        self._protocol: asyncio.BaseProtocol | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.is_closing():
            return
        view = memoryview(data)
        try:
            while view:
                written = self._conn.ssl_object.write(view)
                view = view[written:]
        except (ssl.SSLError, OSError) as exc:  # TLS closed or broken under the answer
            self._conn.log(f"broke TLS: {describe_tls_error(exc)}")
            self.abort()
            return
        self._conn.flush()

    def writelines(self, list_of_data: Iterable[bytes | bytearray | memoryview]) -> None:
        for data in list_of_data:
            self.write(data)

    def close(self) -> None:
        if self._closing:
            return
        self._closing = True
        if not self._raw.is_closing():
            # close_notify; the client's is not awaited
            with contextlib.suppress(ssl.SSLError, OSError):
                self._conn.ssl_object.unwrap()
            self._conn.flush()
        self._raw.close()

    def abort(self) -> None:
        self._closing = True
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._closing or self._raw.is_closing()

    def get_extra_info(self, name: str, default: object = None) -> object:
        ssl_object = self._conn.ssl_object
        if name == "ssl_object":
            return ssl_object
        if name == "sslcontext":
            return ssl_object.context
        if name == "peercert":
            return ssl_object.getpeercert()
        if name == "cipher":
            return ssl_object.cipher()
        if name == "compression":
            return ssl_object.compression()
        return self._raw.get_extra_info(name, default)

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def can_write_eof(self) -> bool:
        return False

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        assert self._protocol is not None
        return self._protocol
