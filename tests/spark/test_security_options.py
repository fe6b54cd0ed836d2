"""The Spark data source's security options (pure, no Spark): ``tls.*`` and ``auth.tokenFile``
name files, the variables every ``bkeeper`` command reads fill in what they leave out (and
``BKEEPER_METADATA`` the metadata URI), only paths travel to executors, and the files are
read where the client is made, with errors naming the option or variable."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from bkeeper.client.credentials import ClientCredentials
from bkeeper.common.errors import ConfigError
from bkeeper.spark.options import CREDENTIALS, client_config, sink_options, source_options
from bkeeper.testing.certs import CertFiles, make_ca, make_cert

URI = "zk://127.0.0.1:2181/ledgers"
READ = {"metadata": URI, "log": "events"}
WRITE = {"metadata": URI, "log": "events"}
TOKEN = "not-a-real-token.but-ascii"


def credentials_of(client: tuple[tuple[str, object], ...]) -> ClientCredentials | None:
    found = dict(client).get(CREDENTIALS)
    assert found is None or isinstance(found, ClientCredentials)
    return found


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, subprocesses: None) -> dict[str, str]:
    """A CA, a client certificate and key (made by ``openssl``: a process), a token file."""
    where = tmp_path_factory.mktemp("creds")
    ca = make_ca(where, "ca")
    client: CertFiles = make_cert(where, ca, "client")
    token = where / "client.token"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    bad_pem = where / "bad.pem"
    bad_pem.write_text("not a certificate\n")
    return {
        "ca": ca.cert,
        "cert": client.cert,
        "key": client.key,
        "token": str(token),
        "bad_pem": str(bad_pem),
    }


def test_options_name_the_files_and_only_paths_go_to_executors(files: dict[str, str]) -> None:
    options = {**READ, "tls.caFile": files["ca"], "auth.tokenfile": files["token"]}
    parsed = source_options(options, streaming=False, environ={})
    found = credentials_of(parsed.client)
    assert found is not None
    assert (found.tls_ca_file, found.auth_token_file) == (files["ca"], files["token"])
    assert TOKEN.encode() not in pickle.dumps(parsed)
    config = client_config(parsed.client)  # on the executor: the files are read here
    assert config.tls is not None and config.tls.ca_file == files["ca"]
    assert config.tls.verify_hostname
    assert config.auth is not None and config.auth.token == TOKEN


def test_mutual_tls_and_no_hostname_check_for_writes(files: dict[str, str]) -> None:
    options = {
        **WRITE,
        "tls.caFile": files["ca"],
        "tls.certFile": files["cert"],
        "tls.keyFile": files["key"],
        "tls.hostnameCheck": "false",
    }
    config = client_config(sink_options(options, environ={}).client)
    assert config.tls is not None and config.auth is None
    assert (config.tls.cert_file, config.tls.key_file) == (files["cert"], files["key"])
    assert not config.tls.verify_hostname


def test_the_environment_fills_in_what_the_options_leave_out(files: dict[str, str]) -> None:
    environ = {
        "BKEEPER_METADATA": URI + "?digest-file=/somewhere/zk.digest",
        "BKEEPER_TLS_CA": files["ca"],
        "BKEEPER_AUTH_TOKEN_FILE": files["token"],
        "BKEEPER_TLS_NO_HOSTNAME_CHECK": "1",
    }
    parsed = source_options({"log": "events"}, streaming=False, environ=environ)
    assert parsed.metadata == environ["BKEEPER_METADATA"]
    config = client_config(parsed.client)
    assert config.tls is not None and config.tls.ca_file == files["ca"]
    assert not config.tls.verify_hostname
    assert config.auth is not None and config.auth.token == TOKEN
    written = sink_options({"log": "events"}, environ=environ)
    assert written.metadata == environ["BKEEPER_METADATA"]
    assert credentials_of(written.client) == credentials_of(parsed.client)


def test_an_option_wins_over_its_variable_and_an_empty_one_turns_it_off(
    files: dict[str, str],
) -> None:
    environ = {
        "BKEEPER_METADATA": "zk://10.0.0.1:2181/other",
        "BKEEPER_TLS_CA": "/elsewhere/ca.pem",
        "BKEEPER_AUTH_TOKEN_FILE": files["token"],
    }
    options = {**READ, "tls.caFile": files["ca"], "auth.tokenFile": ""}
    parsed = source_options(options, streaming=False, environ=environ)
    assert parsed.metadata == URI
    config = client_config(parsed.client)
    assert config.tls is not None and config.tls.ca_file == files["ca"]
    assert config.auth is None


def test_without_options_or_variables_the_client_settings_are_unchanged() -> None:
    parsed = source_options({**READ, "client.add_timeout_ms": "5000"}, streaming=False, environ={})
    assert parsed.client == (("add_timeout_ms", 5000),)
    assert sink_options(WRITE, environ={}).client == ()


@pytest.mark.parametrize(
    ("options", "environ", "message"),
    [
        ({"log": "a"}, {}, "option metadata is required (or BKEEPER_METADATA"),
        ({"log": "a"}, {"BKEEPER_METADATA": "http://x"}, "BKEEPER_METADATA (the driver's"),
        (
            {**READ, "tls.keyFile": "/k.key"},
            {},
            "option tls.keyFile is set but no client certificate is",
        ),
        ({**READ, "tls.keyFile": "/k.key"}, {"BKEEPER_TLS_CERT": "/c.pem"}, None),
        ({**READ, "tls.hostnameCheck": "maybe"}, {}, "option tls.hostnameCheck: 'maybe' is not"),
        (READ, {"BKEEPER_TLS_NO_HOSTNAME_CHECK": "maybe"}, "BKEEPER_TLS_NO_HOSTNAME_CHECK: "),
        (
            {**READ, "tls.cafil": "/ca.pem"},
            {},
            "unknown option tls.caFil: did you mean tls.caFile?",
        ),
        ({**READ, "kafka.ssl.truststore.location": "/x"}, {}, "bkeeper's is tls.caFile"),
        ({**READ, "client.tls": "x"}, {}, "option client.tls: set TLS and the token with"),
    ],
)
def test_bad_security_options_name_the_option(
    options: dict[str, str], environ: dict[str, str], message: str | None
) -> None:
    if message is None:
        source_options(options, streaming=False, environ=environ)
        return
    with pytest.raises(ConfigError) as caught:
        source_options(options, streaming=False, environ=environ)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("options", "environ", "message"),
    [
        ({"auth.tokenFile": "/nowhere/t"}, {}, "option auth.tokenFile /nowhere/t: No such file"),
        ({}, {"BKEEPER_AUTH_TOKEN_FILE": "/nowhere/t"}, "BKEEPER_AUTH_TOKEN_FILE /nowhere/t: No"),
        ({"tls.caFile": "/nowhere/ca.pem"}, {}, "option tls.caFile /nowhere/ca.pem: no such file"),
        ({"tls.caFile": "{bad_pem}"}, {}, "option tls.caFile: cannot load"),
        ({"tls.certFile": "{bad_pem}"}, {}, "option tls.certFile: cannot load"),
    ],
)
def test_files_are_read_where_the_client_is_made_and_errors_name_the_option(
    files: dict[str, str], options: dict[str, str], environ: dict[str, str], message: str
) -> None:
    options = {k: v.format(bad_pem=files["bad_pem"]) for k, v in options.items()}
    parsed = source_options({**READ, **options}, streaming=False, environ=environ)  # driver: ok
    with pytest.raises(ConfigError) as caught:
        client_config(parsed.client)
    assert message in str(caught.value)


def test_a_token_file_readable_by_others_is_refused_without_showing_it(
    tmp_path: Path,
) -> None:
    token = tmp_path / "open.token"
    token.write_text(TOKEN)
    token.chmod(0o644)
    parsed = source_options({**READ, "auth.tokenFile": str(token)}, streaming=False, environ={})
    with pytest.raises(ConfigError) as caught:
        client_config(parsed.client)
    assert "option auth.tokenFile" in str(caught.value) and "chmod 600" in str(caught.value)
    assert TOKEN not in str(caught.value)
