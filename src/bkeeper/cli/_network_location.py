"""A bookie's network location looked up before it starts: in a mapping file, or by a script.

``network_location`` given: that. Else ``network_location_file``: the line naming the bookie
id or the advertised host (:func:`bkeeper.meta.racks.parse_location_map`). Else
``network_location_script``: run with the advertised host as its only argument (Apache
BookKeeper's script-based DNS-to-switch mapping), its first word of output is the location;
it has :data:`SCRIPT_TIMEOUT_S` and :data:`SCRIPT_OUTPUT_BYTES_MAX`. Whatever fails (no line
for the bookie, a script that fails or prints no location) stops the start with a
``click.UsageError`` saying so: a bookie placed on the default rack by mistake would quietly
break the placement of every ledger it joins.
"""

from __future__ import annotations

import dataclasses
import subprocess

import click

from bkeeper.common.errors import ConfigError
from bkeeper.meta.locations import LOCATION_MAP_BYTES_MAX, check_location, parse_location_map
from bkeeper.server import BookieConfig

__all__ = ["SCRIPT_OUTPUT_BYTES_MAX", "SCRIPT_TIMEOUT_S", "resolve_network_location"]

#: How long the location script may run.
SCRIPT_TIMEOUT_S = 10.0
#: Output of the location script read at most.
SCRIPT_OUTPUT_BYTES_MAX = 64 * 1024


def resolve_network_location(config: BookieConfig) -> BookieConfig:
    """``config`` with ``network_location`` set from its file or script (module doc)."""
    if config.network_location:
        return config
    host = config.advertised_host
    names = [config.effective_bookie_id, host] if config.port or config.bookie_id else [host]
    if config.network_location_file:
        location = _from_file(config.network_location_file, names)
    elif config.network_location_script:
        location = _from_script(config.network_location_script, host)
    else:
        return config
    return dataclasses.replace(config, network_location=location)


def _from_file(path: str, names: list[str]) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read(LOCATION_MAP_BYTES_MAX + 1)
    except OSError as exc:
        raise click.UsageError(f"network_location_file: {exc.strerror}: {path}") from None
    if len(data) > LOCATION_MAP_BYTES_MAX:
        raise click.UsageError(
            f"network_location_file {path}: larger than {LOCATION_MAP_BYTES_MAX} bytes"
        )
    try:
        mapping = parse_location_map(data.decode("utf-8", "replace"), path)
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
    for name in names:
        if name in mapping:
            return mapping[name]
    raise click.UsageError(
        f"network_location_file {path} names neither {' nor '.join(dict.fromkeys(names))}: "
        "add a line for this bookie, or give network_location"
    )


def _from_script(script: str, host: str) -> str:
    try:
        result = subprocess.run(
            [script, host],
            capture_output=True,
            timeout=SCRIPT_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise click.UsageError(
            f"network_location_script {script}: no answer within {SCRIPT_TIMEOUT_S:g} s"
        ) from None
    except OSError as exc:
        raise click.UsageError(f"network_location_script {script}: {exc.strerror}") from None
    output = result.stdout[:SCRIPT_OUTPUT_BYTES_MAX].decode("utf-8", "replace").split()
    if result.returncode != 0 or not output:
        why = f"exit code {result.returncode}" if result.returncode else "no output"
        error = result.stderr[:500].decode("utf-8", "replace").strip()
        raise click.UsageError(
            f"network_location_script {script} {host}: {why}" + (f": {error}" if error else "")
        )
    try:
        return check_location(output[0], f"network_location_script {script} {host}: answer")
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from None
