"""Secrets never leave the process (issue 37), against real processes: a ``bkeeper sandbox
--secure`` cluster with auto-recovery processes and a dashboard is used the way its users do
(``shell simpletest``, a named log appended and read, a ledger read with its password from
the environment) and on purpose wrongly (a foreign token, an expired one, a wrong ledger
password, a wrong ZooKeeper digest, digest files unreadable or malformed). Then everything
a user or another user of the machine can see is collected, and searched for every secret:

- the token secret (each line of its file, raw, and decoded from base64 as bytes and hex),
- every token used (whole, and its signature part),
- the ZooKeeper digest password (the part after ``:`` in ``zk.digest``, and a wrong one),
- the ledger passwords used (the right one and a wrong one),
- the private keys' PEM bodies (each base64 line).

Sources (:class:`Collected`; a new one is one ``add``): every log file of the sandbox, each
CLI run's stdout, stderr and command line, the command line (``/proc/<pid>/cmdline``, what
``ps`` shows) of every process this test started or its children started (sampled while
they run), each bookie's ``/metrics``, ``/api/v1/config/server_config`` and ledger metadata
endpoints, the dashboard's ``/api/*``, the printed export lines.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bkeeper.cli.sandbox import export_lines
from bkeeper.client import BookKeeper
from bkeeper.client.config import ClientConfig
from bkeeper.common.auth import ClientAuthConfig, make_token
from bkeeper.common.tls import TlsClientConfig
from bkeeper.testing.benchmarks import free_port, free_port_range
from bkeeper.testing.sandbox import Sandbox, SandboxConfig

#: Its tests start processes (tests/tiers.py).
pytestmark = pytest.mark.usefixtures("subprocesses")

BOOKIES = 3
#: Secrets shorter than this would match by chance: the test refuses to look for them.
SECRET_BYTES_MIN = 12
#: The dashboard's JSON views.
DASHBOARD_VIEWS = ("overview", "series", "ledgers", "logs", "recovery")


# -- what is secret ------------------------------------------------------------------------
@dataclass
class Secrets:
    """Named secrets, each also looked for in the forms it may be printed in."""

    named: dict[str, bytes] = field(default_factory=dict)

    def add(self, name: str, value: bytes | str) -> None:
        data = value.encode() if isinstance(value, str) else value
        assert len(data) >= SECRET_BYTES_MIN, f"{name}: too short to look for"
        self.named[name] = data
        self.named[f"{name} (repr)"] = repr(data)[2:-1].encode()

    def add_token(self, name: str, token: str) -> None:
        self.add(name, token)
        self.add(f"{name}'s signature", token.rsplit(".", 1)[-1])

    def add_secret_file(self, path: Path) -> None:
        for number, line in enumerate(path.read_bytes().splitlines()):
            if not line.strip():
                continue
            self.add(f"token secret line {number + 1}", line.strip())
            try:
                decoded = base64.b64decode(line.strip(), validate=True)
            except binascii.Error:
                continue
            self.add(f"token secret line {number + 1} (decoded)", decoded)
            self.add(f"token secret line {number + 1} (decoded, hex)", decoded.hex())

    def add_key_file(self, name: str, path: Path) -> None:
        lines = [
            line
            for line in path.read_text().splitlines()
            if line and not line.startswith("-----") and len(line) >= SECRET_BYTES_MIN
        ]
        assert lines, f"{path}: no PEM body"
        for number, line in enumerate(lines):
            self.add(f"{name} PEM line {number + 1}", line)

    def found_in(self, content: bytes) -> list[str]:
        return [name for name, value in self.named.items() if value in content]


@dataclass
class Collected:
    """What users can see, by source."""

    sources: dict[str, bytes] = field(default_factory=dict)
    #: HTTP sources that did not answer 200 (an error page would hide a leak): why.
    refused: dict[str, str] = field(default_factory=dict)

    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, source: str, content: bytes | str) -> None:
        data = content.encode() if isinstance(content, str) else content
        with self.lock:
            self.sources[source] = self.sources.get(source, b"") + data

    def add_run(self, args: list[str], done: subprocess.CompletedProcess[bytes]) -> None:
        shown = " ".join(args)
        self.add(f"command line: {shown}", shown)
        self.add(f"stdout of {shown}", done.stdout)
        self.add(f"stderr of {shown}", done.stderr)

    def add_http(self, source: str, url: str, token: str, ca_file: str) -> bytes:
        try:
            status, body = http_get(url, token, ca_file)
        except OSError as exc:
            self.refused[source] = f"no answer: {exc}"
            return b""
        if status != 200:
            self.refused[source] = f"{status} {body[:200]!r}"
        self.add(f"{source} ({url})", body)
        return body

    def add_logs(self, data_dir: Path) -> None:
        """Every log file of the sandbox: its children's (``*.log`` at the top) and
        ZooKeeper's (the bookies' own directories hold data, not logs)."""
        for path in sorted(data_dir.glob("*.log")):
            self.add(f"log {path.name}", path.read_bytes())
        for path in sorted((data_dir / "zookeeper").rglob("*")):
            if path.is_file() and (path.suffix in (".log", ".out") or "log4j" in path.name):
                self.add(f"log zookeeper/{path.relative_to(data_dir / 'zookeeper')}",
                         path.read_bytes())  # fmt: skip

    def leaks(self, secrets: Secrets) -> list[str]:
        return [
            f"{source}: {', '.join(found)}"
            for source, content in self.sources.items()
            if (found := secrets.found_in(content))
        ]


def http_get(url: str, token: str, ca_file: str) -> tuple[int, bytes]:
    """GET ``url`` with the bearer ``token``, over TLS (the sandbox's CA) when the server
    speaks it, else plain: (status, body). ``OSError`` if neither answers."""
    context = ssl.create_default_context(cafile=ca_file)
    last: OSError | None = None
    for scheme in ("https", "http"):
        request = urllib.request.Request(
            url.replace("http://", f"{scheme}://", 1),
            headers={"Authorization": f"Bearer {token}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as answer:
                return answer.status, answer.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError as exc:  # URLError, SSLError, a connection closed
            last = exc
    raise OSError(f"{url}: no answer over https or http: {last}")


# -- what every process shows ----------------------------------------------------------------
def _descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = {root}
    grew = True
    while grew:
        grew = False
        for pid, ppid in parents.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    found.discard(root)
    return found


@contextmanager
def command_lines(collected: Collected, period_s: float = 0.1) -> Iterator[None]:
    """Sample the command line of every descendant of this process while the block runs."""
    stop = threading.Event()
    seen: set[bytes] = set()

    def sample() -> None:
        while not stop.is_set():
            for pid in _descendants(os.getpid()):
                try:
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                if cmdline and cmdline not in seen:
                    seen.add(cmdline)
                    shown = cmdline.replace(b"\0", b" ").strip()
                    collected.add(f"ps: {shown.decode(errors='replace')}", shown)
            stop.wait(period_s)

    thread = threading.Thread(target=sample, name="cmdline-sampler", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    assert seen, "no command line was sampled"


# -- the test --------------------------------------------------------------------------------
def bkeeper(
    collected: Collected, env: dict[str, str], *args: str, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("BKEEPER_")}
    command = [sys.executable, "-m", "bkeeper", *args]
    done = subprocess.run(
        command, env={**clean, **env}, input=stdin, capture_output=True, timeout=120, check=False
    )
    collected.add_run(command, done)
    return done


def _private_file(path: Path, text: str, mode: int = 0o600) -> str:
    path.write_text(text)
    path.chmod(mode)
    return str(path)


async def _ledger_with_password(uri: str, ca: str, token: str, password: bytes) -> int:
    config = ClientConfig(tls=TlsClientConfig(ca_file=ca), auth=ClientAuthConfig(token=token))
    async with BookKeeper(uri, config) as bk:
        handle = await bk.create_ledger(3, 3, 2, password=password)
        for number in range(5):
            await handle.append(b"entry %d" % number)
        await handle.close()
        return handle.ledger_id


def test_the_search_finds_each_form_of_a_secret(tmp_path: Path) -> None:
    """The search itself: a secret file's line raw or decoded, a token's signature alone, a
    PEM line, a password shown as a bytes repr; and nothing in clean sources."""
    secret = os.urandom(48)
    secret_file = tmp_path / "token.secret"
    secret_file.write_bytes(base64.b64encode(secret) + b"\n")
    key_file = tmp_path / "k.key"
    key_file.write_text(
        "-----BEGIN PRIVATE KEY-----\n" + "A1b2" * 16 + "\n-----END PRIVATE KEY-----\n"
    )
    token = make_token(base64.b64encode(secret), "someone", 60)
    secrets = Secrets()
    secrets.add_secret_file(secret_file)
    secrets.add_token("token", token)
    secrets.add_key_file("key", key_file)
    secrets.add("password", b"pass\x00word-123")
    collected = Collected()
    collected.add("clean", "nothing to see: subject someone, mode 600, " + str(secret_file))
    collected.add("raw line", b"secret=" + base64.b64encode(secret))
    collected.add("decoded", b"secret=" + secret)
    collected.add("hex", f"secret={secret.hex()}")
    collected.add("signature", "sig " + token.rsplit(".", 1)[1])
    collected.add("pem", "A1b2" * 16)
    collected.add("repr", repr(b"pass\x00word-123"))
    found = {leak.split(":")[0] for leak in collected.leaks(secrets)}
    assert found == {"raw line", "decoded", "hex", "signature", "pem", "repr"}


def test_no_secret_is_shown_anywhere(tmp_path: Path) -> None:
    config = SandboxConfig(
        data_dir=tmp_path / "sb",
        bookies=BOOKIES,
        zookeeper_port=free_port(),
        bookie_port_base=free_port_range(BOOKIES),
        http_port_base=free_port_range(BOOKIES),
        dashboard_port=free_port(),
        autorecovery_nice=19,
        secure=True,
        start_timeout_s=120.0,  # auto-recovery at nice 19 on a loaded machine
    )
    collected = Collected()
    secrets = Secrets()
    ledger_password = os.urandom(9).hex().encode()
    wrong_password = os.urandom(9).hex().encode()
    with command_lines(collected), Sandbox(config) as box:
        security = box.security
        assert security is not None
        uri, env = box.metadata_uri, {**box.client_env, "BKEEPER_METADATA": box.metadata_uri}
        token = security.token_file.read_text().strip()
        ca = security.ca.cert
        secret_lines = security.token_secret_file.read_bytes().split()
        expired = make_token(secret_lines[-1], "sandbox", 60, now_s=time.time() - 3600)
        foreign = make_token(os.urandom(48), "sandbox", 3600)
        digest_user, _, digest_password = security.digest_file.read_text().strip().partition(":")
        wrong_digest = os.urandom(9).hex()
        malformed_digest = "no-colon-" + os.urandom(9).hex()

        secrets.add_secret_file(security.token_secret_file)
        secrets.add_token("client token", token)
        secrets.add_token("expired token", expired)
        secrets.add_token("foreign token", foreign)
        secrets.add("ZooKeeper digest password", digest_password)
        secrets.add("wrong ZooKeeper digest password", wrong_digest)
        secrets.add("malformed digest file's line", malformed_digest)
        secrets.add("ledger password", ledger_password)
        secrets.add("wrong ledger password", wrong_password)
        secrets.add_key_file("CA key", Path(security.ca.key))
        secrets.add_key_file("bookie key", Path(security.bookie.key))

        collected.add("printed export lines", "\n".join(export_lines(box.client_env)))

        # Used as users do.
        ok = bkeeper(collected, env, "shell", "simpletest", "--entries", "20")
        assert ok.returncode == 0, ok.stderr
        created = bkeeper(collected, env, "log", "create", "redaction")
        assert created.returncode == 0, created.stderr
        appended = bkeeper(collected, env, "log", "append", "redaction", "one", "two", "three")
        assert appended.returncode == 0, appended.stderr
        read = bkeeper(collected, env, "log", "read", "redaction")
        assert read.returncode == 0 and b"three" in read.stdout, read.stderr
        ledger_id = asyncio.run(_ledger_with_password(uri, ca, token, ledger_password))
        pw_env = {**env, "BKEEPER_LEDGER_PASSWORD": ledger_password.decode()}
        entries = bkeeper(collected, pw_env, "shell", "readledger", str(ledger_id))
        assert entries.returncode == 0 and b"entry 4" in entries.stdout, entries.stderr
        pw_file = _private_file(tmp_path / "ledger.password", ledger_password.decode() + "\n")
        from_file = bkeeper(
            collected, env, "shell", "readledger", str(ledger_id), "--password-file", pw_file
        )
        assert from_file.returncode == 0 and b"entry 4" in from_file.stdout, from_file.stderr
        # What the tools show of the cluster (at once).
        showing = [
            ("shell", "ledgermetadata", str(ledger_id), "--json"),
            ("shell", "ledgermetadata", str(ledger_id)),
            ("meta", "show", "--ledger", str(ledger_id)),
            ("shell", "listledgers", "--meta", "--json"),
            ("shell", "listbookies", "--json"),
            ("log", "list"),
        ]
        with ThreadPoolExecutor(len(showing)) as pool:
            for args, done in zip(
                showing, pool.map(lambda args: bkeeper(collected, env, *args), showing), strict=True
            ):
                assert done.returncode == 0, f"{args}: {done.stderr.decode()}"

        # Wrongly, on purpose (at once: each is a process of its own): each fails, in one line.
        wrong: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}
        for name, token_text in (("expired", expired), ("foreign", foreign)):
            token_file = _private_file(tmp_path / f"{name}.token", token_text + "\n")
            wrong[f"{name} token"] = (
                {**env, "BKEEPER_AUTH_TOKEN_FILE": token_file},
                ("shell", "simpletest", "--entries", "5"),
            )
        wrong["wrong ledger password"] = (
            {**env, "BKEEPER_LEDGER_PASSWORD": wrong_password.decode()},
            ("shell", "readledger", str(ledger_id)),
        )
        plain_uri = uri.split("?")[0]
        for name, content, mode in (
            ("wrong digest", f"{digest_user}:{wrong_digest}\n", 0o600),
            ("malformed digest", malformed_digest + "\n", 0o600),
            ("digest readable by others", f"{digest_user}:{digest_password}\n", 0o644),
        ):
            digest_file = _private_file(
                tmp_path / f"{name.replace(' ', '-')}.digest", content, mode
            )
            bad_uri = f"{plain_uri}?digest-file={digest_file}"
            wrong[name] = ({**env, "BKEEPER_METADATA": bad_uri}, ("shell", "listledgers"))
        with ThreadPoolExecutor(len(wrong)) as pool:
            running = {
                name: pool.submit(bkeeper, collected, run_env, *args)
                for name, (run_env, args) in wrong.items()
            }
            failures = {name: future.result() for name, future in running.items()}
        for name, failed in failures.items():
            assert failed.returncode != 0, f"{name}: {failed.stdout!r}"
            assert b"Traceback" not in failed.stderr, f"{name}: {failed.stderr.decode()}"
            assert failed.stderr.strip().splitlines()[-1].startswith(b"error: "), name

        # What the HTTP ports show, with the token.
        for index in range(BOOKIES):
            admin = box.admin_address(index)
            assert admin is not None
            base = f"http://{admin[0]}:{admin[1]}"
            for path in (
                "/metrics",
                "/api/v1/config/server_config",
                f"/api/v1/ledger/metadata?ledger_id={ledger_id}",
                "/api/v1/ledger/list?print_metadata=true",
                "/api/v1/bookie/list_bookie_info",
                "/api/v1/bookie/cluster_info",
            ):
                collected.add_http(f"bookie {index} {path}", base + path, token, ca)
        assert box.dashboard_url is not None
        dashboard = box.dashboard_url.rstrip("/")
        deadline = time.monotonic() + 20
        while True:  # the dashboard lists the ledger once it refreshed since its create
            listed = collected.add_http("dashboard /api/ledgers", f"{dashboard}/api/ledgers",
                                        token, ca)  # fmt: skip
            if str(ledger_id).encode() in listed or time.monotonic() > deadline:
                break
            time.sleep(1)
        for view in DASHBOARD_VIEWS:
            collected.add_http(f"dashboard /api/{view}", f"{dashboard}/api/{view}", token, ca)
    collected.add_logs(config.data_dir)

    for log in ("bookie-0.log", "autorecovery-0.log", "dashboard.log", "zookeeper/zookeeper.log"):
        assert collected.sources.get(f"log {log}"), f"{log}: not collected, or empty"
    sampled = [source for source in collected.sources if source.startswith("ps: ")]
    for kind in (" bookie ", " autorecovery ", " dashboard ", " log append ", " readledger "):
        assert any(kind in source for source in sampled), f"no process with {kind!r} seen"
    assert any("zookeeper" in source.lower() for source in sampled)
    leaks = collected.leaks(secrets)
    assert not leaks, "secrets shown:\n" + "\n".join(leaks)
    refused = "\n".join(f"{source}: {why}" for source, why in collected.refused.items())
    assert not refused, f"HTTP sources that did not answer 200:\n{refused}"
