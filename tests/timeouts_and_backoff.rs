//! The proxy's timers on a paused clock: the backoff between retries (TRYAGAIN,
//! CLUSTERDOWN, a redirect loop), a node connection's read timeout, the client idle
//! `timeout`, and the linger of a closing client connection. Each test runs the real code
//! (the proxy started in-process, or a node connection) on a current-thread runtime whose
//! clock is paused, against a scripted fake node on that same runtime: it takes
//! milliseconds, and a loaded machine cannot stretch what it measures.
//!
//! Why the timings hold: with the clock paused, tokio moves it only when no task can run,
//! and then straight to the next timer. Lower bounds hold unconditionally: no timer fires
//! before the clock reached it. Upper bounds hold because every socket in these tests is
//! loopback between tasks of this one thread, and Linux hands loopback bytes to the
//! receiving socket inside the sending call, so a task with bytes to read is never taken for
//! idle; the clock moves only while the code under test waits on a timer. Two things keep
//! that true: every socket has TCP_NODELAY (the proxy sets it on its own; the fake node and
//! these clients too), since Nagle would hold a small write for the peer's delayed ACK, real
//! milliseconds in which the paused clock runs away; and connections are opened before a
//! measurement starts, so no handshake is in flight while it runs.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::{reply_complete, resp_command, Answer, FakeNode, SlotOwner};
use futures_util::future::join_all;
use slotbridge::backend::{BackendError, ConnOptions, NodeConn};
use slotbridge::config::Config;
use slotbridge::route::NodeAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

