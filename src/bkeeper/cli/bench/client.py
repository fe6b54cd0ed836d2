"""``bkeeper bench codec | bookie | write | read | log``: what a client of the cluster sees,
from encoding a frame to appending to a named log."""

from __future__ import annotations

import contextlib
import tempfile

import click

from bkeeper.cli._ledger_password import ledger_password, password_options
from bkeeper.cli.bench._common import (
    KEEP,
    METADATA,
    cluster,
    console,
    parse_address,
    print_results,
    protocol_of,
    shows_elapsed,
)
from bkeeper.client.handshake import ClientSecurity
from bkeeper.common.errors import ConfigError
from bkeeper.common.tls import TlsClientConfig
from bkeeper.testing.benchmarks import (
    BenchResult,
    bench_bookie_adds,
    bench_client_reads,
    bench_client_writes,
    bench_codec,
    bench_idle_writers,
    bench_log,
    delete_ledger,
    local_bookie,
)
from bkeeper.testing.certs import make_ca, make_cert
from bkeeper.wire.codes import Protocol
from bkeeper.wire.digest import DigestType

__all__ = ["bookie_bench", "codec", "idle_bench", "log_bench", "read_bench", "write_bench"]


@click.command("codec")
@click.option("--count", default=200_000, show_default=True, type=click.IntRange(1))
@click.option("--entry-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option(
    "--digest",
    default="crc32c",
    show_default=True,
    type=click.Choice(["crc32", "crc32c", "hmac", "dummy"]),
)
@shows_elapsed("codec")
def codec(count: int, entry_size: int, digest: str) -> None:
    """Encode+decode rate of ADD_ENTRY requests (with digest) and responses, v2 and v3."""
    digest_type = DigestType.parse(digest)
    results: list[BenchResult] = []
    for protocol in (Protocol.V2, Protocol.V3):
        results.extend(bench_codec(protocol, count, entry_size, digest_type))
    print_results(results, "msg")


