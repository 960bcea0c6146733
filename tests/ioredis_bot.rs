//! The client the cutovers move, through the proxy: `tests/node/ioredis_bot.js` (ioredis 5,
//! connected by `tests/node/ioredis_conn.js` as such fleets connect: ACL user or legacy AUTH,
//! `retryStrategy`, `reconnectOnError` on READONLY/MASTERDOWN, auto-pipelining) runs cache-aside,
//! sessions, rate limits, a Lua lock, a stream with a consumer group, pub/sub and scanStream
//! for a few seconds, then reads back every write it got acknowledged and prints a JSON summary.
//!
//! What the bot counts as a surfaced error is documented at the top of the bot: a rejected
//! command, a scanStream error, a session or lock that is not what the bot just wrote. The tests
//! also require no `error` event and no reconnect at all: the proxy is meant to keep a client's
//! connection through a failover and an upstream switch, so any reconnect would be a regression
//! even though ioredis would hide it from the app.
//!
//! Node.js and the packages of `tests/node` are required: a missing `node` or `ioredis` fails
//! with the install command, it never skips.

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{
    http_raw, new_dir, query, shared_cluster, Bot, Cluster, Login, Proxy, Standalone, Summary,
};

const FLEET_USER: &str = "fleet";
const FLEET_PASSWORD: &str = "fleet-pw";
const LEGACY_PASSWORD: &str = "legacy-pw";

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock");
    u64::try_from(since.as_millis()).expect("milliseconds fit")
}

/// A proxy config file: `upstream` (a `cluster:` or `standalone:` line), the fleet's ACL user
/// (keys and channels under `prefix` only; its own Lua scripts trusted, as an operator must
/// say for a user whose rules are restricted) and a `default` password for legacy `AUTH
/// password`.
fn write_config(path: &Path, upstream: &str, prefix: &str) {
    let text = format!(
        "{upstream}\nrequirepass: {LEGACY_PASSWORD}\nusers:\n  - name: {FLEET_USER}\n    \
         password: {FLEET_PASSWORD}\n    commands: [\"+@all\"]\n    keys: [\"~{prefix}:*\"]\n    \
         channels: [\"&{prefix}:*\"]\n    scripts: trusted\n"
    );
    std::fs::write(path, text).expect("write the proxy config");
}

fn cluster_line(seeds: &[String]) -> String {
    let quoted: Vec<String> = seeds.iter().map(|s| format!("\"{s}\"")).collect();
    format!("cluster: [{}]", quoted.join(", "))
}

/// A proxy started from a config file in a directory of its own: (proxy, config path).
fn start_proxy(upstream: &str, prefix: &str) -> (Proxy, PathBuf) {
    let path = new_dir("ioredis-config").join("slotbridge.yaml");
    write_config(&path, upstream, prefix);
    let proxy = Proxy::start(&["--config", path.to_str().expect("UTF-8 path")]);
    (proxy, path)
}

/// The slot owner of `key` on `cluster`.
fn owner_of(cluster: &Cluster, key: &str) -> String {
    cluster.node_for_slot(cluster.keyslot(key))
}

/// a. A master fails over (`CLUSTER FAILOVER` on its replica) under the bot: nothing surfaces,
/// no acknowledged write is lost, and the bot keeps going during and after.
#[test]
fn ioredis_bot_through_a_master_failover_loses_nothing() {
    common::require_node("ioredis");
    let prefix = "iofail";
    let cluster = Cluster::start(3, 1);
    let (proxy, _config) = start_proxy(&cluster_line(&cluster.seeds()), prefix);
    let bot = Bot::start(
        proxy.addr(),
        prefix,
        9,
        Login::User(FLEET_USER, FLEET_PASSWORD),
        false,
    );

    std::thread::sleep(Duration::from_millis(3000));
    // The master of the stream: every worker loop of the bot reaches it.
    let master = owner_of(&cluster, &format!("{prefix}:stream"));
    let replica = cluster.replicas_of(&master)[0].clone();
    let failover_started = now_ms();
    cluster.failover(&replica);
    let failover_done = now_ms();

    let summary = bot.finish(&[&proxy]);
    let out = &summary.output;
    summary.assert_clean();
    assert_eq!(summary.number("groupRecreated"), 0, "{out}");
    assert_eq!(owner_of(&cluster, &format!("{prefix}:stream")), replica);
    // With no pause in acknowledgements over MAX_STALL_MS (assert_clean), this shows work
    // went on while the master changed and went on at pace after.
    assert!(
        summary.ops_between(failover_started, failover_done) > 0
            && summary.ops_since(failover_done + 1000) > 100,
        "the bot made no progress around the failover ({failover_started}..{failover_done})\n{out}"
    );
}

/// What a cutover run leaves: the bot's summary, when the move was done (ms since the epoch),
/// and the bot's stream length on the old node and on the cluster.
struct Cutover {
    summary: Summary,
    done_ms: u64,
    stream_on_old: u64,
    stream_on_new: u64,
}

