"""Entry size (issue 36), without sockets: the largest entry a writer takes fits one frame
with its headers in either protocol and with every digest, and a bookie's EBADREQ to an add
(its answer to a frame over its limit) stops the writer with ``EntryTooLargeError`` instead
of blaming the bookie with an ensemble change."""

from __future__ import annotations

import pytest

from bkeeper.client.adding import AddPipeline
from bkeeper.client.bookie_client import add_encoders, entry_bytes_max
from bkeeper.client.config import ClientConfig
from bkeeper.common.errors import ConfigError, EntryTooLargeError
from bkeeper.common.limits import MAX_FRAME_BYTES_DEFAULT
from bkeeper.wire import v3
from bkeeper.wire.codes import Protocol, StatusCode
from bkeeper.wire.digest import DigestManager, DigestType, master_key
from bkeeper.wire.messages import AddRequest

KEY = master_key(b"pw")
LEDGER = 2**62  # large ids: the longest varints over v3


def frame_length(protocol: Protocol, digest: DigestManager[object], payload: bytes) -> int:
    """The 4-byte length's value of the ADD frame the writer's encoder makes of ``payload``
    (over v3 with the largest txn id and flags, as a connection may send it)."""
    encode_one, _ = add_encoders(protocol, KEY, digest)
    wire = encode_one(2**62, 2**62 - 1, 2**62, payload)
    if protocol is Protocol.V2:
        return int.from_bytes(wire[:4], "big")
    request = AddRequest(LEDGER, 2**62, KEY, wire, True, True, 1, 2**64 - 1)
    return len(v3.encode_request(request))


@pytest.mark.parametrize("digest_type", list(DigestType), ids=lambda d: d.name)
@pytest.mark.parametrize("protocol", [Protocol.V2, Protocol.V3], ids=["v2", "v3"])
def test_the_largest_entry_fits_the_frame(protocol: Protocol, digest_type: DigestType) -> None:
    digest: DigestManager[object] = DigestManager(LEDGER, digest_type, b"pw")
    largest = entry_bytes_max(protocol, MAX_FRAME_BYTES_DEFAULT, digest.digest_length)
    assert largest > MAX_FRAME_BYTES_DEFAULT - 200
    assert frame_length(protocol, digest, bytes(largest)) <= MAX_FRAME_BYTES_DEFAULT
    if protocol is Protocol.V2:  # exact: one byte more would not fit
        assert frame_length(protocol, digest, bytes(largest + 1)) == MAX_FRAME_BYTES_DEFAULT + 1


def test_max_frame_bytes_is_validated_and_bounds_batch_reads() -> None:
    with pytest.raises(ConfigError, match="max_frame_bytes"):
        ClientConfig(max_frame_bytes=0)
    with pytest.raises(ConfigError, match=r"1048576-byte frame \(max_frame_bytes\)"):
        ClientConfig(max_frame_bytes=1 << 20)
    config = ClientConfig(max_frame_bytes=1 << 20, batch_read_bytes_max=512 * 1024)
    assert config.max_frame_bytes == 1 << 20


def pipeline() -> AddPipeline:
    return AddPipeline(
        7,
        ("b0", "b1", "b2"),
        3,
        2,
        pending_max=10,
        add_timeout_s=5.0,
        tick_interval_s=0.1,
        ensemble_changes_max=10,
        now=0.0,
    )


def test_ebadreq_to_an_add_stops_the_writer_and_blames_no_bookie() -> None:
    adds = pipeline()
    for entry_id in range(3):
        adds.append(entry_id, 10 * (entry_id + 1), b"w" * (100 + entry_id), None, 0.0)
    effects = adds.error_answer("b1", StatusCode.EBADREQ, 1)
    assert isinstance(effects.error, EntryTooLargeError)
    assert "bookie b1 refused entry 1 (101 bytes sent)" in str(effects.error)
    assert "max_frame_bytes" in str(effects.error)
    assert not effects.change_ensemble and not effects.send
    assert [add.entry_id for add in effects.fail] == [0, 1, 2]
    with pytest.raises(EntryTooLargeError):
        adds.append(3, 40, b"x", None, 0.0)
