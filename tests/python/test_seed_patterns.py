"""The Redis patterns an application writes for one Redis node, run unmodified through slotbridge.

Every test uses the stock standalone client, ``redis.Redis(host, port)`` (never RedisCluster),
the way an application written for a single node does: cache-aside and write-through with
SETEX, tag invalidation in a transactional pipeline, sessions in hashes, a fixed-window and a
sliding-window (Lua) rate limiter, a SET NX PX lock with a Lua release, pub/sub, a stream with
a consumer group, a sorted-set leaderboard, HyperLogLog, and a connection pool.

Where a single node and a cluster must differ (several slots in one transaction, one script or
one PFMERGE), the tests assert the error the client gets and show the configuration that makes
the pattern work.

Environment (set by tests/python_clients.rs; every variable is required):

- SLOTBRIDGE_TEST_ADDR: host:port of a proxy with the default configuration.
- SLOTBRIDGE_TEST_SPLIT_ADDR: a proxy with ``cross_slot_transactions: split``.
- SLOTBRIDGE_TEST_LAYOUT_ADDR: a proxy with config/examples/hash-tag-generic.yaml as layout.
- SLOTBRIDGE_TEST_LAYOUT_PREFIX: the prefix that layout proxy was started with.
- SLOTBRIDGE_TEST_CLUSTER_NODE: host:port of one cluster node, asked only which node owns
  which slot, so keys can be picked on purpose on one node or on two.
"""

import json
import os
import threading
import time
import uuid

import pytest
import redis

# A fresh namespace per run, so runs against the same cluster never see each other's keys.
RUN = uuid.uuid4().hex[:8]


def _addr(variable):
    value = os.environ.get(variable)
    if not value:
        pytest.fail(f"{variable} is not set: run these tests through `cargo test --test python_clients`")
    host, _, port = value.rpartition(":")
    return host, int(port)


def _client(variable, **options):
    host, port = _addr(variable)
    return redis.Redis(host=host, port=port, decode_responses=True, socket_timeout=10, **options)


@pytest.fixture(scope="module")
def r():
    client = _client("SLOTBRIDGE_TEST_ADDR")
    yield client
    client.close()


@pytest.fixture(scope="module")
def split():
    client = _client("SLOTBRIDGE_TEST_SPLIT_ADDR")
    yield client
    client.close()


@pytest.fixture(scope="module")
def tagged():
    client = _client("SLOTBRIDGE_TEST_LAYOUT_ADDR")
    yield client
    client.close()


@pytest.fixture(scope="module")
def layout_prefix():
    prefix = os.environ.get("SLOTBRIDGE_TEST_LAYOUT_PREFIX")
    if not prefix:
        pytest.fail("SLOTBRIDGE_TEST_LAYOUT_PREFIX is not set")
    return prefix


@pytest.fixture(scope="module")
def node_of():
    """Maps a key to the address of the master that owns its slot, as the cluster says."""
    host, port = _addr("SLOTBRIDGE_TEST_CLUSTER_NODE")
    node = redis.Redis(host=host, port=port, decode_responses=True, socket_timeout=10)
    ranges = [(start, end, f"{master[0]}:{master[1]}") for start, end, master, *_ in node.execute_command("CLUSTER", "SLOTS")]

    def owner(key):
        slot = node.execute_command("CLUSTER", "KEYSLOT", key)
        return next(address for start, end, address in ranges if start <= slot <= end)

    owner.slot = lambda key: node.execute_command("CLUSTER", "KEYSLOT", key)
    yield owner
    node.close()


def key(*parts):
    return ":".join(["myapp", RUN, *[str(p) for p in parts]])


# --- Cache-aside, write-through -------------------------------------------------------------


class FakeDb:
    """The database behind the cache: counts reads, so a cache hit is visible."""

    def __init__(self):
        self.rows = {}
        self.reads = 0

    def query(self, product_id):
        self.reads += 1
        return dict(self.rows[product_id])


def get_product(r, db, product_id):
    cache_key = key("product", product_id)
    cached = r.get(cache_key)
    if cached:
        return json.loads(cached)
    product = db.query(product_id)
    r.setex(cache_key, 3600, json.dumps(product))
    return product


def update_product(r, db, product_id, data):
    db.rows[product_id] = dict(data)
    r.setex(key("product", product_id), 3600, json.dumps(data))


def test_cache_aside_loads_once_then_serves_from_the_cache(r):
    db = FakeDb()
    db.rows[1] = {"id": 1, "name": "lamp", "price": 20}

    assert get_product(r, db, 1) == db.rows[1]
    assert db.reads == 1
    assert get_product(r, db, 1) == db.rows[1]
    assert db.reads == 1, "the second read must be a cache hit"
    assert 3590 <= r.ttl(key("product", 1)) <= 3600


