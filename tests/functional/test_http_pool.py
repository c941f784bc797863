"""The HTTP connection pool holds as many connections as requests may be in flight.

``requests`` keeps 10 connections per host by default; with more requests in
flight (``[placement] max_concurrent_requests``) urllib3 closes every
connection beyond 10 as it comes back ("Connection pool is full, discarding
connection") and opens new ones on the next burst. Against a real served
Placement, 16 at once.
"""

from __future__ import annotations

import logging
import socket

import requests
from keystoneauth1.session import TCPKeepAliveAdapter
from requests.adapters import HTTPAdapter

from agent.placement.http import pool_connections
from agent.placement.pool import Pool

IN_FLIGHT = 16


def test_sixteen_in_flight_keep_every_connection(served, caplog):
    client = served.client()
    client.limit_in_flight(IN_FLIGHT)
    client.negotiate()
    caplog.set_level(logging.DEBUG, logger="urllib3.connectionpool")
    pool = Pool(IN_FLIGHT)
    try:
        for _ in range(4):  # bursts: every connection comes back to a pool with room
            answers = pool.map(lambda _: client.get("/resource_providers"), range(4 * IN_FLIGHT))
            assert all(a == {"resource_providers": []} for a in answers)
    finally:
        pool.close()
    records = [r for r in caplog.records if r.name == "urllib3.connectionpool"]
    assert not [r for r in records if "Connection pool is full" in r.getMessage()]
    opened = [r for r in records if "Starting new HTTP connection" in r.getMessage()]
    assert len(opened) <= IN_FLIGHT


def test_the_resized_pool_keeps_keystoneauths_keepalive(served):
    client = served.client()
    client.limit_in_flight(IN_FLIGHT)
    client.get("/resource_providers")
    session = client.adapter.session.session
    adapter = session.get_adapter(served.url)
    assert isinstance(adapter, TCPKeepAliveAdapter)
    (key,) = adapter.poolmanager.pools.keys()
    pool = adapter.poolmanager.pools[key]
    assert pool.pool.maxsize == IN_FLIGHT
    # keystoneauth's socket options, applied to every connection the pool opens
    options = pool.conn_kw["socket_options"]
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in options
    assert (socket.IPPROTO_TCP, socket.TCP_NODELAY, 1) in options


def test_a_plain_adapter_is_resized_too():
    session = requests.Session()
    pool_connections(session, 32)
    adapter = session.get_adapter("https://placement.example:8778")
    assert type(adapter) is HTTPAdapter
    assert adapter.poolmanager.connection_pool_kw["maxsize"] == 32
