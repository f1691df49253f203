"""Secrets and header injection through the SDK (sync and async) against the real server. No HTTPS
upstream here: crates/lizard/tests/secrets.rs covers the relay adding the header.

``Secrets.set/list/delete`` (no answer holds a value, a replace is not a create, 400 for a bad name
or value without showing it, 404 for a project the key cannot see); ``inject`` at create (400
naming an unknown secret or a host the egress does not allow; a valid rule's template, not the
value, in ``get_info().network.inject``); ``set_network`` keeping the part it is not given. At the
end, the request bodies the client builds and the shapes it refuses before sending anything.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from lizard import (
    AsyncCodeSandbox,
    AsyncSecrets,
    CodeSandbox,
    InvalidArgumentError,
    NotFoundError,
    SandboxNetwork,
    SecretInfo,
    Secrets,
)
from lizard import _core

from .conftest import Server

VALUE = "sk-py-77d1e4b0a-never-in-an-answer"


def _rule(host: str, name: str) -> dict:
    return {"host": host, "headers": {"Authorization": "Bearer ${secret:" + name + "}"}}


def test_set_list_replace_delete_without_values(lizard_server: Server) -> None:
    key = lizard_server.project_key("py-sec")
    first = Secrets.set("py-sec", "api_token", VALUE)
    assert isinstance(first, SecretInfo)
    assert (first.project, first.name, first.created) == ("py-sec", "api_token", True)
    assert VALUE not in repr(first)
    time.sleep(0.005)
    again = Secrets.set("py-sec", "api_token", VALUE + "-2", api_key=key)
    assert again.created is False
    assert again.created_at_ms == first.created_at_ms and again.updated_at_ms >= first.updated_at_ms
    Secrets.set("py-sec", "other-1", "x")

    listed = Secrets.list("py-sec", api_key=key)
    assert sorted(s.name for s in listed) == ["api_token", "other-1"]
    assert all(s.created is None for s in listed)
    assert VALUE not in repr(listed)
    raw = lizard_server.api("GET", "/v1/projects/py-sec/secrets").text
    assert VALUE not in raw and '"value"' not in raw, raw

    assert Secrets.delete("py-sec", "other-1", api_key=key) is True
    assert Secrets.delete("py-sec", "other-1") is False
    assert [s.name for s in Secrets.list("py-sec")] == ["api_token"]


def test_bad_names_values_and_other_projects(lizard_server: Server) -> None:
    lizard_server.project_key("py-sec-bad")
    key = lizard_server.project_key("py-sec-other")
    for name in ["", "a b", "a/b", "x" * 65]:
        with pytest.raises(InvalidArgumentError) as e:
            Secrets.set("py-sec-bad", name, "v")
        assert e.value.status == 400, name
    with pytest.raises(InvalidArgumentError, match="a b"):
        Secrets.set("py-sec-bad", "a b", "v")
    for value in ["", "line\r\nX-Evil: 1", "tab\there", "x" * 8193]:
        with pytest.raises(InvalidArgumentError) as e:
            Secrets.set("py-sec-bad", "ok", value)
        assert e.value.status == 400
        assert not value or value not in str(e.value)
    assert Secrets.list("py-sec-bad") == []
    # A project key sees its own project only: another is a 404, as is one that does not exist.
    with pytest.raises(NotFoundError):
        Secrets.list("py-sec-bad", api_key=key)
    with pytest.raises(NotFoundError):
        Secrets.set("py-sec-bad", "n", "v", api_key=key)
    with pytest.raises(NotFoundError):
        Secrets.delete("py-sec-bad", "n", api_key=key)
    with pytest.raises(NotFoundError):
        Secrets.list("py-sec-nope")


def test_inject_at_create_and_set_network(lizard_server: Server) -> None:
    lizard_server.project_key("py-inj")
    Secrets.set("py-inj", "tok", VALUE)
    with pytest.raises(InvalidArgumentError, match="missing_one") as e:
        CodeSandbox.create(project="py-inj", egress=["api.example.com"], inject=[_rule("api.example.com", "missing_one")])
    assert e.value.status == 400
    with pytest.raises(InvalidArgumentError, match=r"api\.example\.com") as e:
        CodeSandbox.create(project="py-inj", egress=["pypi.org"], inject=[_rule("api.example.com", "tok")])
    assert VALUE not in str(e.value)
    with pytest.raises(InvalidArgumentError):
        CodeSandbox.create(project="py-inj", egress=["api.example.com"],
                           inject=[{"host": "api.example.com", "headers": {"Host": "x"}}])

    want = [
        {"host": "api.example.com", "headers": {"Authorization": "Bearer ${secret:tok}"}},
        {"host": "*.example.org:8443", "headers": {"X-Key": "$${secret:tok}${secret:tok}"}},
    ]
    with CodeSandbox.create(project="py-inj", egress=["api.example.com", "*.example.org"], inject=want) as sb:
        info = sb.get_info()
        assert info.network == SandboxNetwork(egress={"allow": ["api.example.com", "*.example.org"]}, inject=want)
        assert VALUE not in repr(info)
        ex = sb.run_code(f"import os; print({json.dumps(VALUE)} in ''.join(os.environ.values()))")
        assert ex.stdout.strip() == "False", ex

        # What is not given is kept; inject=[] removes the rules.
        n = sb.set_network(["api.example.com", "*.example.org", "pypi.org"]).network
        assert n.inject == want and n.egress == {"allow": ["api.example.com", "*.example.org", "pypi.org"]}
        n = sb.set_network(inject=[want[0]]).network
        assert n.inject == [want[0]] and n.egress == {"allow": ["api.example.com", "*.example.org", "pypi.org"]}
        with pytest.raises(InvalidArgumentError, match="nope_secret"):
            sb.set_network(inject=[_rule("pypi.org", "nope_secret")])
        assert sb.get_info().network.inject == [want[0]]
        n = sb.set_network(inject=[]).network
        assert n.inject == [] and n.egress == {"allow": ["api.example.com", "*.example.org", "pypi.org"]}


@pytest.mark.anyio
async def test_async_secrets_and_inject(lizard_server: Server) -> None:
    lizard_server.project_key("py-inj-async")
    s = await AsyncSecrets.set("py-inj-async", "tok", VALUE)
    assert s.created is True
    assert (await AsyncSecrets.set("py-inj-async", "tok", VALUE)).created is False
    assert [x.name for x in await AsyncSecrets.list("py-inj-async")] == ["tok"]
    with pytest.raises(InvalidArgumentError, match="unknown_x"):
        await AsyncCodeSandbox.create(project="py-inj-async", egress=["api.example.com"],
                                      inject=[_rule("api.example.com", "unknown_x")])
    async with await AsyncCodeSandbox.create(
        project="py-inj-async", egress={"allow": ["api.example.com"]}, inject=[_rule("api.example.com", "tok")]
    ) as sb:
        assert (await sb.get_info()).network.inject == [_rule("api.example.com", "tok")]
        info = await sb.set_network({"allow": ["api.example.com", "pypi.org"]})
        assert info.network.inject == [_rule("api.example.com", "tok")]
        info = await sb.set_network(inject=[])
        assert info.network.inject == [] and info.network.egress == {"allow": ["api.example.com", "pypi.org"]}
    assert await AsyncSecrets.delete("py-inj-async", "tok") is True
    assert await AsyncSecrets.delete("py-inj-async", "tok") is False


def test_inject_bodies() -> None:
    rule = _rule("a.com", "t")
    assert _core.create_request(
        project=None, template=None, timeout_ms=None, metadata=None, envs=None, limits=None,
        egress=["a.com"], inject=[rule],
    ).json == {"network": {"egress": {"allow": ["a.com"]}, "inject": [rule]}}
    # The server keeps the part not given: only what is given is sent.
    assert _core.set_network_request("sb_1", "all", None).json == {"egress": "all"}
    assert _core.set_network_request("sb_1", None, []).json == {"inject": []}
    assert SandboxNetwork.from_wire({"egress": "all"}).inject == []
    assert SandboxNetwork.from_wire({"egress": "all", "inject": [rule]}).inject == [rule]
    assert _core.secret_set_request("p q", "n", "v") == _core.Req(
        "POST", "/v1/projects/p%20q/secrets", json={"name": "n", "value": "v"}
    )
    assert _core.secret_delete_request("p", "a/b").path == "/v1/projects/p/secrets/a%2Fb"


@pytest.mark.parametrize(
    "bad",
    ["x", [{"host": "a.com"}], [{"host": "a.com", "headers": ["A"]}], [{"host": 1, "headers": {}}],
     [{"host": "a.com", "headers": {"A": 1}}], [{"host": "a.com", "headers": {}, "port": 1}]],
)
def test_bad_inject_shapes_send_nothing(bad: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        _core.inject_body(bad)
    with pytest.raises(InvalidArgumentError):
        _core.create_request(project=None, template=None, timeout_ms=None, metadata=None, envs=None,
                             limits=None, egress="all", inject=bad)
    with pytest.raises(InvalidArgumentError):
        _core.check_set_network(None, bad)


def test_inject_needs_egress_and_secret_args_are_checked() -> None:
    with pytest.raises(InvalidArgumentError, match="egress"):
        _core.create_request(project=None, template=None, timeout_ms=None, metadata=None, envs=None,
                             limits=None, inject=[_rule("a.com", "t")])
    with pytest.raises(InvalidArgumentError):
        _core.check_set_network(None, None)
    for bad in [("", "n", "v"), ("p", "n", 5), ("p", None, "v")]:
        with pytest.raises(InvalidArgumentError):
            _core.secret_set_request(*bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        _core.secret_delete_request("p", "")