def test_write_through_updates_the_cache_without_a_db_read(r):
    db = FakeDb()
    db.rows[2] = {"id": 2, "name": "chair", "price": 50}
    get_product(r, db, 2)

    update_product(r, db, 2, {"id": 2, "name": "chair", "price": 45})
    assert get_product(r, db, 2)["price"] == 45
    assert db.reads == 1
    assert 3590 <= r.ttl(key("product", 2)) <= 3600


# --- Tag invalidation: a transaction over unrelated keys ------------------------------------


def cache_product(r, product_id, category_id, data):
    product_key = key("product", product_id)
    tag = key("tag", "category", category_id)
    pipe = r.pipeline()  # transaction=True: MULTI ... EXEC
    pipe.setex(product_key, 3600, json.dumps(data))
    pipe.sadd(tag, product_key)
    pipe.expire(tag, 3600)
    return pipe.execute()


def invalidate_category(r, category_id):
    tag = key("tag", "category", category_id)
    keys = r.smembers(tag)
    if keys:
        r.delete(*keys)
    r.delete(tag)


def _products_in_other_slots(node_of, category_id, count):
    """Product ids whose keys sit on a different master than the category's tag set."""
    tag_node = node_of(key("tag", "category", category_id))
    ids = [i for i in range(1000, 2000) if node_of(key("product", i)) != tag_node]
    return ids[:count]


def test_tag_invalidation_transaction_is_refused_across_slots_by_default(r, node_of):
    product_id = _products_in_other_slots(node_of, 7, 1)[0]
    product_key = key("product", product_id)
    tag = key("tag", "category", 7)

    with pytest.raises(redis.ResponseError) as error:
        cache_product(r, product_id, 7, {"id": product_id})
    text = str(error.value)
    # Redis Cluster's own error class, naming both keys so the user sees which ones clash.
    assert "CROSSSLOT" in text, text
    assert product_key in text and tag in text, text
    # EXECABORT semantics: nothing of the transaction ran.
    assert r.exists(product_key, tag) == 0


def test_tag_invalidation_works_with_split_transactions(split, node_of):
    product_ids = _products_in_other_slots(node_of, 8, 2)
    tag = key("tag", "category", 8)
    for product_id in product_ids:
        assert cache_product(split, product_id, 8, {"id": product_id}) == [True, 1, True]
    product_keys = {key("product", i) for i in product_ids}
    assert split.smembers(tag) == product_keys
    assert 3590 <= split.ttl(tag) <= 3600
    assert split.exists(*product_keys) == len(product_keys)

    invalidate_category(split, 8)
    assert split.exists(tag, *product_keys) == 0


# --- Sessions ---------------------------------------------------------------------------------


def create_session(r, user_id, ttl=86400):
    session_id = str(uuid.uuid4())
    session_key = key("session", session_id)
    pipe = r.pipeline(transaction=True)
    pipe.hset(session_key, mapping={"user_id": user_id, "created_at": int(time.time())})
    pipe.expire(session_key, ttl)
    pipe.execute()
    return session_id


def get_session(r, session_id):
    data = r.hgetall(key("session", session_id))
    return data if data else None


def delete_session(r, session_id):
    r.delete(key("session", session_id))


def test_sessions_live_in_hashes_with_a_ttl(r):
    before = int(time.time())
    session_id = create_session(r, 42)
    session = get_session(r, session_id)
    assert session["user_id"] == "42"
    assert before <= int(session["created_at"]) <= int(time.time())
    assert 86390 <= r.ttl(key("session", session_id)) <= 86400

    delete_session(r, session_id)
    assert get_session(r, session_id) is None


# --- Rate limiting ----------------------------------------------------------------------------


