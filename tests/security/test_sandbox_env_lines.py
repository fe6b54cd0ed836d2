"""The ``export`` lines ``bkeeper sandbox`` prints: a POSIX shell that runs them gets every
value back exactly, whatever the path holds (spaces, quotes, a URI's ``?`` and ``&``)."""

from __future__ import annotations

import subprocess

from bkeeper.cli.sandbox import export_lines

AWKWARD = {
    "BKEEPER_METADATA": "zk://127.0.0.1:2181/ledgers?digest-file=/tmp/my%20data/zk.digest",
    "BKEEPER_TLS_CA": "/tmp/my data/it's here/ca.pem",
    "BKEEPER_AUTH_TOKEN_FILE": "/tmp/a&b;$HOME`x`*/client.token",
}


def test_export_lines_give_each_value_back_in_a_shell(subprocesses: None) -> None:
    lines = export_lines(AWKWARD)
    assert [line.split("=", 1)[0] for line in lines] == [f"export {k}" for k in AWKWARD]
    script = "\n".join([*lines, *(f'printf "%s\\0" "${name}"' for name in AWKWARD)])
    out = subprocess.run(["sh", "-c", script], capture_output=True, check=True, env={})
    assert out.stdout.decode().split("\0")[:-1] == list(AWKWARD.values())


def test_a_plain_value_is_printed_as_is() -> None:
    assert export_lines({"BKEEPER_TLS_CA": "/data/security/ca.pem"}) == [
        "export BKEEPER_TLS_CA=/data/security/ca.pem"
    ]