/// Starts the proxy in-process on this runtime with `cluster` as its seed node and `extra`
/// YAML appended to its configuration; returns its client address.
async fn start_proxy(cluster: &FakeNode, extra: &str) -> String {
    let yaml = format!(
        "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\nadmin:\n  metrics: false\n\
         cluster:\n  - {}\n{extra}",
        cluster.addr()
    );
    let config = Config::from_yaml(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    config.validate().unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let (proxy, listener) = slotbridge::server::start(config)
        .await
        .unwrap_or_else(|e| panic!("proxy start: {e}"));
    let addr = listener.local_addr().expect("proxy address").to_string();
    tokio::spawn(slotbridge::server::serve(
        proxy,
        listener,
        std::future::pending(),
    ));
    addr
}

/// Sends `args` and reads one whole reply.
async fn call(client: &mut TcpStream, args: &[&str]) -> String {
    client.write_all(&resp_command(args)).await.expect("write");
    read_reply(client).await
}

async fn read_reply(client: &mut TcpStream) -> String {
    let mut reply = Vec::new();
    let mut chunk = [0u8; 4096];
    while !reply_complete(&reply) {
        let n = client.read(&mut chunk).await.expect("read");
        assert!(n > 0, "closed after {:?}", String::from_utf8_lossy(&reply));
        reply.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8(reply).expect("utf-8 reply")
}

/// Reads until the proxy closes the connection; what came before the close.
async fn read_to_close(client: &mut TcpStream) -> Vec<u8> {
    let mut rest = Vec::new();
    let _ = client.read_to_end(&mut rest).await;
    rest
}

/// A proxy client, connected, with a first command answered (so its session is running).
async fn client(proxy: &str) -> TcpStream {
    let mut client = TcpStream::connect(proxy).await.expect("connect");
    client.set_nodelay(true).expect("nodelay");
    assert_eq!(call(&mut client, &["PING"]).await, "+PONG\r\n");
    client
}

/// Sum of the default backoffs before retries 1..=n (10 ms doubling, capped at 500 ms).
fn default_backoffs(n: u32) -> Duration {
    (0..n)
        .map(|i| Duration::from_millis((10u64 << i).min(500)))
        .sum()
}

/// Sound: TRYAGAIN asks for no slot map refresh, so while the GET is retried the only timers
/// due before the periodic refresh (10 s) are the backoff sleeps.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn tryagain_waits_the_doubling_capped_backoff_between_attempts() {
    // GETs counted alone: the proxy also opens ready connections for blocking commands.
    let gets = AtomicUsize::new(0);
    let node = FakeNode::cluster_alone(move |request| {
        if request.is("GET") && gets.fetch_add(1, Ordering::SeqCst) < 3 {
            Answer::text("-TRYAGAIN Multiple keys request during rehashing of slot\r\n")
        } else {
            Answer::text("$5\r\nvalue\r\n")
        }
    });
    let extra = "retry:\n  base_backoff_ms: 100\n  max_backoff_ms: 250\n";
    let proxy = start_proxy(&node, extra).await;
    let mut client = client(&proxy).await;
    let started = Instant::now();
    assert_eq!(call(&mut client, &["GET", "k"]).await, "$5\r\nvalue\r\n");
    let waited = started.elapsed();
    assert_eq!(node.received("GET").len(), 4);
    // 100 ms, then 200 ms, then 250 ms (the cap, not 400 ms).
    let backoffs = Duration::from_millis(100 + 200 + 250);
    assert!(
        waited >= backoffs && waited < backoffs + Duration::from_millis(100),
        "three retries took {waited:?}, not {backoffs:?}"
    );
}

/// Sound as the test above: the ten backoff sleeps (2.63 s in all) are the only timers due
/// before the periodic refresh.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn tryagain_past_the_attempts_is_passed_on_after_every_backoff() {
    let node = FakeNode::cluster_alone(|_| {
        Answer::text("-TRYAGAIN Multiple keys request during rehashing of slot\r\n")
    });
    let proxy = start_proxy(&node, "").await;
    let mut client = client(&proxy).await;
    let started = Instant::now();
    let reply = call(&mut client, &["GET", "k"]).await;
    let waited = started.elapsed();
    assert!(reply.starts_with("-TRYAGAIN"), "{reply}");
    // The first attempt and one after each of the 10 default backoffs.
    assert_eq!(node.received("GET").len(), 11);
    let backoffs = default_backoffs(10);
    assert_eq!(backoffs, Duration::from_millis(2630));
    assert!(
        waited >= backoffs && waited < backoffs + Duration::from_millis(10),
        "ten retries took {waited:?}, not {backoffs:?}"
    );
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn clusterdown_is_retried_after_the_backoff() {
    let gets = AtomicUsize::new(0);
    let node = FakeNode::cluster_alone(move |request| {
        if request.is("GET") && gets.fetch_add(1, Ordering::SeqCst) < 2 {
            Answer::text("-CLUSTERDOWN The cluster is down\r\n")
        } else {
            Answer::text("$5\r\nvalue\r\n")
        }
    });
    // Sound: CLUSTERDOWN also asks for a slot map refresh, which waits out the 200 ms
    // minimum interval, past the 30 ms of backoff; and it finds the same master, so no change
    // of masters cuts a backoff short.
    let proxy = start_proxy(&node, "").await;
    let mut client = client(&proxy).await;
    let started = Instant::now();
    assert_eq!(call(&mut client, &["GET", "k"]).await, "$5\r\nvalue\r\n");
    let waited = started.elapsed();
    assert_eq!(node.received("GET").len(), 3);
    let backoffs = default_backoffs(2);
    assert!(
        waited >= backoffs && waited < backoffs + Duration::from_millis(10),
        "two retries took {waited:?}, not {backoffs:?}"
    );
}

/// Two nodes that send each other's ASK for ever: ASK leaves the slot map alone, so no
/// change of masters cuts a wait short, and the rounds are timed by the backoff alone.
/// Sound: the refreshes each round asks for run beside the loop and find the same master.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_redirect_loop_waits_the_backoff_between_rounds() {
    let owner = SlotOwner::new();
    let b_addr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let to_b = b_addr.clone();
    let a = FakeNode::cluster(&owner, move |_| {
        Answer::text(&format!("-ASK 12182 {}\r\n", to_b.lock().unwrap()))
    });
    let ask_a = format!("-ASK 12182 {}\r\n", a.addr());
    let b = FakeNode::cluster(&owner, move |_| Answer::text(&ask_a));
    *b_addr.lock().unwrap() = b.addr();
    owner.set(&a);
    let proxy = start_proxy(&a, "").await;
    let mut client = client(&proxy).await;
    let started = Instant::now();
    let reply = call(&mut client, &["GET", "foo"]).await;
    let waited = started.elapsed();
    assert!(reply.contains("too many redirects"), "{reply}");
    let sent = a.received("GET").len() + b.received("GET").len();
    assert_eq!(
        sent,
        6 * 11,
        "rounds of 6 hops, one first and one per backoff"
    );
    let backoffs = default_backoffs(10);
    assert!(
        waited >= backoffs && waited < backoffs + Duration::from_millis(10),
        "ten rounds took {waited:?}, not {backoffs:?}"
    );
}

