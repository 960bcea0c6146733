//! Redirects and retries the proxy follows, against scripted fake nodes that record the
//! exact bytes it sends, for the corner cases a real cluster won't produce on demand: ASK,
//! redirect loops, CLUSTERDOWN retries, and a connection dropped after the command was sent.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{Answer, FakeNode, Proxy, SlotOwner};

fn get(proxy: &Proxy, key: &str) -> redis::RedisResult<String> {
    let mut con = proxy.client().get_connection()?;
    redis::cmd("GET").arg(key).query(&mut con)
}

#[test]
fn ask_sends_asking_then_the_command_to_the_target() {
    let owner = SlotOwner::new();
    let target = FakeNode::cluster(&owner, |_| Answer::text("$6\r\nmoved!\r\n"));
    let ask = format!("-ASK 1234 {}\r\n", target.addr());
    let source = FakeNode::cluster(&owner, move |_| Answer::text(&ask));
    owner.set(&source);
    let proxy = Proxy::start(&["--cluster", &source.addr()]);
    assert_eq!(get(&proxy, "k").unwrap(), "moved!");
    // The target got ASKING immediately followed by the command, in one write.
    let reads = target.seen().bytes.concat();
    let expected = b"*1\r\n$6\r\nASKING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
    assert!(
        reads.windows(expected.len()).any(|w| w == expected),
        "target read {:?}",
        String::from_utf8_lossy(&reads)
    );
    // ASK does not change the slot map: the next command goes to the source again.
    assert_eq!(get(&proxy, "k").unwrap(), "moved!");
    assert_eq!(source.received("GET").len(), 2);
}

#[test]
fn redirect_loops_are_capped() {
    let owner = SlotOwner::new();
    let other = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let o = other.clone();
    let a = FakeNode::cluster(&owner, move |_| {
        Answer::text(&format!("-MOVED 7 {}\r\n", o.lock().unwrap()))
    });
    let moved_to_a = format!("-MOVED 7 {}\r\n", a.addr());
    let b = FakeNode::cluster(&owner, move |_| Answer::text(&moved_to_a));
    *other.lock().unwrap() = b.addr();
    owner.set(&a);
    let proxy = Proxy::start(&["--cluster", &a.addr()]);
    let err = get(&proxy, "k").unwrap_err().to_string();
    assert!(err.contains("too many redirects"), "{err}");
    // Rounds of `max_redirects` + 1 hops (5 + 1 by default), one first and one after
    // each of the 10 backoff waits (nodes that disagree for a moment after a slot moved
    // agree again meanwhile), then the error.
    let sent = a.received("GET").len() + b.received("GET").len();
    assert_eq!(sent, 6 * 11, "the command was sent {sent} times");
}

#[test]
fn clusterdown_is_retried_until_it_clears() {
    // GETs counted alone: the proxy also opens ready connections for blocking commands.
    let gets = AtomicUsize::new(0);
    let node = FakeNode::cluster_alone(move |request| {
        if request.is("GET") && gets.fetch_add(1, Ordering::SeqCst) < 2 {
            Answer::text("-CLUSTERDOWN The cluster is down\r\n")
        } else {
            Answer::text("$5\r\nvalue\r\n")
        }
    });
    let proxy = Proxy::start(&["--cluster", &node.addr()]);
    assert_eq!(get(&proxy, "k").unwrap(), "value");
    assert_eq!(node.received("GET").len(), 3);
}

#[test]
fn a_reply_lost_after_sending_is_never_resent() {
    let node = FakeNode::cluster_alone(|request| {
        if request.is("INCR") {
            Answer::Close
        } else {
            Answer::text("$5\r\nafter\r\n")
        }
    });
    let proxy = Proxy::start(&["--cluster", &node.addr()]);
    let mut con = proxy.client().get_connection().unwrap();
    let err = redis::cmd("INCR")
        .arg("k")
        .query::<i64>(&mut con)
        .unwrap_err()
        .to_string();
    assert!(err.contains("outcome is unknown"), "{err}");
    // A resend would be queued before anything the client sends next, and the node's
    // connection keeps requests in order: once a later GET is answered, every resend there
    // was has arrived.
    let value: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(value, "after");
    assert_eq!(
        node.received("INCR").len(),
        1,
        "INCR must reach the node exactly once"
    );
    // The client's connection is still usable.
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}
