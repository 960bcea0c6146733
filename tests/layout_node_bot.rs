//! A real legacy client through the layout: `tests/node/legacy_bot.js` (node-redis 4) works on
//! the legacy key names through the proxy (scripts, locks, turns, leadership, records with and
//! without TTL), then reads its own 3-master cluster directly and checks the key set and the
//! indices LAYOUT.md predicts, and the listings through the proxy. This test starts the cluster
//! and the proxy, runs the bot, and fails with the bot's output unless it exits 0.
//!
//! Node.js and the bot's packages are required: a missing `node` or `tests/node/node_modules`
//! fails with the install command, it never skips.

mod common;

use common::{Cluster, LegacyBot, Proxy};

const PROFILE: &str = "config/botmesh-cluster-v1.yaml";

#[test]
fn node_redis_legacy_bot_sees_its_legacy_keyspace_and_the_cluster_holds_cluster_v1() {
    let cluster = Cluster::start(3, 0);
    let proxy = Proxy::start_with_layout(&cluster.seeds_arg(), PROFILE, "mybot");
    let (ok, output) = LegacyBot::start(proxy.addr(), &cluster.masters()).finish();
    assert!(
        ok,
        "the legacy bot failed\n{output}\n--- proxy output ---\n{}",
        proxy.output()
    );
    println!("{output}");
}
