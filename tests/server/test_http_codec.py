"""The admin server's HTTP codec, sans-IO: bytes in, requests out, within its limits."""

from __future__ import annotations

import pytest

from bkeeper.common.errors import AdminRequestError
from bkeeper.server.http_codec import (
    HttpRequest,
    HttpResponse,
    RequestReader,
    encode_response,
    error_response,
)

RAW = b"PUT /api/v1/bookie/gc?a=1&b=%2F HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\n{  }"


def reader(**limits: int) -> RequestReader:
    values = {"head_bytes_max": 1024, "body_bytes_max": 64, "headers_max": 8, **limits}
    return RequestReader(**values)


def test_whole_request_at_once_and_a_byte_at_a_time_are_the_same() -> None:
    whole = reader()
    whole.receive_data(RAW)
    expected = whole.next_request()
    assert expected == HttpRequest(
        "PUT", "/api/v1/bookie/gc", {"a": "1", "b": "/"}, {"host": "x", "content-length": "4"},
        b"{  }",
    )  # fmt: skip
    assert expected is not None and expected.json_object() == {}
    slow = reader()
    requests = []
    for byte in RAW:
        slow.receive_data(bytes([byte]))
        request = slow.next_request()
        if request is not None:
            requests.append(request)
    assert requests == [expected] and slow.buffered_bytes == 0


def test_two_requests_in_one_chunk_come_out_one_after_the_other() -> None:
    codec = reader()
    codec.receive_data(b"GET /a HTTP/1.0\n\nGET /b HTTP/1.1\r\nX: 1\r\nX: 2\r\n\r\n")
    first, second = codec.next_request(), codec.next_request()
    assert first is not None and (first.method, first.path) == ("GET", "/a")
    assert second is not None and (second.path, dict(second.headers)) == ("/b", {"x": "1, 2"})
    assert codec.next_request() is None


def test_the_limits_are_inclusive() -> None:
    head = b"GET /x HTTP/1.1\r\nX: " + b"v" * 1000
    head += b"\r\n\r\n"
    exact = reader(head_bytes_max=len(head) - 4)
    exact.receive_data(head)
    assert exact.next_request() is not None
    over = reader(head_bytes_max=len(head) - 5)
    over.receive_data(head)
    with pytest.raises(AdminRequestError) as caught:
        over.next_request()
    assert caught.value.status == 431
    body = reader(body_bytes_max=4)
    body.receive_data(RAW)
    assert body.next_request() is not None


def test_responses_carry_their_length_and_close() -> None:
    raw = encode_response(HttpResponse(405, b"{}", headers=(("Allow", "GET"),)))
    assert raw == (
        b"HTTP/1.1 405 Method Not Allowed\r\nContent-Type: application/json\r\n"
        b"Content-Length: 2\r\nConnection: close\r\nAllow: GET\r\n\r\n{}"
    )
    assert error_response(404, "no such path: /x").body == (
        b'{\n  "error": "no such path: /x",\n  "status": 404\n}\n'
    )