fn node_addr(node: &FakeNode) -> NodeAddr {
    NodeAddr::from(node.addr())
}

/// The watchdog looks every half timeout and fails what is due after three looks in a row
/// found nothing read: between the timeout and one and a half times it. Sound: the node
/// writes nothing while the requests are due, so only the watchdog's ticks can move the
/// clock and wake the reader.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_node_connection_fails_what_is_due_after_the_read_timeout() {
    let node = FakeNode::start(|request| match (request.conn, request.n) {
        (1, 1) => Answer::text("+OK\r\n"),
        (1, _) => Answer::Hold,
        _ => Answer::text("$1\r\nv\r\n"),
    });
    let opts = ConnOptions {
        read_timeout: Some(Duration::from_millis(200)),
        ..ConnOptions::default()
    };
    let conn = NodeConn::spawn(node_addr(&node), opts);
    let set = conn.call(Bytes::from(resp_command(&["SET", "k", "v"])), false);
    assert_eq!(set.await.expect("SET"), Bytes::from_static(b"+OK\r\n"));
    // Quiet with nothing due is not a stall, however long (the scenario: an idle node).
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(conn.is_connected(), "an idle connection was closed");

    let started = Instant::now();
    let replies = join_all([
        conn.call(Bytes::from(resp_command(&["GET", "k"])), false),
        conn.call(Bytes::from(resp_command(&["PING"])), false),
    ])
    .await;
    let waited = started.elapsed();
    for reply in &replies {
        match reply {
            Err(BackendError::Lost(reason)) => assert!(
                reason.contains("no reply within 200 ms"),
                "unexpected reason: {reason}"
            ),
            other => panic!("expected a lost reply, got {other:?}"),
        }
    }
    assert!(
        waited >= Duration::from_millis(200) && waited <= Duration::from_millis(300),
        "failed after {waited:?}"
    );
    // The hung connection is closed at once, not when the next request replaces it.
    common::wait_until_async(
        "the close of the hung connection",
        Duration::from_millis(100),
        || node.seen().closed_by_peer == 1,
    )
    .await;
    assert!(!conn.is_connected());
    // The next request gets a new connection.
    let get = conn.call(Bytes::from(resp_command(&["GET", "k"])), false);
    assert_eq!(get.await.expect("GET"), Bytes::from_static(b"$1\r\nv\r\n"));
    assert_eq!(node.seen().connections(), 2);
}

/// Sound: nothing answers and no timer fails the request, so the clock jumps to the hour.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn without_a_read_timeout_a_hung_node_is_waited_for() {
    let node = FakeNode::start(|_| Answer::Hold);
    let conn = NodeConn::spawn(node_addr(&node), ConnOptions::default());
    let get = conn.call(Bytes::from(resp_command(&["GET", "k"])), false);
    // An hour of virtual time: the request is still due, the connection still open.
    let waited = tokio::time::timeout(Duration::from_secs(3600), get).await;
    assert!(waited.is_err(), "answered by a hung node: {waited:?}");
    assert!(conn.is_connected());
    assert_eq!(node.seen().closed_by_peer, 0);
}

/// Sound: the GET is answered at the instant the proxy read it (the node runs on this
/// thread), so the quiet starts then; the idle deadline is the only timer before the
/// periodic refresh.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn an_idle_client_is_closed_after_timeout_seconds_of_quiet() {
    let node = FakeNode::cluster_alone(|_| Answer::text("$1\r\nv\r\n"));
    let proxy = start_proxy(&node, "timeout: 2\n").await;
    let mut client = client(&proxy).await;
    // The scenario: quiet for less than the timeout, then a command restarts the clock.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(call(&mut client, &["GET", "k"]).await, "$1\r\nv\r\n");
    assert_closed_after_2_s_of_quiet(&mut client, Instant::now()).await;
}