def is_rate_limited(r, user_id, limit=100, window=60):
    limit_key = key("ratelimit", user_id, int(time.time()) // window)
    pipe = r.pipeline(transaction=True)
    pipe.incr(limit_key)
    pipe.expire(limit_key, window)
    count, _ = pipe.execute()
    return count > limit


def test_fixed_window_limits_after_the_limit(r):
    # A window of a day, so the test never straddles two windows.
    window = 86400
    results = [is_rate_limited(r, "fixed", limit=3, window=window) for _ in range(5)]
    assert results == [False, False, False, True, True]
    limit_key = key("ratelimit", "fixed", int(time.time()) // window)
    assert r.get(limit_key) == "5"
    assert 0 < r.ttl(limit_key) <= window


SLIDING_WINDOW = """
local key = KEYS[1]
local now = tonumber(ARGV[1])
local window = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])

redis.call('ZREMRANGEBYSCORE', key, 0, now - window)
local count = redis.call('ZCARD', key)

if count < limit then
    local seq_key = key .. ':seq'
    local seq = redis.call('INCR', seq_key)
    redis.call('EXPIRE', seq_key, math.ceil(window / 1000))
    redis.call('ZADD', key, now, now .. '-' .. seq)
    redis.call('EXPIRE', key, math.ceil(window / 1000))
    return 1
end
return 0
"""


def sliding_key(prefix, user_id):
    return f"{prefix}:ratelimit:sliding:{user_id}"


def allow_request(r, limiter_key, limit=100):
    now = int(time.time() * 1000)
    sliding_window = r.register_script(SLIDING_WINDOW)
    return bool(sliding_window(keys=[limiter_key], args=[now, 60000, limit]))


def _user_split_across_nodes(node_of, prefix):
    """A user id whose limiter key and derived `:seq` key live on different masters."""
    for i in range(1000):
        user_id = f"{RUN}-{i}"
        limiter_key = sliding_key(prefix, user_id)
        if node_of(limiter_key) != node_of(limiter_key + ":seq"):
            return user_id
    pytest.fail("no user id puts the limiter key and its :seq key on different masters")


def test_sliding_window_script_with_an_undeclared_key_fails_clearly(r, node_of, layout_prefix):
    user_id = _user_split_across_nodes(node_of, layout_prefix)
    with pytest.raises(redis.ResponseError) as error:
        allow_request(r, sliding_key(layout_prefix, user_id))
    text = str(error.value)
    # The node's own words, then the proxy's hint at the remedy.
    assert "Script attempted to access a non local key in a cluster node" in text, text
    assert "hash tag" in text and "KEYS" in text, text


def test_sliding_window_script_works_with_the_hash_tag_layout(tagged, node_of, layout_prefix):
    # The same kind of user as above: without the layout, its two keys are on two masters.
    user_id = _user_split_across_nodes(node_of, layout_prefix)
    limiter_key = sliding_key(layout_prefix, user_id)

    results = [allow_request(tagged, limiter_key, limit=3) for _ in range(5)]
    assert results == [True, True, True, False, False]
    assert tagged.zcard(limiter_key) == 3
    # The key the script derived reads back under its legacy name too.
    assert tagged.get(limiter_key + ":seq") == "3"
    assert 0 < tagged.ttl(limiter_key) <= 60


# --- Lock ---------------------------------------------------------------------------------------

RELEASE_LOCK = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
else
    return 0
end
"""


def acquire_lock(r, resource, ttl_ms=5000):
    token = str(uuid.uuid4())
    acquired = r.set(key("lock", resource), token, px=ttl_ms, nx=True)
    return token if acquired else None


def release_lock(r, resource, token):
    return bool(r.eval(RELEASE_LOCK, 1, key("lock", resource), token))


def test_lock_is_exclusive_and_released_only_by_its_owner(r):
    token = acquire_lock(r, "order:payment:123")
    assert token is not None
    assert 0 < r.pttl(key("lock", "order:payment:123")) <= 5000
    assert acquire_lock(r, "order:payment:123") is None

    assert release_lock(r, "order:payment:123", "not-the-owner") is False
    assert r.get(key("lock", "order:payment:123")) == token
    assert release_lock(r, "order:payment:123", token) is True
    assert r.exists(key("lock", "order:payment:123")) == 0
    assert acquire_lock(r, "order:payment:123") is not None


# --- Pub/Sub --------------------------------------------------------------------------------


def _next_message(pubsub, kind, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.2)
        if message and message["type"] == kind:
            return message
    pytest.fail(f"no {kind} message within {timeout}s")


def test_pubsub_delivers_published_events(r):
    channel = key("events", "orders")
    pubsub = r.pubsub()
    try:
        pubsub.subscribe(channel)
        assert _next_message(pubsub, "subscribe")["channel"] == channel

        payloads = [{"order": i, "status": "paid"} for i in range(3)]
        for payload in payloads:
            r.publish(channel, json.dumps(payload))
        received = [json.loads(_next_message(pubsub, "message")["data"]) for _ in payloads]
        assert received == payloads

        pubsub.unsubscribe(channel)
        assert _next_message(pubsub, "unsubscribe")["channel"] == channel
    finally:
        pubsub.close()


# --- Streams ----------------------------------------------------------------------------------


def test_stream_consumer_group_reads_blocks_and_acks(r):
    stream = key("events", "orders", "stream")
    r.xgroup_create(stream, "processor", id="0", mkstream=True)
    # The seed swallows this error on restart: it must be BUSYGROUP, as on one node.
    with pytest.raises(redis.ResponseError, match="BUSYGROUP"):
        r.xgroup_create(stream, "processor", id="0", mkstream=True)

    sent = [{"order": str(i)} for i in range(3)]
    ids = [r.xadd(stream, event, maxlen=10000) for event in sent]
    messages = r.xreadgroup("processor", "worker-1", {stream: ">"}, count=10, block=2000)
    [(name, entries)] = messages
    assert name == stream
    assert [msg_id for msg_id, _ in entries] == ids
    assert [data for _, data in entries] == sent
    assert r.xpending(stream, "processor")["pending"] == 3
    assert r.xack(stream, "processor", *ids) == 3
    assert r.xpending(stream, "processor")["pending"] == 0

    # XREADGROUP BLOCK waits for an entry added later by another client.
    late = {}

    def produce():
        time.sleep(0.3)
        late["id"] = _client("SLOTBRIDGE_TEST_ADDR").xadd(stream, {"order": "late"}, maxlen=10000)

    producer = threading.Thread(target=produce)
    started = time.monotonic()
    producer.start()
    messages = r.xreadgroup("processor", "worker-1", {stream: ">"}, count=10, block=5000)
    waited = time.monotonic() - started
    producer.join()
    [(_, entries)] = messages
    assert entries == [(late["id"], {"order": "late"})]
    assert 0.2 <= waited < 5, waited
    assert r.xack(stream, "processor", late["id"]) == 1

    # Exact MAXLEN trims to the newest entries.
    for i in range(10):
        r.xadd(stream, {"n": str(i)}, maxlen=5, approximate=False)
    assert r.xlen(stream) == 5
    assert [data["n"] for _, data in r.xrange(stream)] == ["5", "6", "7", "8", "9"]


# --- Leaderboard --------------------------------------------------------------------------------


def test_leaderboard_ranks_by_score(r):
    board = key("scores", "weekly")
    assert r.zadd(board, {"ana": 30, "bob": 10, "cy": 20}) == 3
    assert r.zincrby(board, 25, "bob") == 35.0
    assert r.zrevrange(board, 0, -1, withscores=True) == [("bob", 35.0), ("ana", 30.0), ("cy", 20.0)]
    assert r.zrevrange(board, 0, 1) == ["bob", "ana"]
    assert r.zrevrank(board, "cy") == 2


# --- HyperLogLog ------------------------------------------------------------------------------


def test_hyperloglog_counts_and_merges(r, node_of):
    day1 = key("hll", "pageviews", "day1")
    # Two names in different slots (as almost any two names are; made sure of here).
    day2 = next(k for k in (key("hll", "pageviews", "day2", i) for i in range(100)) if node_of.slot(k) != node_of.slot(day1))
    assert r.pfadd(day1, *[f"visitor-{i}" for i in range(100)]) == 1
    assert r.pfadd(day2, *[f"visitor-{i}" for i in range(50, 150)]) == 1
    assert r.pfadd(day1, "visitor-0") == 0, "a visitor already counted changes nothing"
    # HyperLogLog is approximate; Redis documents a standard error of 0.81%.
    assert abs(r.pfcount(day1) - 100) <= 3

    # Across slots the proxy merges them as one node would (cross_slot.stores: emulate).
    merged = key("hll", "pageviews", "both")
    assert r.pfmerge(merged, day1, day2) is True
    assert abs(r.pfcount(merged) - 150) <= 4
    assert abs(r.pfcount(day1, day2) - 150) <= 4

    # With one hash tag, the keys share a slot and the merge works.
    tag = f"{{hll:{RUN}}}"
    a, b, both = f"{tag}:day1", f"{tag}:day2", f"{tag}:both"
    r.pfadd(a, *[f"visitor-{i}" for i in range(100)])
    r.pfadd(b, *[f"visitor-{i}" for i in range(50, 150)])
    assert r.pfmerge(both, a, b) is True
    assert abs(r.pfcount(both) - 150) <= 4
    assert abs(r.pfcount(a, b) - 150) <= 4


# --- Connection pool ----------------------------------------------------------------------------


def test_connection_pool_shared_by_threads(r):
    host, port = _addr("SLOTBRIDGE_TEST_ADDR")
    pool = redis.ConnectionPool(
        host=host,
        port=port,
        db=0,
        max_connections=20,
        decode_responses=True,
        socket_connect_timeout=2,
        socket_timeout=5,
    )
    pooled = redis.Redis(connection_pool=pool)
    counter = key("pool", "counter")
    errors = []

    def work():
        try:
            for _ in range(50):
                pooled.incr(counter)
        except Exception as exc:  # surfaced below: a thread's exception is otherwise lost
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pool.disconnect()
    assert errors == []
    assert r.get(counter) == "400"


def test_client_info_shows_the_library_redis_py_announced(r):
    # redis-py sends CLIENT SETINFO LIB-NAME/LIB-VER on connecting, as it does to Redis 7.2.
    info = r.client_info()
    assert info["lib-name"] == "redis-py"
    assert info["lib-ver"] == redis.__version__
