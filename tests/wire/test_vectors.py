"""Fixed byte vectors written by hand from the documented layouts.

The expected bytes are spelled out here (hex), not produced by the code under test. The
master keys are SHA-1("ledger" + password) and the CRC32 value is zlib's CRC-32 of the
32-byte header followed by the payload, both worked out once and written down.
"""

from __future__ import annotations

from bkeeper.wire import v2, v3
from bkeeper.wire.codes import StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest, AddResponse, ReadRequest

SECRET_KEY = bytes.fromhex("e793cbc379107648537183605cd361d3bb789a39")  # SHA-1("ledgersecret")
PW_KEY = bytes.fromhex("2aa226ba095b6969a64871977693b14671710d76")  # SHA-1("ledgerpw")

# Entry body of ledger 1, entry 0, LAC -1, length 5, CRC32 digest, payload "hello".
ENTRY_BODY = bytes.fromhex(
    "0000000000000001"  # ledger id
    "0000000000000000"  # entry id
    "ffffffffffffffff"  # LAC -1
    "0000000000000005"  # cumulative length
    "0000000030a56872"  # CRC32 of header + payload, as a 64-bit big-endian integer
    "68656c6c6f"  # "hello"
)


def test_master_key_is_sha1_of_ledger_and_password():
    assert master_key(b"secret") == SECRET_KEY
    assert master_key(b"pw") == PW_KEY


def test_crc32_entry_body():
    manager = DigestManager(1, DigestType.CRC32, b"secret")
    assert manager.encode_entry(0, -1, 5, b"hello") == ENTRY_BODY
    assert manager.verify_entry(ENTRY_BODY, 0).data == b"hello"


def test_crc32c_entry_body():
    body = bytes.fromhex(
        "0000000000000001"
        "0000000000000000"
        "ffffffffffffffff"
        "0000000000000005"
        "e3a5f74d"  # CRC-32C as a 32-bit big-endian integer
        "68656c6c6f"
    )
    assert DigestManager(1, DigestType.CRC32C, b"").encode_entry(0, -1, 5, b"hello") == body


def test_v2_add_entry_request():
    expected = (
        bytes.fromhex(
            "00000045"  # frame length 69 = 4 header + 20 key + 45 body
            "02010000"  # version 2, opcode 1 (ADD_ENTRY), flags 0
            "e793cbc379107648537183605cd361d3bb789a39"  # master key
        )
        + ENTRY_BODY
    )
    request = AddRequest(1, 0, SECRET_KEY, ENTRY_BODY)
    assert v2.encode_request_frame(request) == expected
    decoded = v2.decode_request(expected[4:])
    assert (decoded.ledger_id, decoded.entry_id, decoded.master_key) == (1, 0, SECRET_KEY)
    assert bytes(decoded.body) == ENTRY_BODY


def test_v2_fencing_read_request():
    expected = bytes.fromhex(
        "00000028"  # frame length 40
        "02020001"  # version 2, opcode 2 (READ_ENTRY), flags DO_FENCING
        "0000000000000007"  # ledger 7
        "ffffffffffffffff"  # entry -1: the last entry
        "2aa226ba095b6969a64871977693b14671710d76"  # master key of password "pw"
    )
    request = ReadRequest(7, -1, fence=True, master_key=PW_KEY)
    assert v2.encode_request_frame(request) == expected
    assert v2.decode_request(expected[4:]) == request


def test_v2_add_response():
    expected = bytes.fromhex(
        "00000018"
        "02010000"
        "00000068"  # length 24, header, rc 104 (EFENCED)
        "0000000000000009"
        "000000000000000c"
    )
    assert v2.encode_response_frame(AddResponse(StatusCode.EFENCED, 9, 12)) == expected
    assert v2.decode_response(expected[4:]) == AddResponse(StatusCode.EFENCED, 9, 12)


def test_v3_add_request():
    # Request {
    #   header (1) { version (1): 3, operation (2): ADD_ENTRY 2, txnId (3): 1 }
    #   addRequest (101) { ledgerId (1): 1, entryId (2): 0, masterKey (3): 20 bytes, body (4): "abc" }
    # }
    key = bytes(range(20))
    expected = bytes.fromhex(
        "0a06"
        "0803"
        "1002"
        "1801"  # header, 6 bytes
        "aa061f"  # field 101, length-delimited (tag 101<<3|2 = 810 = varint aa 06), 31 bytes
        "0801"
        "1000"  # ledgerId 1, entryId 0
        "1a14"
        "000102030405060708090a0b0c0d0e0f10111213"  # masterKey (tag 3<<3|2)
        "2203"
        "616263"  # body "abc"
    )
    request = AddRequest(1, 0, key, b"abc", txn_id=1)
    assert v3.encode_request(request) == expected
    assert v3.decode_request(expected) == request