@click.command("bookie")
@click.option("--address", default="", help="host:port of a running bookie (default: start one).")
@click.option("--data-dir", default=None, help="Data directory of the bookie started here.")
@click.option("--protocol", type=click.Choice(["v2", "v3"]), default="v2", show_default=True)
@click.option("--entry-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option("--duration", default=10.0, show_default=True, type=click.FloatRange(0.1))
@click.option("--in-flight", default=2000, show_default=True, type=click.IntRange(1))
@click.option("--rate", default=None, type=click.FloatRange(1), help="Open-loop adds/s.")
@click.option(
    "--bookie-arg",
    "bookie_args",
    multiple=True,
    help="An argument for the bookie started here (repeatable), e.g. --bookie-arg=--no-metrics.",
)
@click.option(
    "--tls",
    is_flag=True,
    help="TLS between the client and the bookie started here (certificates made for the run).",
)
@click.option(
    "--generic-client",
    is_flag=True,
    help="v2 through the generic BookieClient (futures) instead of the raw load generator.",
)
@shows_elapsed("bookie")
def bookie_bench(
    address: str,
    data_dir: str | None,
    protocol: str,
    entry_size: int,
    duration: float,
    in_flight: int,
    rate: float | None,
    bookie_args: tuple[str, ...],
    tls: bool,
    generic_client: bool,
) -> None:
    """Acknowledged (fsynced) adds/s, MB/s and latency against one bookie."""
    from bkeeper.common.loop import run_event_loop

    proto = protocol_of(protocol)

    async def run(host: str, port: int, security: ClientSecurity | None = None) -> None:
        result = await bench_bookie_adds(
            host,
            port,
            protocol=proto,
            entry_bytes=entry_size,
            duration_s=duration,
            in_flight=in_flight,
            rate=rate,
            security=security,
            generic=generic_client,
        )
        print_results([result], "adds")

    if address:
        if bookie_args or tls:
            raise click.UsageError(
                "--bookie-arg, --tls: only for the bookie started here (no --address)"
            )
        run_event_loop(run(*parse_address(address, "--address")))
        return
    with contextlib.ExitStack() as stack:
        security = None
        if tls:
            where = stack.enter_context(tempfile.TemporaryDirectory(prefix="bkeeper-bench-tls-"))
            ca = make_ca(where, "ca")
            cert = make_cert(where, ca, "bookie")
            bookie_args = (*bookie_args, "--tls-cert", cert.cert, "--tls-key", cert.key)
            security = ClientSecurity(ssl_context=TlsClientConfig(ca_file=ca.cert).context())
        host, port = stack.enter_context(local_bookie(data_dir, extra_args=bookie_args))
        run_event_loop(run(host, port, security))


@click.command("write")
@METADATA
@click.option("--ensemble", default=3, show_default=True, type=click.IntRange(1))
@click.option("--write-quorum", default=3, show_default=True, type=click.IntRange(1))
@click.option("--ack-quorum", default=2, show_default=True, type=click.IntRange(1))
@click.option("--entry-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option("--duration", default=10.0, show_default=True, type=click.FloatRange(0.1))
@click.option("--in-flight", default=1000, show_default=True, type=click.IntRange(1))
@click.option("--rate", default=None, type=click.FloatRange(1), help="Open-loop entries/s.")
@click.option(
    "--entries",
    default=None,
    type=click.IntRange(1),
    help="Stop after this many entries (or at --duration, whichever comes first): a fixed "
    "amount of work, for comparing whole-process CPU times.",
)
@click.option(
    "--batch",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Entries a call: above 1, WriteHandle.append_many with up to this many (at most "
    "--in-flight).",
)
@click.option(
    "--api",
    type=click.Choice(["future", "callback"]),
    default="future",
    show_default=True,
    help="One entry a call through WriteHandle.append_async (a future per entry) or "
    "append_callback (a callback, no asyncio object per entry; as Java's "
    "BenchThroughputLatency appends). Not with --batch.",
)
@click.option(
    "--gc-freeze",
    is_flag=True,
    help="gc.freeze() once the client is started: the collector's full passes then skip what "
    "was loaded by then (modules, the client), as a tuned application would.",
)
@click.option("--protocol", type=click.Choice(["v2", "v3"]), default="v2", show_default=True)
@click.option("--read", "also_read", is_flag=True, help="Read the ledger back afterwards.")
@click.option(
    "--tls",
    is_flag=True,
    help="Start the sandbox with --secure (TLS required, token auth, ZooKeeper ACLs) and "
    "write through TLS (without --metadata only).",
)
@KEEP
@shows_elapsed("write")
def write_bench(
    metadata_uri: str,
    ensemble: int,
    write_quorum: int,
    ack_quorum: int,
    entry_size: int,
    duration: float,
    in_flight: int,
    rate: float | None,
    entries: int | None,
    batch: int,
    api: str,
    gc_freeze: bool,
    protocol: str,
    also_read: bool,
    tls: bool,
    keep: bool,
) -> None:
    """Acknowledged entries/s, MB/s and latency of one client writing one ledger."""
    if tls and metadata_uri:
        raise click.UsageError("--tls starts a secure sandbox: not with --metadata")
    if batch > in_flight:
        raise click.UsageError(f"--batch {batch} is more than --in-flight {in_flight}")
    if api == "callback" and batch > 1:
        raise click.UsageError("--api callback appends one entry a call: not with --batch")
    from bkeeper.common.loop import run_event_loop

    proto = protocol_of(protocol)

    async def run(uri: str) -> tuple[list[BenchResult], int]:
        result, ledger_id = await bench_client_writes(
            uri,
            ensemble=ensemble,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            entry_bytes=entry_size,
            duration_s=duration,
            in_flight=in_flight,
            rate=rate,
            protocol=proto,
            count=entries,
            batch=batch,
            gc_freeze=gc_freeze,
            callbacks=api == "callback",
        )
        results = [result]
        try:
            if also_read:
                results.append(await bench_client_reads(uri, ledger_id, gc_freeze=gc_freeze))
        finally:
            if not keep:
                await delete_ledger(uri, ledger_id)
        return results, ledger_id

    with cluster(metadata_uri, ensemble, secure=tls) as uri:
        results, ledger_id = run_event_loop(run(uri))
        print_results(results, "entries")
        if keep:
            read = f"bkeeper bench read --ledger {ledger_id}"
            console().print(f"kept ledger {ledger_id} (password 'bench'): {read}")


@click.command("idle")
@METADATA
@click.option("--ledgers", default=1000, show_default=True, type=click.IntRange(1, 100_000))
@click.option("--duration", default=10.0, show_default=True, type=click.FloatRange(0.1))
@shows_elapsed("idle")
def idle_bench(metadata_uri: str, ledgers: int, duration: float) -> None:
    """CPU a second of one client holding open ledgers it does not write to."""
    from rich.table import Table

    from bkeeper.common.loop import run_event_loop

    with cluster(metadata_uri, 3) as uri:
        cpu_ms = run_event_loop(bench_idle_writers(uri, ledgers, duration))
    table = Table(title="bkeeper bench")
    for column in ("workload", "open ledgers", "seconds", "client CPU ms/s"):
        table.add_column(column, justify="left" if column == "workload" else "right")
    label = "client holding open ledgers, idle (one entry each)"
    table.add_row(label, f"{ledgers:,}", f"{duration:.2f}", f"{cpu_ms:.1f}")
    console().print(table)


@click.command("read")
@METADATA
@click.option(
    "--ledger",
    "ledger_id",
    type=click.IntRange(0),
    help="Ledger to read (default: write one of --entries entries first).",
)
@password_options("bench")
@click.option("--entries", default=100_000, show_default=True, type=click.IntRange(1))
@click.option("--entry-size", default=1024, show_default=True, type=click.IntRange(0))
@click.option(
    "--gc-freeze",
    is_flag=True,
    help="gc.freeze() once the client is started: the collector's full passes then skip what "
    "was loaded by then (modules, the client), as a tuned application would.",
)
@KEEP
@shows_elapsed("read")
def read_bench(
    metadata_uri: str,
    ledger_id: int | None,
    password_file: str | None,
    entries: int,
    entry_size: int,
    gc_freeze: bool,
    keep: bool,
) -> None:
    """Entries/s and MB/s of one client reading a whole ledger (opened with recovery)."""
    from bkeeper.common.loop import run_event_loop

    password = ledger_password(password_file, default=b"bench")

    async def run(uri: str) -> list[BenchResult]:
        target = ledger_id
        results = []
        if target is None:
            written, target = await bench_client_writes(
                uri,
                ensemble=3,
                write_quorum=3,
                ack_quorum=2,
                entry_bytes=entry_size,
                duration_s=3600.0,
                in_flight=1000,
                count=entries,
            )
            results.append(written)
        try:
            results.append(await bench_client_reads(uri, target, password, gc_freeze=gc_freeze))
        finally:
            if ledger_id is None and not keep:  # only the ledger written here
                await delete_ledger(uri, target)
        return results

    with cluster(metadata_uri, 3) as uri:
        print_results(run_event_loop(run(uri)), "entries")


@click.command("log")
@METADATA
@click.option("--entry-size", default=100, show_default=True, type=click.IntRange(0))
@click.option("--duration", default=10.0, show_default=True, type=click.FloatRange(0.1))
@click.option(
    "--in-flight",
    default=1000,
    show_default=True,
    type=click.IntRange(1),
    help="Entries in flight (the writer's pending adds); with --append-many also the records "
    "in flight at most.",
)
@click.option(
    "--rate",
    default=1000.0,
    show_default=True,
    type=click.FloatRange(1),
    help="Open-loop appends/s (a large rate measures the maximum).",
)
@click.option(
    "--batch/--no-batch",
    default=False,
    show_default=True,
    help="Record batching in the writer (LogConfig.batching).",
)
@click.option("--batch-max-records", default=1_000, show_default=True, type=click.IntRange(1))
@click.option("--batch-max-bytes", default=128 * 1024, show_default=True, type=click.IntRange(1))
@click.option("--linger-ms", default=1, show_default=True, type=click.IntRange(0))
@click.option(
    "--compression", default="none", show_default=True, type=click.Choice(["none", "zstd", "lz4"])
)
@click.option(
    "--append-many",
    default=0,
    show_default=True,
    type=click.IntRange(0),
    help="Records per append_many call (0: append_async per record).",
)
@click.option(
    "--tail/--no-tail",
    default=True,
    show_default=True,
    help="Tail the log from another client of the same process meanwhile.",
)
@click.option(
    "--read-back/--no-read-back",
    default=True,
    show_default=True,
    help="Read the log back after (a reader, then a subscription).",
)
@click.option(
    "--tune-gc",
    is_flag=True,
    help="Freeze the loaded objects and collect the young generation every 50,000 "
    "allocations (as Spark's runtime does) while appending.",
)
@shows_elapsed("log")
def log_bench(
    metadata_uri: str,
    entry_size: int,
    duration: float,
    in_flight: int,
    rate: float,
    batch: bool,
    batch_max_records: int,
    batch_max_bytes: int,
    linger_ms: int,
    compression: str,
    append_many: int,
    tail: bool,
    read_back: bool,
    tune_gc: bool,
) -> None:
    """Named-log append rate and tail latency (append to visible at a tailing reader); then
    the log read back by a reader, and by a subscription acknowledging every record."""
    from bkeeper.common.loop import run_event_loop
    from bkeeper.namedlog import LogConfig

    try:
        config = LogConfig(
            batching=batch,
            batch_max_records=batch_max_records,
            batch_max_bytes=batch_max_bytes,
            linger_ms=linger_ms,
            compression=compression,
        )
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc
    with cluster(metadata_uri, 3) as uri:
        results = run_event_loop(
            bench_log(
                uri,
                entry_bytes=entry_size,
                duration_s=duration,
                in_flight=in_flight,
                rate=rate,
                log_config=config,
                append_many=append_many,
                tail=tail,
                read_back=read_back,
                tune_gc=tune_gc,
            )
        )
        print_results(results, "records")
