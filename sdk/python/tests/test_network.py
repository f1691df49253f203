"""Egress rules through the SDK (sync and async) against the real server; nothing here reaches the
internet.

``egress`` in its rule form at create and in ``get_info().network``; ``set_network`` changing the
rules of a running sandbox live (a server on this host's address becomes reachable, then not);
the server's refusals (409 for a sandbox created without egress, 400 naming a bad entry, 403 for a
project key of a project without ``allow_egress``); ``network_log()`` listing a refused
connection with its reason. At the end, the request bodies the
client builds, and the shapes it refuses before sending anything.
"""

from __future__ import annotations

from typing import Any, Tuple

import pytest

from lizard import (
    AsyncCodeSandbox,
    AuthenticationError,
    CodeSandbox,
    ConflictError,
    InvalidArgumentError,
    NetworkLog,
    SandboxNetwork,
)
from lizard import _core

from .conftest import PROJECT, Server, greeter


def _probe(ip: str, port: int) -> str:
    """Python that sends an HTTP request to ip:port and prints ``ok`` (the greeter answered),
    ``403`` (the egress relay refused, saying why) or ``no``, then the seconds it took. The relay
    accepts every redirected connection and decides on its first bytes, so a bare ``connect()``
    would succeed either way."""
    return "\n".join(
        [
            "import socket, time",
            "t = time.monotonic()",
            "try:",
            f"    s = socket.create_connection(({ip!r}, {port}), timeout=5)",
            f"    s.sendall(b'GET / HTTP/1.0\\r\\nHost: {ip}\\r\\n\\r\\n')",
            "    data = b''",
            "    while True:",
            "        b = s.recv(4096)",
            "        if not b: break",
            "        data += b",
            "    r = 'ok' if data.startswith(b'hi') else '403' if b' 403 ' in data.split(b'\\n')[0] else 'no'",
            "except OSError: r = 'no'",
            "print(r, round(time.monotonic() - t, 2))",
        ]
    )


def _reach(sb: CodeSandbox, ip: str, port: int) -> Tuple[str, float]:
    ex = sb.run_code(_probe(ip, port))
    assert ex.error is None, ex.error
    r, secs = ex.stdout.split()
    return r, float(secs)


def test_rules_at_create_in_info_and_changed_live(lizard_server: Server) -> None:
    key = lizard_server.project_key("py-net", allow_egress=True)
    ip, port, listener = greeter()
    try:
        with CodeSandbox.create(api_key=key, egress={"allow": []}) as sb:
            assert sb.get_info().network == SandboxNetwork(egress={"allow": []})
            assert _reach(sb, ip, port)[0] == "403"

            # Opened live: an address rule opens a host address.
            info = sb.set_network([f"{ip}:{port}"])
            assert info.network.egress == {"allow": [f"{ip}:{port}"]}
            assert sb.get_info().network.egress == {"allow": [f"{ip}:{port}"]}
            assert _reach(sb, ip, port)[0] == "ok"

            # Deny beats allow.
            info = sb.set_network({"allow": [f"{ip}/32"], "deny": [f"{ip}:{port}"]})
            assert info.network.egress == {"allow": [f"{ip}/32"], "deny": [f"{ip}:{port}"]}
            assert _reach(sb, ip, port)[0] == "403"

            # Only deny: everything public but that — this host's address is not public.
            assert sb.set_network({"deny": ["evil.example.com"]}).network.egress == {"deny": ["evil.example.com"]}
            assert _reach(sb, ip, port)[0] == "403"

            # "none" is kept as {"allow": []}; "all" is the internet, not this host.
            assert sb.set_network("none").network.egress == {"allow": []}
            assert sb.set_network("all").network.egress == "all"
            assert _reach(sb, ip, port)[0] == "403"
    finally:
        listener.close()


def test_the_server_refuses_409_400_403(lizard_server: Server) -> None:
    with CodeSandbox.create(project=PROJECT) as closed, CodeSandbox.create(project=PROJECT, egress=["example.com"]) as open_:
        assert closed.get_info().network.egress == "none"
        with pytest.raises(ConflictError) as e409:
            closed.set_network({"allow": ["example.com"]})
        assert e409.value.status == 409

        with pytest.raises(InvalidArgumentError) as e400:
            open_.set_network({"allow": ["a b.com"]})
        assert e400.value.status == 400 and "a b.com" in e400.value.message
        with pytest.raises(InvalidArgumentError) as e400:
            open_.set_network({"deny": ["10.0.0.0/99"]})
        assert "10.0.0.0/99" in e400.value.message
        with pytest.raises(InvalidArgumentError) as e400:
            CodeSandbox.create(project=PROJECT, egress={"allow": ["example.com:0"]})
        assert e400.value.status == 400 and "example.com:0" in e400.value.message
        # The failed calls changed nothing.
        assert open_.get_info().network.egress == {"allow": ["example.com"]}

    # A project key of a project without allow_egress: nothing that opens; closing is fine.
    key = lizard_server.project_key("py-net-closed", allow_egress=False)
    with CodeSandbox.create(project="py-net-closed", egress={"allow": []}) as sb:
        mine = CodeSandbox.connect(sb.sandbox_id, api_key=key)
        try:
            for egress in ("all", ["example.com"], {"deny": ["example.com"]}):
                with pytest.raises(AuthenticationError) as e403:
                    mine.set_network(egress)
                assert e403.value.status == 403 and e403.value.code == "permission_denied"
            assert mine.set_network("none").network.egress == {"allow": []}
        finally:
            mine.close()


