"""Kafka's option names: each answers with bkeeper's name and how, or why there is none; the
table in names.py and the one in docs/spark.md ("Coming from Kafka") agree (pure, fast)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bkeeper.common.errors import ConfigError
from bkeeper.spark.names import (
    CLIENT_PREFIX,
    KAFKA_NAMES,
    READ_OPTIONS,
    WRITE_OPTIONS,
    check_names,
    kafka_name,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
CLIENT_FIELDS = {
    "read_timeout_ms",
    "add_timeout_ms",
    "metadata_reconnect_timeout_ms",
    "batch_read_entries_max",
    "batch_read_bytes_max",
    "ensemble_changes_max",
}


def refusal(options: dict[str, str], what: str) -> str:
    known = READ_OPTIONS if what == "read" else WRITE_OPTIONS
    with pytest.raises(ConfigError) as caught:
        check_names(options, known, what)
    return str(caught.value)


@pytest.mark.parametrize(
    ("key", "what", "message"),
    [
        ("includeheaders", "read", "unknown option includeHeaders (Kafka's name): bkeeper's is includeProperties; adds the properties column: a record's properties are Kafka's headers"),
        ("includeheaders", "write", "unknown option includeHeaders (Kafka's name); bkeeper has none: a properties column is written when the frame has one, with no option"),
        ("kafka.group.id", "read", "unknown option kafka.group.id (Kafka's name): bkeeper's is subscription; a durable subscription of each log, where the stream's progress is recorded"),
        ("groupidprefix", "read", "unknown option groupIdPrefix (Kafka's name): bkeeper's is subscription; a durable subscription of each log, where the stream's progress is recorded"),
        ("maxoffsetspertrigger", "read", "unknown option maxOffsetsPerTrigger (Kafka's name): bkeeper's is maxRecordsPerTrigger"),
        ("minoffsetspertrigger", "read", "unknown option minOffsetsPerTrigger (Kafka's name): bkeeper's is minRecordsPerTrigger"),
        ("kafkaconsumer.polltimeoutms", "read", "unknown option kafkaConsumer.pollTimeoutMs (Kafka's name): bkeeper's is client.read_timeout_ms; how long a task waits for a bookie's read response"),
        ("fetchoffset.retryintervalms", "read", "unknown option fetchOffset.retryIntervalMs (Kafka's name); bkeeper has none: the metadata client tries again as soon as it has reconnected, for up to client.metadata_reconnect_timeout_ms"),
        ("startingoffsetsbytimestampstrategy", "read", "unknown option startingOffsetsByTimestampStrategy (Kafka's name); bkeeper has none: a log with no record at or after the timestamp starts at its end, never an error (Kafka's strategy latest)"),
        ("topic", "write", "unknown option topic (Kafka's name): bkeeper's is log"),
        ("kafka.acks", "write", "unknown option kafka.acks (Kafka's name): bkeeper's is ackQuorum; bookies that acknowledge each entry (acks=all: ackQuorum equal to writeQuorum)"),
        ("kafka.acks", "read", "unknown option kafka.acks (Kafka's name, for writes): bkeeper's is ackQuorum; bookies that acknowledge each entry (acks=all: ackQuorum equal to writeQuorum)"),
        ("kafka.request.timeout.ms", "read", "unknown option kafka.request.timeout.ms (Kafka's name): bkeeper's is client.read_timeout_ms"),
        ("kafka.request.timeout.ms", "write", "unknown option kafka.request.timeout.ms (Kafka's name): bkeeper's is client.add_timeout_ms"),
        ("kafka.transactional.id", "write", "unknown option kafka.transactional.id (Kafka's name): bkeeper's is writerId; writes are exactly once without transactions: a stream's committed batches are recorded under writerId (default: from checkpointLocation)"),
        ("kafka.session.timeout.ms", "read", "unknown option kafka.session.timeout.ms (a Kafka client setting): bkeeper takes no Kafka client settings: the ledger client's are client.<setting> (e.g. client.read_timeout_ms), TLS is tls.*, the token auth.tokenFile (docs/spark.md, Coming from Kafka)"),
    ],
)  # fmt: skip
def test_a_kafka_name_answers_with_ours_and_how(key, what, message):
    assert refusal({key: "x"}, what) == message
    assert refusal({key.upper(): "x"}, what) == message  # Spark may keep or lower the case


def test_every_kafka_name_maps_to_a_known_option_or_says_why_not():
    assert len({(k.kafka.lower(), k.kind) for k in KAFKA_NAMES}) == len(KAFKA_NAMES)
    for entry in KAFKA_NAMES:
        assert entry.kind in ("read", "write", "both"), entry
        if entry.ours is None:
            assert entry.how, f"{entry.kafka}: no equivalent must say why"
            continue
        if entry.ours.startswith(CLIENT_PREFIX):
            assert entry.ours.removeprefix(CLIENT_PREFIX) in CLIENT_FIELDS, entry
            continue
        kinds = ("read", "write") if entry.kind == "both" else (entry.kind,)
        for kind in kinds:
            known = READ_OPTIONS if kind == "read" else WRITE_OPTIONS
            assert entry.ours in known, f"{entry.kafka} -> {entry.ours} is no {kind} option"


def test_client_settings_named_exist():
    from bkeeper.client.config import ClientConfig

    assert set(ClientConfig.__dataclass_fields__) >= CLIENT_FIELDS


def test_kafka_names_that_are_also_ours_pass():
    for entry in KAFKA_NAMES:
        if entry.ours == entry.kafka:
            known = READ_OPTIONS if entry.kind == "read" else WRITE_OPTIONS
            check_names({entry.kafka.lower(): "1"}, known, entry.kind)


def test_kafka_name_prefers_the_kind_asked():
    read, write = kafka_name("INCLUDEHEADERS", "read"), kafka_name("includeheaders", "write")
    assert read is not None and read.ours == "includeProperties"
    assert write is not None and write.ours is None
    assert kafka_name("colour", "read") is None


@pytest.mark.parametrize(
    ("key", "what", "message"),
    [
        ("maxrowspersplit", "read", "unknown option maxRowsPerSplit: did you mean maxEntriesPerSplit?"),
        ("maxentriespersplitt", "write", "unknown option maxEntriesPerSplitt; the options are listed in docs/spark.md"),
        ("ensembelsize", "write", "unknown option ensembelSize: did you mean ensembleSize?"),
        ("colour", "read", "unknown option colour; the options are listed in docs/spark.md"),
        ("Colour.Blue", "read", "unknown option Colour.Blue; the options are listed in docs/spark.md"),
    ],
)  # fmt: skip
def test_unknown_names_are_echoed_as_typed_or_best_recased(key, what, message):
    """Spark lower-cases option names before a Python source sees them; a name made of the
    words of known names comes back in camel case, another one closest to a known name in
    its case, a name with capitals (when Spark kept them) as typed."""
    assert refusal({key: "x"}, what) == message


def _doc_rows() -> list[tuple[str, str, str, str]]:
    text = DOC.read_text()
    section = text.split("\n## Coming from Kafka\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].startswith("`"):
            rows.append((cells[0], cells[1], cells[2], cells[3]))
    return rows


def test_the_doc_table_is_the_names_table():
    """docs/spark.md "Coming from Kafka": one row per entry of KAFKA_NAMES, in its order, with
    the same kind and equivalent (``—`` for none) and its explanation."""
    rows = _doc_rows()
    assert [r[0] for r in rows] == [f"`{k.kafka}`" for k in KAFKA_NAMES]
    kinds = {"read": "source", "write": "sink", "both": "both"}
    for (_, kind, ours, how), entry in zip(rows, KAFKA_NAMES, strict=True):
        assert kind == kinds[entry.kind], entry
        assert ours == ("—" if entry.ours is None else f"`{entry.ours}`"), entry
        same = "the same option" if entry.ours == entry.kafka else ""
        assert re.sub(r"`", "", how) == (entry.how or same), entry
