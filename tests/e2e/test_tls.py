"""TLS, mutual TLS and basic auth on a real loopback listener, from an exporter-toolkit web config.

Certificates are made by the test with the openssl CLI: a throwaway CA, a server certificate
for 127.0.0.1 and a client certificate.
"""

from __future__ import annotations

import base64
import http.client as httpclient
import json
import ssl
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_tool
from tests.helpers import wait_until
from warptd.config import SettingsError
from warptd.daemon import Daemon

bcrypt = pytest.importorskip("bcrypt")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run([require_tool("openssl"), *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=warptd test CA",
        cwd=d,
    )
    for name, ext in (
        ("server", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("client", "extendedKeyUsage=clientAuth"),
    ):
        (d / f"{name}.ext").write_text(ext + "\n")
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.crt",
            "-days",
            "1",
            "-extfile",
            f"{name}.ext",
            cwd=d,
        )
    return d


def _daemon(settings, tmp_path: Path, config: dict) -> Daemon:
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(config))
    settings.backends = ["cpu"]
    settings.web_config_file = path
    daemon = Daemon(settings)
    daemon.start()
    return daemon


def _get(
    port: int, context: ssl.SSLContext | None, headers: dict[str, str] | None = None
) -> tuple[int, dict, bytes]:
    conn = (
        httpclient.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
        if context is not None
        else httpclient.HTTPConnection("127.0.0.1", port, timeout=10)
    )
    try:
        conn.request("GET", "/metrics", headers=headers or {})
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _client(pki: Path, with_cert: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if with_cert:
        context.load_cert_chain(pki / "client.crt", pki / "client.key")
    return context


@pytest.mark.slow
def test_tls_serves_metrics_and_refuses_plain_http(settings, tmp_path, pki):
    tls = {"cert_file": str(pki / "server.crt"), "key_file": str(pki / "server.key")}
    daemon = _daemon(settings, tmp_path, {"tls_server_config": tls})
    try:
        assert wait_until(lambda: _get(daemon.port, _client(pki))[0] == 200)
        status, _, body = _get(daemon.port, _client(pki))
        assert status == 200 and b"warptd_device_up" in body  # verified against our CA and 127.0.0.1
        with pytest.raises((httpclient.HTTPException, ConnectionError, OSError)):
            _get(daemon.port, None)  # plain HTTP to the TLS port gets no HTTP answer
        assert _get(daemon.port, _client(pki))[0] == 200  # and does not wedge the listener
    finally:
        daemon.stop()


@pytest.mark.slow
def test_mutual_tls_requires_a_client_certificate(settings, tmp_path, pki):
    tls = {
        "cert_file": str(pki / "server.crt"),
        "key_file": str(pki / "server.key"),
        "client_auth_type": "RequireAndVerifyClientCert",
        "client_ca_file": str(pki / "ca.crt"),
    }
    daemon = _daemon(settings, tmp_path, {"tls_server_config": tls})
    try:
        assert _get(daemon.port, _client(pki, with_cert=True))[0] == 200
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            _get(daemon.port, _client(pki))
    finally:
        daemon.stop()


@pytest.mark.slow
def test_basic_auth_on_every_endpoint_with_bcrypt_users(settings, tmp_path, pki):
    hashed = bcrypt.hashpw(b"scrape-me", bcrypt.gensalt(rounds=4)).decode()
    tls = {"cert_file": str(pki / "server.crt"), "key_file": str(pki / "server.key")}
    daemon = _daemon(
        settings, tmp_path, {"tls_server_config": tls, "basic_auth_users": {"prometheus": hashed}}
    )
    good = {"Authorization": "Basic " + base64.b64encode(b"prometheus:scrape-me").decode()}
    bad = {"Authorization": "Basic " + base64.b64encode(b"prometheus:guess").decode()}
    try:
        status, headers, body = _get(daemon.port, _client(pki))
        assert status == 401 and headers["www-authenticate"].startswith("Basic") and json.loads(body)["error"]
        assert _get(daemon.port, _client(pki), bad)[0] == 401
        assert _get(daemon.port, _client(pki), good)[0] == 200
        assert _get(daemon.port, _client(pki), good)[0] == 200  # served from the check cache
    finally:
        daemon.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"tls_server_config": {"cert_file": "/nonexistent.crt", "key_file": "/nonexistent.key"}}, "TLS"),
        (
            {"tls_server_config": {"cert_file": "a", "key_file": "b", "client_auth_type": "Sometimes"}},
            "client_auth_type",
        ),
        ({"basic_auth_users": {"u": "x"}, "tls": {}}, "tls"),
    ],
)
def test_bad_web_config_fails_the_start_with_one_line(settings, tmp_path, config, message):
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(config))
    settings.web_config_file = path
    with pytest.raises(SettingsError) as info:
        Daemon(settings)
    assert message in str(info.value) and "\n" not in str(info.value)