def test_a_refused_connection_is_logged(lizard_server: Server) -> None:
    with CodeSandbox.create(project=PROJECT, egress={"allow": ["example.com"]}) as sb:
        before = sb.network_log()
        assert isinstance(before, NetworkLog) and before.sandbox_id == sb.sandbox_id
        assert (before.egress.connections, before.egress.refused) == (0, 0)

        r, secs = _reach(sb, "203.0.113.9", 80)
        assert r == "403"
        assert secs < 2, f"refused after {secs} s, not at once"

        log = sb.network_log()
        assert log.egress.refused >= 1 and log.egress.connections == 0, log
        hits = [x for x in log.refused if "203.0.113.9" in x.destination]
        assert hits, log.refused
        assert hits[0].method == "connect" and hits[0].reason, hits[0]
        assert hits[0].at_ms > 0


@pytest.mark.anyio
async def test_async_set_network_and_log(lizard_server: Server) -> None:
    async with await AsyncCodeSandbox.create(project=PROJECT, egress={"allow": []}) as sb:
        info = await sb.set_network({"allow": ["*.example.com"], "deny": ["bad.example.com"]})
        assert info.network.egress == {"allow": ["*.example.com"], "deny": ["bad.example.com"]}
        assert (await sb.get_info()).network.egress == info.network.egress
        ex = await sb.run_code(_probe("203.0.113.9", 80))
        assert ex.stdout.split()[0] == "403", ex
        log = await sb.network_log()
        assert any(x.method == "connect" and "203.0.113.9" in x.destination for x in log.refused), log
        with pytest.raises(InvalidArgumentError):
            await sb.set_network({"allow": ["a b.com"]})
    async with await AsyncCodeSandbox.create(project=PROJECT) as closed:
        with pytest.raises(ConflictError):
            await closed.set_network("all")


@pytest.mark.parametrize(
    "given,wire",
    [
        ("none", "none"),
        ("all", "all"),
        (["a.com", "1.2.3.4:443"], {"allow": ["a.com", "1.2.3.4:443"]}),
        (("a.com",), {"allow": ["a.com"]}),
        ({"allow": ["*.a.com"], "deny": ["b.a.com"]}, {"allow": ["*.a.com"], "deny": ["b.a.com"]}),
        ({"deny": ["b.com"]}, {"deny": ["b.com"]}),
        ({"allow": []}, {"allow": []}),
    ],
)
def test_egress_body_forms(given: Any, wire: Any) -> None:
    assert _core.egress_body(given) == wire
    assert _core.set_network_request("sb_1", given).json == {"egress": wire}
    assert _core.create_request(
        project=None, template=None, timeout_ms=None, metadata=None, envs=None, limits=None, egress=given
    ).json == {"network": {"egress": wire}}


@pytest.mark.parametrize("bad", ["some", 7, {"alow": []}, {"allow": "a.com"}, {"deny": [1]}, None])
def test_bad_egress_shapes_send_nothing(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        _core.set_network_request("sb_1", bad)


def test_network_log_parses() -> None:
    log = NetworkLog.from_wire(
        {
            "sandbox_id": "sb_1",
            "mirror": {"requests": 3, "cache_hits": 1},
            "egress": {"connections": 2, "bytes_out": 10, "bytes_in": 20, "refused": 1},
            "refused": [
                {"at_ms": 5, "method": "dns", "destination": "x.com", "reason": "not allowed"},
                {"at_ms": 6, "method": "GET", "destination": "evil.example/"},
            ],
        }
    )
    assert log.mirror.requests == 3 and log.mirror.cache_misses == 0
    assert (log.egress.connections, log.egress.bytes_out, log.egress.bytes_in, log.egress.refused) == (2, 10, 20, 1)
    assert log.refused[0].reason == "not allowed" and log.refused[1].reason is None
    # An older server without the egress part still parses.
    assert NetworkLog.from_wire({"sandbox_id": "s", "mirror": {}, "refused": []}).egress.connections == 0


def test_public_ports_and_auto_resume(lizard_server: Server) -> None:
    """``public_ports`` opens a port by host name without a token, ``auto_resume`` resumes a
    paused sandbox on a request; both show in ``network`` and change live with ``set_network``."""
    import httpx

    sb = CodeSandbox.create(project=PROJECT, public_ports=True, auto_resume=True)
    try:
        net = sb.get_info().network
        assert (net.public_ports, net.auto_resume) == (True, True)
        sb.run_code(
            "import http.server, threading\n"
            "srv = http.server.ThreadingHTTPServer(('127.0.0.1', 8000), "
            "http.server.SimpleHTTPRequestHandler)\n"
            "threading.Thread(target=srv.serve_forever, daemon=True).start()"
        )
        port = lizard_server.url.rsplit(":", 1)[1]
        host = f"8000-{sb.sandbox_id}.localhost:{port}"
        assert httpx.get(lizard_server.url + "/", headers={"Host": host}).status_code == 200
        sb.pause()
        assert sb.run_code("srv.server_address[1]").text == "8000"
        assert sb.get_info().state == "running"
        info = sb.set_network(public_ports=False, auto_resume=False)
        assert (info.network.public_ports, info.network.auto_resume) == (False, False)
        assert httpx.get(lizard_server.url + "/", headers={"Host": host}).status_code == 401
        sb.pause()
        with pytest.raises(ConflictError):
            sb.run_code("1")
        with pytest.raises(InvalidArgumentError):
            CodeSandbox.create(project=PROJECT, auto_resume="yes")  # type: ignore[arg-type]
    finally:
        sb.kill()
