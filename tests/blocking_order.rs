//! Blocking commands take effect in the order clients send them, as on one Redis: two
//! clients block on one list one after the other, a third pushes one element and then
//! another; the client that blocked first gets the first element, the other the second.
//! Run many times with a few milliseconds between the clients, so a blocking command that
//! reaches its master later than a push sent after it shows up within the run. With
//! backend credentials, the connections kept ready for that log in as the configured user.

mod common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{query, shared_cluster, wait_until, Proxy, Raw};

/// Rounds of the scenario per protocol: a reordering seen in a few percent of rounds
/// shows within one run.
const ROUNDS: usize = 40;
/// Between one client's send and the next one's: the clients send in sequence, as a test
/// against one Redis would, without waiting for a reply that never comes while blocked.
const SPACING: Duration = Duration::from_millis(3);

fn proxy() -> Proxy {
    Proxy::start(&["--cluster", &shared_cluster().seeds_arg()])
}

/// The ACL user the proxy logs in as in the test with backend credentials.
const BACKEND_USER: &str = "orderbot";

/// Connects to the proxy, switching to RESP3 when `resp3`.
fn client(proxy: &Proxy, resp3: bool) -> Raw {
    let mut raw = Raw::connect(proxy.addr());
    if resp3 {
        let hello = raw.call(&["HELLO", "3"]);
        assert!(hello.starts_with('%'), "{hello}");
    }
    raw
}

/// BLPOP's reply for `element` popped from `key` (an array in both protocols).
fn popped(key: &str, element: &str) -> String {
    format!(
        "*2\r\n${}\r\n{key}\r\n${}\r\n{element}\r\n",
        key.len(),
        element.len()
    )
}

/// Runs the scenario [`ROUNDS`] times with `command` (`BLPOP` or `BRPOPLPUSH`) and
/// returns the rounds in which the client that blocked second got the first element.
/// `test` names the keys: the tests of this file run at once on one cluster.
fn reordered_rounds(
    proxy: &Proxy,
    test: &str,
    command: &str,
    resp3: bool,
    rounds: usize,
) -> Vec<usize> {
    let mut reordered = Vec::new();
    for round in 0..rounds {
        let key = format!("order:{test}:{command}:{resp3}:{round}:{{q}}");
        let target = format!("order:{test}:{command}:{resp3}:{round}:target:{{q}}");
        let (mut first, mut second, mut pusher) = (
            client(proxy, resp3),
            client(proxy, resp3),
            client(proxy, resp3),
        );
        let blocking: Vec<&str> = match command {
            "BLPOP" => vec!["BLPOP", &key, "0"],
            _ => vec!["BRPOPLPUSH", &key, &target, "0"],
        };
        first.send(&blocking);
        sleep(SPACING);
        second.send(&blocking);
        sleep(SPACING);
        assert_eq!(pusher.call(&["LPUSH", &key, "one"]), ":1\r\n");
        let _ = pusher.call(&["LPUSH", &key, "two"]);
        let (got_first, got_second) = (first.read_reply(), second.read_reply());
        let expected = |element: &str| match command {
            "BLPOP" => popped(&key, element),
            _ => format!("${}\r\n{element}\r\n", element.len()),
        };
        if got_first != expected("one") {
            assert_eq!(got_first, expected("two"), "round {round}");
            assert_eq!(got_second, expected("one"), "round {round}");
            reordered.push(round);
        } else {
            assert_eq!(got_second, expected("two"), "round {round}");
        }
    }
    reordered
}

#[test]
fn the_client_that_blocked_first_is_served_first() {
    let proxy = proxy();
    let started = Instant::now();
    for (command, resp3) in [("BLPOP", false), ("BRPOPLPUSH", false), ("BLPOP", true)] {
        let reordered = reordered_rounds(&proxy, "first", command, resp3, ROUNDS);
        assert!(
            reordered.is_empty(),
            "{command} (RESP3: {resp3}): the second client was served first in rounds \
             {reordered:?} of {ROUNDS}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// With backend credentials the connections kept ready log in as the configured user, in
/// the client's protocol, as those opened on demand do.
#[test]
fn ready_connections_log_in_as_the_backend_user() {
    let masters = shared_cluster().masters();
    for master in &masters {
        let _: String = query(
            master,
            redis::cmd("ACL")
                .arg("SETUSER")
                .arg(BACKEND_USER)
                .arg("on")
                .arg(">order-secret")
                .arg("~*")
                .arg("&*")
                .arg("+@all"),
        )
        .unwrap();
    }
    let proxy = Proxy::start_with_env(
        &["--cluster", &shared_cluster().seeds_arg()],
        &[
            ("REDIS_USERNAME", BACKEND_USER),
            ("REDIS_PASSWORD", "order-secret"),
        ],
    );
    for resp3 in [false, true] {
        let reordered = reordered_rounds(&proxy, "acl", "BLPOP", resp3, 10);
        assert!(reordered.is_empty(), "RESP3 {resp3}: {reordered:?}");
    }
    // A client blocked now waits on a connection of the backend user, in RESP3.
    let key = "order:user:{q}";
    let mut blocked = client(&proxy, true);
    blocked.send(&["BLPOP", key, "0"]);
    let master = shared_cluster().node_for_slot(shared_cluster().keyslot(key));
    wait_until("the BLPOP on the master", Duration::from_secs(5), || {
        let list: String = query(&master, redis::cmd("CLIENT").arg("LIST")).unwrap();
        list.lines().any(|line| {
            line.contains(" cmd=blpop ")
                && line.contains(&format!(" user={BACKEND_USER} "))
                && line.contains(" resp=3")
        })
    });
    assert_eq!(client(&proxy, false).call(&["LPUSH", key, "v"]), ":1\r\n");
    assert_eq!(
        blocked.read_reply(),
        format!("*2\r\n${}\r\n{key}\r\n$1\r\nv\r\n", key.len())
    );
}

/// The proxy accepts its first client only once every master holds its ready connections
/// in both protocols (three each, answered PING), so the first blocking commands after a
/// start take one as later ones do.
#[test]
fn ready_connections_are_open_before_the_first_client_is_accepted() {
    let cluster = common::Cluster::start(3, 0);
    let proxy = Proxy::start(&["--cluster", &cluster.seeds_arg()]);
    for master in cluster.masters() {
        let list: String = query(&master, redis::cmd("CLIENT").arg("LIST")).unwrap();
        let ready = |resp: &str| {
            list.lines()
                .filter(|line| line.contains(" cmd=ping ") && line.contains(resp))
                .count()
        };
        assert!(
            ready(" resp=2") >= 3 && ready(" resp=3") >= 3,
            "{master} when the proxy accepted: {list}"
        );
    }
    drop(proxy);
}
