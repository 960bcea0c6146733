"""Client-side caching with the stock redis-py client (RESP2) through slotbridge.

A RESP2 application caches locally by turning CLIENT TRACKING on with REDIRECT to a
connection subscribed to ``__redis__:invalidate``, as Redis documents it. Through the
proxy, a write by another client (through the proxy, or straight to the key's master) must
arrive there as the invalidation message Redis sends.

(redis-py's own cache, ``cache_config``, is not used: redis-py refuses it for servers older
than 7.4, and the proxy reports its masters' version.)

Environment (set by tests/python_clients.rs): SLOTBRIDGE_TEST_ADDR, a proxy with the default
configuration, and SLOTBRIDGE_TEST_CLUSTER_NODE, one node of the cluster behind it.
"""

import os
import uuid

import pytest
import redis

RUN = uuid.uuid4().hex[:8]
# How long an invalidation may take to cross the proxy.
WAIT = 5.0


def _addr(variable):
    value = os.environ.get(variable)
    if not value:
        pytest.fail(f"{variable} is not set: run these tests through `cargo test --test python_clients`")
    host, _, port = value.rpartition(":")
    return host, int(port)


@pytest.fixture
def listener():
    """A subscribed connection for the invalidations, and its client id."""
    host, port = _addr("SLOTBRIDGE_TEST_ADDR")
    name = f"csc-{RUN}"
    client = redis.Redis(host=host, port=port, client_name=name)
    pubsub = client.pubsub()
    pubsub.subscribe("__redis__:invalidate")
    assert pubsub.get_message(timeout=WAIT)["type"] == "subscribe"
    ids = [c["id"] for c in client.client_list() if c["name"] == name and c["sub"] == "1"]
    assert len(ids) == 1, ids
    yield pubsub, int(ids[0])
    pubsub.close()
    client.close()


def _tracking(redirect):
    host, port = _addr("SLOTBRIDGE_TEST_ADDR")
    client = redis.Redis(host=host, port=port, single_connection_client=True)
    assert client.client_tracking_on(clientid=redirect)
    return client


def _next_invalidation(pubsub):
    message = pubsub.get_message(timeout=WAIT)
    assert message is not None, "no invalidation"
    assert message["channel"] == b"__redis__:invalidate"
    return message["data"]


def test_a_write_through_the_proxy_invalidates_through_redirect(listener):
    pubsub, redirect = listener
    tracking = _tracking(redirect)
    host, port = _addr("SLOTBRIDGE_TEST_ADDR")
    writer = redis.Redis(host=host, port=port)
    key = f"csc:{RUN}:proxy"
    assert tracking.get(key) is None
    writer.set(key, "one")
    assert _next_invalidation(pubsub) == [key.encode()]
    assert tracking.client_getredir() == redirect
    tracking.close()
    writer.close()


def test_a_write_straight_on_the_master_invalidates_too(listener):
    pubsub, redirect = listener
    tracking = _tracking(redirect)
    host, port = _addr("SLOTBRIDGE_TEST_CLUSTER_NODE")
    cluster = redis.RedisCluster(host=host, port=port)
    key = f"csc:{RUN}:direct"
    assert tracking.get(key) is None
    cluster.set(key, "one")
    assert _next_invalidation(pubsub) == [key.encode()]
    tracking.close()
    cluster.close()