@pytest.mark.slow
def test_basic_auth_survives_hostile_input(settings, tmp_path, pki):
    from warptd.http.webconfig import BasicAuth

    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    auth = BasicAuth({"u": hashed})
    long = "Basic " + base64.b64encode(b"u:" + b"x" * 200).decode()  # over bcrypt's 72 bytes
    assert auth.check(long) is False
    assert auth.check("Basic !!!notbase64") is False
    assert auth.check("Basic " + base64.b64encode(b"nobody:pw").decode()) is False
    assert auth.check("Basic " + base64.b64encode(b"u:pw").decode()) is True


@pytest.mark.slow
@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"basic_auth_users": {"u": "not-a-bcrypt-hash"}}, "bcrypt"),
        ({"tls_server_config": {"client_auth_type": "RequestClientCert"}}, "needs client_ca_file"),
        ({"tls_server_config": {"client_auth_type": "RequireAnyClientCert"}}, "needs client_ca_file"),
    ],
)
def test_configs_that_would_lock_everyone_out_are_refused(settings, tmp_path, pki, config, message):
    if "tls_server_config" in config:
        config["tls_server_config"].update(
            cert_file=str(pki / "server.crt"), key_file=str(pki / "server.key")
        )
    path = tmp_path / "web.yml"
    path.write_text(yaml.safe_dump(config))
    settings.web_config_file = path
    with pytest.raises(SettingsError, match=message):
        Daemon(settings)


@pytest.mark.slow
def test_tls_clients_that_never_handshake_do_not_delay_scrapes(pki):
    """200 sockets that never start their handshake and 50 that stop halfway through the ClientHello:
    HTTPS scrapes meanwhile are served at once, and the stalled ones hold no connection slot."""
    import socket
    import time

    from warptd.http.app import Response, Router
    from warptd.http.limits import HttpLimits, raise_nofile_limit
    from warptd.http.server import WarptdHTTPServer
    from warptd.http.webconfig import TLSServerConfig, ssl_context

    raise_nofile_limit()
    router = Router()
    router.add("GET", "/metrics", lambda _: Response(200, b"up 1\n", "text/plain"))
    tls = ssl_context(TLSServerConfig(cert_file=pki / "server.crt", key_file=pki / "server.key"))
    limits = HttpLimits(header_timeout=2.0, max_connections=100)
    server = WarptdHTTPServer("127.0.0.1", 0, router, limits=limits, tls=tls)
    server.start()
    stalled = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(250)]
    try:
        for conn in stalled[200:]:
            conn.sendall(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")  # a ClientHello's first bytes
        context = _client(pki)
        for _ in range(20):
            started = time.monotonic()
            assert _get(server.port, context)[0] == 200
            assert time.monotonic() - started < 1.0
        assert wait_until(lambda: server.connections == 0, timeout=2)  # 250 stalled, none holds a slot
        stalled[0].settimeout(limits.header_timeout + 5)
        assert stalled[0].recv(1) == b""  # closed by the handshake timeout
    finally:
        for conn in stalled:
            conn.close()
        server.server_close()