/// Runs the bot (legacy `AUTH password`) through a proxy whose upstream is a standalone node,
/// and moves the upstream to the cluster by hot reload (`POST /reload` after rewriting the
/// config file) while it runs, signalling the bot before and after the move.
fn run_cutover(prefix: &str) -> Cutover {
    common::require_node("ioredis");
    let standalone = Standalone::start();
    let cluster = shared_cluster();
    let upstream = format!("standalone: \"{}\"", standalone.addr());
    let (proxy, config) = start_proxy(&upstream, prefix);
    let bot = Bot::start(
        proxy.addr(),
        prefix,
        8,
        Login::Password(LEGACY_PASSWORD),
        false,
    );

    std::thread::sleep(Duration::from_millis(3000));
    bot.signal_cutover();
    // Node handles a signal between two turns of its event loop: let the mark precede the move.
    std::thread::sleep(Duration::from_millis(200));
    write_config(&config, &cluster_line(&cluster.seeds()), prefix);
    let (status, body) = http_raw(
        proxy.admin_addr(),
        b"POST /reload HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
    );
    assert_eq!(status, 202, "{body}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !proxy.stderr().contains("configuration reloaded") {
        assert!(Instant::now() < deadline, "no reload\n{}", proxy.output());
        std::thread::sleep(Duration::from_millis(20));
    }
    bot.signal_cutover();
    let done_ms = now_ms();

    let summary = bot.finish(&[&proxy]);
    let stream = format!("{prefix}:stream");
    let xlen = redis::cmd("XLEN").arg(&stream).clone();
    Cutover {
        stream_on_old: query(standalone.addr(), &xlen).expect("XLEN on the old node"),
        stream_on_new: query(&owner_of(cluster, &stream), &xlen).expect("XLEN on the cluster"),
        summary,
        done_ms,
    }
}

/// b. The upstream moves from a standalone node to the cluster by hot reload while the bot
/// runs.
///
/// Scenario: a cutover with no data copy. The fleet's Redis state is rebuilt by the app
/// (cache refills, sessions and rate windows restart, locks are short; the work stream's
/// consumer group is created again on NOGROUP, as such workers do). A live copy would race
/// the bot's writes, and `slotbridge migrate` wants the bots stopped. So writes acknowledged
/// before the move stay on the old node (the test checks it kept its stream), and the bot
/// verifies, through a fresh connection, every key whose last acknowledged write was sent
/// after the move was done, which must read back from the cluster. A session read or lock
/// release whose two halves straddle the move is counted apart (see the bot), not as an
/// error; every rejected command still is. The subscriber, which only listens, must get
/// every message published before and after the move; one published while it moves (from
/// the reload to its new SUBSCRIBE, milliseconds) can be missed, and is counted apart.
#[test]
fn ioredis_bot_across_a_reload_from_standalone_to_cluster() {
    let run = run_cutover("iomove");
    let summary = &run.summary;
    let out = &summary.output;
    summary.assert_clean();
    assert!(summary.number("skippedBeforeCutover") > 0, "{out}");
    assert!(summary.ops_since(run.done_ms + 1000) > 100, "{out}");
    assert!(
        run.stream_on_old > 0 && run.stream_on_new > 0,
        "stream entries: {} on the old node, {} on the cluster\n{out}",
        run.stream_on_old,
        run.stream_on_new
    );
}

/// c. `new Redis.Cluster([{host, port: proxyPort}])`: the proxy describes a one-node cluster
/// whose node is itself, so the client stays on it, and multi-key commands across slots,
/// pipelines and pub/sub work. No cluster node ever sees a connection of the bot (its
/// connection name would show in their `CLIENT LIST`; the proxy keeps names to itself).
#[test]
fn ioredis_cluster_client_stays_on_the_proxy() {
    common::require_node("ioredis");
    let prefix = "iocluster";
    let cluster = shared_cluster();
    let (proxy, _config) = start_proxy(&cluster_line(&cluster.seeds()), prefix);
    let bot = Bot::start(
        proxy.addr(),
        prefix,
        5,
        Login::User(FLEET_USER, FLEET_PASSWORD),
        true,
    );

    let started = Instant::now();
    let mut polls = 0;
    while started.elapsed() < Duration::from_secs(4) {
        for node in cluster.seeds() {
            let list: String = query(&node, redis::cmd("CLIENT").arg("LIST")).expect("CLIENT LIST");
            assert!(
                !list.contains("name=ioredis-bot"),
                "the bot connected to {node} directly:\n{list}"
            );
        }
        polls += 1;
        std::thread::sleep(Duration::from_millis(200));
    }

    let summary = bot.finish(&[&proxy]);
    let out = &summary.output;
    summary.assert_clean();
    assert!(polls > 5, "CLIENT LIST was polled {polls} times");
    let seen: Vec<String> = summary
        .list("nodesSeen")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    assert_eq!(seen, [proxy.addr()], "nodes the cluster client used\n{out}");
    for kind in ["mset", "mget", "pipeline", "publish"] {
        assert!(summary.count(kind) > 0, "no {kind}\n{out}");
    }
}
