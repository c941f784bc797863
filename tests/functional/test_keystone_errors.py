"""Keystone failures named by cause and option (agent/placement/ks_errors.py).

A small keystone stand-in on loopback answers version discovery and
``POST /v3/auth/tokens`` as keystone does (Identity API v3: 401 with an
error body, or 201 with ``X-Subject-Token`` and a token whose catalog has no
placement endpoint); the agent's real client (keystoneauth1 password
plugin, nova's ``[placement]`` block) talks to it.
"""

from __future__ import annotations

import pytest

from agent.conf import config as agent_config
from agent.placement.errors import PlacementUnavailable
from agent.placement.session import client_from_conf
from tests.helpers.keystone import keystone
from tests.helpers.net import free_port


def client_for(tmp_path, auth_url: str):
    path = tmp_path / "nova.conf"
    path.write_text(
        f"[DEFAULT]\nstate_path = {tmp_path}\n[placement]\nauth_type = password\n"
        f"auth_url = {auth_url}\nusername = placement\npassword = secret\n"
        "user_domain_name = Default\nproject_name = service\nproject_domain_name = Default\n"
        "region_name = RegionOne\nrequest_retries = 0\n"
    )
    return client_from_conf(agent_config.load([str(path)]))


@pytest.mark.parametrize(
    ("mode", "said"),
    [
        ("401", "refused the credentials (401: wrong password, unknown user"),
        (
            "catalog",
            "no placement endpoint in Keystone's catalog at http://127.0.0.1:",
        ),
    ],
)
def test_keystone_answers_are_named(tmp_path, mode, said):
    server = keystone(mode)
    try:
        client = client_for(tmp_path, f"http://127.0.0.1:{server.server_port}/identity")
        with pytest.raises(PlacementUnavailable) as err:
            client.get("/resource_providers")
    finally:
        server.shutdown()
    assert said in str(err.value)
    assert "secret" not in str(err.value)


def test_unreachable_keystone_is_named(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/identity"
    with pytest.raises(PlacementUnavailable) as err:
        client_for(tmp_path, url).get("/resource_providers")
    assert f"Keystone at {url} is unreachable" in str(err.value)
    assert "check [placement] auth_url" in str(err.value)


def test_a_refused_token_is_fetched_again_once_and_the_request_sent_again(tmp_path):
    """The client's own transport (agent/placement/transport.py) keeps keystoneauth's rules:
    the endpoint from the catalog (with its path), the token from the plugin, and a 401
    drops the token, fetches a new one and sends once more."""
    server = keystone("placement")
    try:
        client = client_for(tmp_path, f"http://127.0.0.1:{server.server_port}/identity")
        assert client.get("/resource_providers") == {"resource_providers": []}
        assert server.tokens == ["tok-1"]
        server.revoked.add("tok-1")
        assert client.get("/resource_providers", params={"name": "a b"}) == {
            "resource_providers": []
        }
        assert server.tokens == ["tok-1", "tok-2"]
        assert server.seen[-2:] == [
            ("/placement/resource_providers?name=a+b", "tok-1"),
            ("/placement/resource_providers?name=a+b", "tok-2"),
        ]
        assert client.transport._route is not None  # the fast path, not Adapter.request
    finally:
        server.shutdown()