/// Sound: the slow GET is answered 3 s after the proxy forwarded it (the node's own timer),
/// the quiet after it starts when the proxy writes that reply, and the idle deadline is the
/// only timer before the periodic refresh. The timeout counts from the reply, as in Redis,
/// also where the reply of the client's last request leaves from within its session's wait
/// (which then starts the clock itself): waiting on a reply longer than the timeout is not
/// idling, and the quiet after it is closed at the timeout, not before, not much later.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn the_idle_clock_starts_at_a_slow_reply_not_at_its_request() {
    let node = FakeNode::cluster_alone(|request| {
        if request
            .args
            .get(1)
            .is_some_and(|key| key.as_slice() == b"slow")
        {
            Answer::Later(Duration::from_secs(3), b"$1\r\ns\r\n".to_vec())
        } else {
            Answer::text("$1\r\nv\r\n")
        }
    });
    let proxy = start_proxy(&node, "timeout: 2\n").await;
    let mut client = client(&proxy).await;
    assert_eq!(call(&mut client, &["GET", "k"]).await, "$1\r\nv\r\n");
    let asked = Instant::now();
    assert_eq!(call(&mut client, &["GET", "slow"]).await, "$1\r\ns\r\n");
    let answered = Instant::now();
    assert!(
        answered - asked >= Duration::from_secs(3),
        "answered after {:?}",
        answered - asked
    );
    assert_closed_after_2_s_of_quiet(&mut client, answered).await;
}

/// Reads until the proxy closes `client`, which was last active at `active`: nothing may
/// come before the close, which must come 2 s after `active` (a `timeout: 2`), not before,
/// not much later; a client still open 5 s after fails the test rather than hanging it.
async fn assert_closed_after_2_s_of_quiet(client: &mut TcpStream, active: Instant) {
    let rest = tokio::time::timeout(Duration::from_secs(5), read_to_close(client))
        .await
        .expect("the client idled 5 s and is still open");
    let quiet = active.elapsed();
    assert!(rest.is_empty(), "sent before closing: {rest:?}");
    assert!(
        quiet >= Duration::from_secs(2) && quiet < Duration::from_millis(2100),
        "closed after {quiet:?} of quiet, not 2 s"
    );
}

/// A client closed by the proxy (here after a protocol error) keeps its connection, and so
/// its `maxclients` place, for the close linger (500 ms) while the proxy discards what it
/// still sends, unless it closes first. Sound: the linger starts at the instant the error
/// is written, and the only timers before the periodic refresh are the linger and the
/// test's own sleeps.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_closed_client_lingers_half_a_second_before_its_place_is_free() {
    let node = FakeNode::cluster_alone(|_| Answer::text("$1\r\nv\r\n"));
    let proxy = start_proxy(&node, "maxclients: 1\n").await;
    let mut closed = client(&proxy).await;
    closed.write_all(b"*x\r\n").await.expect("write");
    let error = read_reply(&mut closed).await;
    assert!(error.starts_with("-ERR Protocol error"), "{error}");
    let linger_started = Instant::now();
    assert!(read_to_close(&mut closed).await.is_empty());
    // Bytes sent during the linger are discarded, not answered with a reset.
    closed
        .write_all(&resp_command(&["PING"]))
        .await
        .expect("write");

    tokio::time::sleep(Duration::from_millis(450)).await;
    let mut refused = TcpStream::connect(&proxy).await.expect("connect");
    assert_eq!(
        read_reply(&mut refused).await,
        "-ERR max number of clients reached\r\n",
        "the place was free {:?} after the close",
        linger_started.elapsed()
    );

    tokio::time::sleep_until(linger_started + Duration::from_millis(510)).await;
    let mut admitted = TcpStream::connect(&proxy).await.expect("connect");
    assert_eq!(call(&mut admitted, &["GET", "k"]).await, "$1\r\nv\r\n");
    drop(closed);
}
