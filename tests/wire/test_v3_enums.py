"""v3 requests with enum values the codec does not know, or bodies that lack fields, decode
to UnknownRequest with the txn id (answered EBADREQ); responses echo unknown operations."""

from __future__ import annotations

import pytest

from bkeeper.common.errors import ProtocolError
from bkeeper.testing.fuzz_frames import pb_bytes, pb_varint
from bkeeper.wire import v3
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.messages import AddRequest, ErrorResponse, ReadRequest, UnknownRequest

READ = pb_bytes(100, pb_varint(1, 15) + pb_varint(2, 4))
ADD = pb_varint(1, 15) + pb_varint(2, 4) + pb_bytes(3, bytes(20)) + pb_bytes(4, b"body")


def request(header: bytes, body: bytes = b"", txn: int = 42) -> bytes:
    return pb_bytes(1, header + pb_varint(3, txn)) + body


@pytest.mark.parametrize(
    ("frame", "expected"),
    [
        (
            request(pb_varint(1, 3) + pb_varint(2, 99)),
            UnknownRequest(99, 42),
        ),
        (
            request(pb_varint(1, 3) + pb_varint(2, -7)),
            UnknownRequest(-7, 42),
        ),
        (
            request(pb_varint(1, 99) + pb_varint(2, 1), READ),
            UnknownRequest(1, 42, reason="protocol version 99 is unknown"),
        ),
        (
            request(pb_varint(2, 1), READ),
            UnknownRequest(1, 42, reason="the header lacks its protocol version"),
        ),
        (
            request(pb_varint(1, 3) + pb_varint(2, 2), pb_bytes(101, ADD + pb_varint(100, 9))),
            UnknownRequest(2, 42, 15, 4, "AddRequest flag 9 is unknown"),
        ),
        (
            request(
                pb_varint(1, 3) + pb_varint(2, 1),
                pb_bytes(100, pb_varint(1, 15) + pb_varint(2, 4) + pb_varint(100, 0)),
            ),
            UnknownRequest(1, 42, 15, 4, "ReadRequest flag 0 is unknown"),
        ),
        (
            request(pb_varint(1, 3) + pb_varint(2, 2), READ),
            UnknownRequest(2, 42, reason="v3 ADD_ENTRY request lacks addRequest"),
        ),
        (
            request(pb_varint(1, 3) + pb_varint(2, 1), pb_bytes(100, pb_varint(1, 15))),
            UnknownRequest(1, 42, reason="v3 ReadRequest lacks required fields: entryId"),
        ),
    ],
)
def test_unknown_values_decode_to_unknown_request(frame: bytes, expected: UnknownRequest) -> None:
    assert v3.decode_request(frame) == expected


def test_known_values_still_decode() -> None:
    frame = request(pb_varint(1, 3) + pb_varint(2, 2), pb_bytes(101, ADD + pb_varint(100, 1)))
    assert v3.decode_request(frame) == AddRequest(15, 4, bytes(20), b"body", True, txn_id=42)
    assert v3.decode_request(request(pb_varint(1, 3) + pb_varint(2, 1), READ)) == ReadRequest(
        15, 4, txn_id=42
    )


@pytest.mark.parametrize(
    "frame",
    [
        b"\x0a\x02\x08",  # not protobuf
        pb_bytes(1, pb_varint(1, 3) + pb_varint(2, 1)) + READ,  # no txn id
        pb_bytes(1, pb_varint(1, 3) + pb_varint(3, 1)) + READ,  # no operation
    ],
)
def test_frames_without_a_readable_header_still_raise(frame: bytes) -> None:
    with pytest.raises(ProtocolError):
        v3.decode_request(frame)


@pytest.mark.parametrize("operation", [3, 99, 1 << 20, -1, -(1 << 31)])
def test_responses_echo_any_operation(operation: int) -> None:
    response = ErrorResponse(operation, StatusCode.EBADREQ, (1 << 64) - 1)
    assert v3.decode_response(v3.encode_response(response)) == response
