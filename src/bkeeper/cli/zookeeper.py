"""``bkeeper zookeeper``: run a standalone ZooKeeper on 127.0.0.1 until Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType

import click

from bkeeper.testing.zookeeper import ZooKeeperConfig, ZooKeeperServer

__all__ = ["zookeeper"]


@click.command()
@click.option(
    "--data-dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for ZooKeeper's data, zoo.cfg and log.",
)
@click.option("--port", default=2181, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--zookeeper-home",
    envvar="ZOOKEEPER_HOME",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="A ZooKeeper installation to run instead of the jars bundled in pyspark.",
)
@click.option("--log-level", default="INFO", show_default=True, help="ZooKeeper's log level.")
def zookeeper(data_dir: Path, port: int, zookeeper_home: Path | None, log_level: str) -> None:
    """Run a standalone ZooKeeper bound to 127.0.0.1 (needs java; jars from pyspark or a
    system ZooKeeper). Its log goes to DATA_DIR/zookeeper.log."""
    data_dir.mkdir(parents=True, exist_ok=True)
    config = ZooKeeperConfig(
        data_dir=data_dir, port=port, zookeeper_home=zookeeper_home, log_level=log_level
    )
    server = ZooKeeperServer(config)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.start()
        click.echo(
            f"ZooKeeper is up on {server.connect_string} (pid {server.pid}); "
            f"metadata URI {server.uri()}; log {server.log_path}. Ctrl-C stops it."
        )
        status = server.wait()
        raise click.ClickException(f"ZooKeeper exited with status {status}; see {server.log_path}")
    except KeyboardInterrupt:
        click.echo("stopping ZooKeeper")
    finally:
        server.stop()
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt
