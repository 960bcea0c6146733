//! `NodeConn` against real `redis-server` processes on loopback and against scripted fake
//! nodes for the cases a real server cannot be made to produce on demand.

mod common;

use std::net::TcpListener as StdListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{wait_until_async, Answer, FakeNode};
use futures_util::future::join_all;
use slotbridge::backend::{BackendError, BatchBuilder, ConnOptions, NodeConn, ReplySink};
use slotbridge::protocol::Proto;
use slotbridge::route::NodeAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A `redis-server` child on a free loopback port, killed on drop.
struct Server {
    child: Child,
    port: u16,
    _dir: TempDir,
}

impl Server {
    fn start(extra: &[&str]) -> Server {
        let port = free_port();
        let dir = TempDir::new(port);
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", dir.path.to_str().expect("utf-8 temp path")])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed");
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Server {
            child,
            port,
            _dir: dir,
        }
    }

    fn addr(&self) -> NodeAddr {
        NodeAddr::from(format!("127.0.0.1:{}", self.port))
    }

    /// Stops (`SIGSTOP`) or continues the server: stopped, it keeps its connections open
    /// (the kernel still acknowledges) but answers nothing, like a hung node.
    fn set_paused(&self, paused: bool) {
        let signal = if paused { "STOP" } else { "CONT" };
        let status = Command::new("kill")
            .args(["-s", signal, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -s {signal} failed");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A scratch directory for a server's files, removed on drop.
struct TempDir {
    path: std::path::PathBuf,
}

impl TempDir {
    fn new(tag: u16) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "slotbridge-backend-test-{}-{tag}",
            std::process::id()
        ));
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

fn free_port() -> u16 {
    let listener = StdListener::bind("127.0.0.1:0").expect("bind loopback");
    listener.local_addr().expect("local addr").port()
}

fn command(args: &[&str]) -> Bytes {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n{arg}\r\n", arg.len()).as_bytes());
    }
    Bytes::from(out)
}

fn bulk(value: &str) -> Bytes {
    Bytes::from(format!("${}\r\n{value}\r\n", value.len()))
}

async fn call(conn: &NodeConn, args: &[&str]) -> Bytes {
    conn.call(command(args), false)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// The text of a bulk string reply.
fn bulk_text(reply: &[u8]) -> String {
    let text = std::str::from_utf8(reply).expect("utf-8 reply");
    let (_, body) = text.split_once("\r\n").expect("bulk header");
    body.trim_end_matches("\r\n").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_calls_from_many_tasks_get_their_own_replies() {
    let server = Server::start(&[]);
    let conn = NodeConn::spawn(server.addr(), ConnOptions::default());
    const TASKS: usize = 50;
    const KEYS_PER_TASK: usize = 100;
    let tasks = (0..TASKS).map(|task| {
        let conn = conn.clone();
        tokio::spawn(async move {
            let keys: Vec<String> = (0..KEYS_PER_TASK)
                .map(|i| format!("k:{task}:{i}"))
                .collect();
            let sets = join_all(keys.iter().map(|key| {
                let value = format!("v:{key}");
                let conn = conn.clone();
                async move { conn.call(command(&["SET", key, &value]), false).await }
            }))
            .await;
            for reply in sets {
                assert_eq!(reply.unwrap(), Bytes::from_static(b"+OK\r\n"));
            }
            let gets = join_all(
                keys.iter()
                    .map(|key| conn.call(command(&["GET", key]), false)),
            )
            .await;
            for (key, reply) in keys.iter().zip(gets) {
                assert_eq!(reply.unwrap(), bulk(&format!("v:{key}")), "{key}");
            }
        })
    });
    for task in join_all(tasks).await {
        task.expect("task panicked");
    }
    assert!(conn.is_connected());
    let dbsize = call(&conn, &["DBSIZE"]).await;
    assert_eq!(
        dbsize,
        Bytes::from(format!(":{}\r\n", TASKS * KEYS_PER_TASK))
    );
}

#[tokio::test]
async fn auth_with_right_and_wrong_password() {
    let server = Server::start(&["--requirepass", "s3cret"]);
    let right = NodeConn::spawn(
        server.addr(),
        ConnOptions {
            password: Some("s3cret".into()),
            ..ConnOptions::default()
        },
    );
    assert_eq!(
        call(&right, &["PING"]).await,
        Bytes::from_static(b"+PONG\r\n")
    );
    assert!(right.is_connected());

    let wrong = NodeConn::spawn(
        server.addr(),
        ConnOptions {
            password: Some("wrong".into()),
            ..ConnOptions::default()
        },
    );
    match wrong.call(command(&["PING"]), false).await {
        Err(BackendError::NotSent(text)) => {
            assert!(text.contains("WRONGPASS"), "{text}");
            assert!(!text.contains("wrong\""), "{text}");
        }
        other => panic!("expected NotSent, got {other:?}"),
    }
    assert!(!wrong.is_connected());

    // Without a password the server's refusal is an ordinary reply.
    let anonymous = NodeConn::spawn(server.addr(), ConnOptions::default());
    let reply = call(&anonymous, &["PING"]).await;
    assert!(reply.starts_with(b"-NOAUTH"), "{reply:?}");
}

#[tokio::test]
async fn acl_user_and_resp3_handshake() {
    let server = Server::start(&[]);
    let admin = NodeConn::spawn(server.addr(), ConnOptions::default());
    let created = call(
        &admin,
        &["ACL", "SETUSER", "alice", "on", ">pw", "~*", "&*", "+@all"],
    )
    .await;
    assert_eq!(created, Bytes::from_static(b"+OK\r\n"));
    let conn = NodeConn::spawn(
        server.addr(),
        ConnOptions {
            proto: Proto::Resp3,
            username: Some("alice".into()),
            password: Some("pw".into()),
            ..ConnOptions::default()
        },
    );
    assert_eq!(
        call(&conn, &["ACL", "WHOAMI"]).await,
        Bytes::from_static(b"$5\r\nalice\r\n")
    );
    call(&conn, &["HSET", "h", "f", "v"]).await;
    // A RESP3 connection answers HGETALL with a map frame.
    assert_eq!(
        call(&conn, &["HGETALL", "h"]).await,
        Bytes::from_static(b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n")
    );

    let wrong_user = NodeConn::spawn(
        server.addr(),
        ConnOptions {
            proto: Proto::Resp3,
            username: Some("bob".into()),
            password: Some("pw".into()),
            ..ConnOptions::default()
        },
    );
    let result = wrong_user.call(command(&["PING"]), false).await;
    assert!(
        matches!(&result, Err(BackendError::NotSent(text)) if text.contains("WRONGPASS")),
        "{result:?}"
    );
}

#[tokio::test]
async fn resp2_connection_gets_flat_arrays() {
    let server = Server::start(&[]);
    let conn = NodeConn::spawn(server.addr(), ConnOptions::default());
    call(&conn, &["HSET", "h", "f", "v"]).await;
    assert_eq!(
        call(&conn, &["HGETALL", "h"]).await,
        Bytes::from_static(b"*2\r\n$1\r\nf\r\n$1\r\nv\r\n")
    );
}

/// Polls `args` on `conn` until the reply contains `needle`, for at most 15 s.
async fn wait_for(conn: &NodeConn, args: &[&str], needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let reply = call(conn, args).await;
        if String::from_utf8_lossy(&reply).contains(needle) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{args:?} never contained {needle}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn asking_reaches_an_importing_cluster_node() {
    // A standalone server refuses ASKING ("cluster support disabled"), so this needs two
    // cluster nodes: `owner` serves slot 12182 ("foo"), `importer` is importing it.
    let cluster_args = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        "--cluster-require-full-coverage",
        "no",
    ];
    let owner = Server::start(&cluster_args);
    let importer = Server::start(&cluster_args);
    let owner_conn = NodeConn::spawn(owner.addr(), ConnOptions::default());
    let importer_conn = NodeConn::spawn(importer.addr(), ConnOptions::default());
    call(&owner_conn, &["CLUSTER", "ADDSLOTSRANGE", "101", "16383"]).await;
    call(&importer_conn, &["CLUSTER", "ADDSLOTSRANGE", "0", "100"]).await;
    let owner_id = bulk_text(&call(&owner_conn, &["CLUSTER", "MYID"]).await);
    let port = owner.port.to_string();
    call(&importer_conn, &["CLUSTER", "MEET", "127.0.0.1", &port]).await;
    wait_for(&importer_conn, &["CLUSTER", "NODES"], &owner_id).await;
    wait_for(&importer_conn, &["CLUSTER", "INFO"], "cluster_state:ok").await;
    let importing = call(
        &importer_conn,
        &["CLUSTER", "SETSLOT", "12182", "IMPORTING", &owner_id],
    )
    .await;
    assert_eq!(importing, Bytes::from_static(b"+OK\r\n"));

    let plain = call(&importer_conn, &["GET", "foo"]).await;
    assert!(plain.starts_with(b"-"), "without ASKING: {plain:?}");

    // ASKING replies are swallowed, so each caller still gets its own reply, in order.
    let replies = join_all([
        importer_conn.call(command(&["SET", "foo", "bar"]), true),
        importer_conn.call(command(&["GET", "foo"]), true),
        importer_conn.call(command(&["GET", "foo"]), false),
        importer_conn.call(command(&["GET", "foo"]), true),
    ])
    .await;
    let replies: Vec<Bytes> = replies.into_iter().map(Result::unwrap).collect();
    assert_eq!(replies[0], Bytes::from_static(b"+OK\r\n"));
    assert_eq!(replies[1], bulk("bar"));
    assert!(replies[2].starts_with(b"-"), "{:?}", replies[2]);
    assert_eq!(replies[3], bulk("bar"));
}

/// A bare listener for the one test that scripts the socket itself (a node that does not
/// read for a while, so the proxy's socket buffer fills), which a [`FakeNode`] never does.
async fn silent_listener() -> (TcpListener, NodeAddr) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = NodeAddr::from(listener.local_addr().expect("addr").to_string());
    (listener, addr)
}

async fn read_exactly(stream: &mut tokio::net::TcpStream, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    stream.read_exact(&mut buf).await.expect("fake read");
    buf
}

fn node_addr(node: &FakeNode) -> NodeAddr {
    NodeAddr::from(node.addr())
}

#[tokio::test]
async fn lost_reply_is_reported_and_never_resent() {
    // First connection: takes the request, closes without answering. Second: answers.
    let node = FakeNode::start(|request| match request.conn {
        1 => Answer::Close,
        _ => Answer::text("+PONG\r\n"),
    });
    let conn = NodeConn::spawn(node_addr(&node), ConnOptions::default());
    let request = command(&["INCR", "counter"]);
    let ping = command(&["PING"]);
    let result = conn.call(request.clone(), false).await;
    assert!(matches!(result, Err(BackendError::Lost(_))), "{result:?}");
    assert_eq!(
        conn.call(ping.clone(), false).await.unwrap(),
        Bytes::from_static(b"+PONG\r\n")
    );
    assert_eq!(node.bytes(1), request.to_vec());
    // The first bytes on the new connection are the next request, not a resend.
    assert_eq!(node.bytes(2), ping.to_vec());
}

/// The first `count` deliveries to `sink`, as (sequence number, reply); panics after `within`.
async fn deliveries(
    sink: &ReplySink,
    count: usize,
    within: Duration,
) -> Vec<(u64, Result<Bytes, BackendError>)> {
    let mut got = Vec::new();
    tokio::time::timeout(within, async {
        while got.len() < count {
            let mut taken = Vec::new();
            sink.take(&mut taken).await;
            got.extend(taken.into_iter().map(|d| (d.seq, d.reply)));
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{count} deliveries within {within:?}"));
    got
}

/// A client batch is one write; its replies may straddle reads; when the connection drops,
/// the requests still unanswered are reported `Lost`, each exactly once.
#[tokio::test]
async fn batch_replies_arrive_tagged_and_unanswered_ones_are_lost() {
    // The second reply is cut in two writes 50 ms apart, so it reaches the proxy in two
    // reads; the third request is never answered.
    let node = FakeNode::start(|request| match request.n {
        1 => Answer::text(":1\r\n:"),
        2 => Answer::Later(Duration::from_millis(50), b"2\r\n".to_vec()),
        _ => Answer::Close,
    });
    let conn = NodeConn::spawn(node_addr(&node), ConnOptions::default());
    let requests = [
        command(&["INCR", "a"]),
        command(&["INCR", "b"]),
        command(&["INCR", "c"]),
    ];
    let written: Vec<u8> = requests.iter().flat_map(|r| r.to_vec()).collect();
    let sink = ReplySink::new();
    let mut batch = BatchBuilder::default();
    for (seq, request) in [7u64, 8, 12].into_iter().zip(&requests) {
        batch.push(request, seq);
    }
    conn.send_batch(batch.finish(sink.clone()));
    let got = deliveries(&sink, 3, Duration::from_secs(5)).await;
    assert_eq!(node.bytes(1), written, "one write, in order");
    assert_eq!(got[0], (7, Ok(Bytes::from_static(b":1\r\n"))));
    assert_eq!(got[1], (8, Ok(Bytes::from_static(b":2\r\n"))));
    assert!(
        matches!(&got[2], (12, Err(BackendError::Lost(_)))),
        "{:?}",
        got[2]
    );
}

/// Short requests gather in one write made by the writer task after the callers that are
/// ready have queued theirs; the request that fills the outbox to 64 is written by its caller
/// at once. The test blocks the runtime's only thread while it looks, so the writer task
/// cannot run then: what reaches the node was written by the caller. (So the node runs on a
/// thread of its own, not as a [`FakeNode`] on this runtime.)
#[tokio::test(flavor = "current_thread")]
async fn the_request_that_fills_the_outbox_is_written_by_its_caller() {
    const FULL: usize = 64;
    let listener = StdListener::bind("127.0.0.1:0").expect("bind");
    let addr = NodeAddr::from(listener.local_addr().expect("addr").to_string());
    let ping = command(&["PING"]);
    let ping_len = ping.len();
    let (received, arrivals) = std::sync::mpsc::channel::<usize>();
    let fake = std::thread::spawn(move || {
        use std::io::Write;
        let (mut stream, _) = listener.accept().expect("accept");
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0;
        while total < (FULL + 1) * ping_len {
            let n = common::read_some(&mut stream, &mut buf).expect("fake read");
            assert!(n > 0, "closed early");
            total += n;
            if total == ping_len {
                stream.write_all(b"+PONG\r\n").expect("fake write");
            }
            let _ = received.send(total);
        }
        let replies = b"+PONG\r\n".repeat(FULL);
        stream.write_all(&replies).expect("fake write");
    });
    let conn = NodeConn::spawn(addr, ConnOptions::default());
    assert_eq!(
        conn.call(ping.clone(), false).await.expect("first ping"),
        Bytes::from_static(b"+PONG\r\n")
    );
    assert_eq!(arrivals.recv().expect("first ping seen"), ping_len);
    let sink = ReplySink::new();
    let send = |seq: usize| {
        let mut batch = BatchBuilder::default();
        batch.push(&ping, seq as u64);
        conn.send_batch(batch.finish(sink.clone()));
    };
    for seq in 0..FULL - 1 {
        send(seq);
    }
    assert!(
        arrivals.recv_timeout(Duration::from_millis(200)).is_err(),
        "an outbox short of full waits for the writer task"
    );
    send(FULL - 1);
    let mut seen = ping_len;
    while seen < (FULL + 1) * ping_len {
        seen = arrivals
            .recv_timeout(Duration::from_secs(5))
            .expect("the full outbox was written without the writer task");
    }
    let got = deliveries(&sink, FULL, Duration::from_secs(5)).await;
    for (i, (seq, reply)) in got.into_iter().enumerate() {
        assert_eq!(
            (seq, reply),
            (i as u64, Ok(Bytes::from_static(b"+PONG\r\n")))
        );
    }
    fake.join().expect("fake node");
}

/// More than the socket buffers hold, queued while the node is not reading: the callers'
/// own writes (each request here is past the flush size) and the writer's wait for a
/// writable socket keep the requests whole and in order, and every reply reaches its request.
#[tokio::test]
async fn requests_past_the_socket_buffers_arrive_whole_and_in_order() {
    const REQUESTS: usize = 2000;
    let (listener, addr) = silent_listener().await;
    let conn = NodeConn::spawn(addr, ConnOptions::default());
    let value = "x".repeat(9 * 1024);
    let requests: Vec<Bytes> = (0..REQUESTS)
        .map(|i| command(&["SET", &format!("k{i}"), &value]))
        .collect();
    let written: Vec<u8> = requests.iter().flat_map(|r| r.iter().copied()).collect();
    let total = written.len();
    let fake = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.expect("accept");
        // Not reading yet: the proxy's socket buffer fills and its writes block.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let seen = read_exactly(&mut stream, total).await;
        let replies: String = (0..REQUESTS).map(|i| format!(":{i}\r\n")).collect();
        stream
            .write_all(replies.as_bytes())
            .await
            .expect("fake write");
        let mut rest = Vec::new();
        let _ = stream.read_to_end(&mut rest).await;
        seen
    });
    let sink = ReplySink::new();
    let send = |seq: usize| {
        let mut batch = BatchBuilder::default();
        batch.push(&requests[seq], seq as u64);
        conn.send_batch(batch.finish(sink.clone()));
    };
    send(0);
    while !conn.is_connected() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // One at a time with the connection up: each send writes what is queued itself.
    for seq in 1..REQUESTS {
        send(seq);
        tokio::task::yield_now().await;
    }
    let got = deliveries(&sink, REQUESTS, Duration::from_secs(20)).await;
    for (i, (seq, reply)) in got.into_iter().enumerate() {
        assert_eq!(seq, i as u64);
        assert_eq!(reply, Ok(Bytes::from(format!(":{i}\r\n"))), "request {i}");
    }
    drop(conn);
    let seen = tokio::time::timeout(Duration::from_secs(5), fake)
        .await
        .expect("connection not closed after the last handle was dropped")
        .expect("fake");
    let first_difference = seen.iter().zip(&written).position(|(a, b)| a != b);
    assert_eq!(first_difference, None, "bytes out of order");
    assert_eq!(seen.len(), written.len());
}

#[tokio::test]
async fn asking_is_written_before_the_request_and_its_ok_swallowed() {
    // The OK to ASKING, then a RESP3 push between replies (it belongs to nobody), then the
    // reply to the GET.
    let node = FakeNode::start(|request| {
        if request.is("ASKING") {
            Answer::text("+OK\r\n")
        } else {
            Answer::text(">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n$1\r\nv\r\n")
        }
    });
    let conn = NodeConn::spawn(node_addr(&node), ConnOptions::default());
    let request = command(&["GET", "k"]);
    let mut expected = b"*1\r\n$6\r\nASKING\r\n".to_vec();
    expected.extend_from_slice(&request);
    let reply = conn.call(request, true).await.unwrap();
    assert_eq!(reply, bulk("v"));
    drop(conn);
    // Dropping the last handle closes the connection (the node sees EOF).
    wait_until_async(
        "the close after the last handle was dropped",
        Duration::from_secs(5),
        || node.seen().closed_by_peer == 1,
    )
    .await;
    assert_eq!(node.bytes(1), expected);
}

#[tokio::test]
async fn connection_refused_fails_fast_as_not_sent() {
    let addr = NodeAddr::from(format!("127.0.0.1:{}", free_port()));
    let conn = NodeConn::spawn(addr, ConnOptions::default());
    let started = Instant::now();
    for _ in 0..3 {
        let result = conn.call(command(&["PING"]), false).await;
        assert!(
            matches!(result, Err(BackendError::NotSent(_))),
            "{result:?}"
        );
    }
    assert!(started.elapsed() < Duration::from_millis(500));
    assert!(!conn.is_connected());
}

#[tokio::test]
async fn reconnects_after_backoff_when_the_node_comes_up() {
    let port = free_port();
    let addr: NodeAddr = Arc::from(format!("127.0.0.1:{port}"));
    let conn = NodeConn::spawn(addr, ConnOptions::default());
    let refused = conn.call(command(&["PING"]), false).await;
    assert!(
        matches!(refused, Err(BackendError::NotSent(_))),
        "{refused:?}"
    );
    let node = FakeNode::start_on(port, |_| Answer::text("+PONG\r\n"));
    // The first retry window is short; keep asking within a bounded time.
    let deadline = Instant::now() + Duration::from_secs(3);
    let reply = loop {
        match conn.call(command(&["PING"]), false).await {
            Ok(reply) => break reply,
            Err(BackendError::NotSent(_)) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(other) => panic!("{other:?}"),
        }
    };
    assert_eq!(reply, Bytes::from_static(b"+PONG\r\n"));
    assert!(conn.is_connected());
    assert_eq!(node.seen().connections(), 1);
}

#[tokio::test]
async fn without_reconnect_a_lost_connection_is_not_replaced() {
    let node = FakeNode::start(|_| Answer::ReplyAndClose(b"+PONG\r\n".to_vec()));
    let opts = ConnOptions {
        reconnect: false,
        ..ConnOptions::default()
    };
    let conn = NodeConn::spawn(node_addr(&node), opts);
    let ping = command(&["PING"]);
    assert_eq!(
        conn.call(ping.clone(), false).await.unwrap(),
        Bytes::from_static(b"+PONG\r\n")
    );
    wait_until_async("the close noticed", Duration::from_secs(3), || {
        !conn.is_connected()
    })
    .await;
    // Refused at once, without a new connection: each call would have made one.
    for _ in 0..2 {
        let result = conn.call(ping.clone(), false).await;
        assert!(
            matches!(result, Err(BackendError::NotSent(_))),
            "{result:?}"
        );
    }
    assert_eq!(
        node.seen().connections(),
        1,
        "a second connection was opened"
    );
}

#[tokio::test]
async fn prelude_requests_go_first_and_their_replies_reach_no_caller() {
    // Even an error to the prelude is no caller's reply.
    let node = FakeNode::start(|request| match request.n {
        1 => Answer::text("-ERR prelude refused\r\n"),
        _ => Answer::text("+PONG\r\n"),
    });
    let load = command(&["SCRIPT", "LOAD", "return 1"]);
    let prelude_request = load.clone();
    let opts = ConnOptions {
        prelude: Some(Arc::new(move || vec![prelude_request.clone()])),
        ..ConnOptions::default()
    };
    let conn = NodeConn::spawn(node_addr(&node), opts);
    let ping = command(&["PING"]);
    assert_eq!(
        conn.call(ping.clone(), false).await.unwrap(),
        Bytes::from_static(b"+PONG\r\n")
    );
    let mut expected = load.to_vec();
    expected.extend_from_slice(&ping);
    assert_eq!(node.bytes(1), expected);
}

#[tokio::test]
async fn a_node_that_stops_answering_fails_what_is_due_after_the_read_timeout() {
    let server = Server::start(&[]);
    let opts = ConnOptions {
        read_timeout: Some(Duration::from_millis(200)),
        ..ConnOptions::default()
    };
    let conn = NodeConn::spawn(server.addr(), opts);
    assert_eq!(call(&conn, &["SET", "k", "v"]).await, "+OK\r\n");
    // Quiet with nothing due is not a stall.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(conn.is_connected(), "an idle connection was closed");
    assert_eq!(call(&conn, &["GET", "k"]).await, bulk("v"));

    server.set_paused(true);
    let started = Instant::now();
    let replies = join_all([
        conn.call(command(&["GET", "k"]), false),
        conn.call(command(&["PING"]), false),
    ])
    .await;
    let elapsed = started.elapsed();
    server.set_paused(false);
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
        elapsed >= Duration::from_millis(200) && elapsed < Duration::from_secs(2),
        "failed after {elapsed:?}, not between the timeout and a small multiple of it"
    );
    // Once the node answers again, the next request gets a new connection.
    assert_eq!(call(&conn, &["GET", "k"]).await, bulk("v"));
}

/// After a read timeout the socket is closed at once, not when the next request for the
/// node replaces it: a hung node is not left holding a half-open connection.
#[tokio::test]
async fn a_read_timeout_closes_the_connection_at_once() {
    // Never answers; reads until the other side hangs up.
    let node = FakeNode::start(|_| Answer::Hold);
    let opts = ConnOptions {
        read_timeout: Some(Duration::from_millis(200)),
        ..ConnOptions::default()
    };
    let conn = NodeConn::spawn(node_addr(&node), opts);
    let request = command(&["GET", "k"]);
    let reply = conn.call(request.clone(), false).await;
    assert!(matches!(reply, Err(BackendError::Lost(_))), "{reply:?}");
    wait_until_async(
        "the close of the connection after the read timeout",
        Duration::from_secs(3),
        || node.seen().closed_by_peer == 1,
    )
    .await;
    assert_eq!(node.bytes(1), request.to_vec(), "nothing more was written");
    assert!(!conn.is_connected());
}

#[tokio::test]
async fn without_a_read_timeout_a_stopped_node_is_waited_for() {
    let server = Server::start(&[]);
    let conn = NodeConn::spawn(server.addr(), ConnOptions::default());
    assert_eq!(call(&conn, &["SET", "k", "v"]).await, "+OK\r\n");
    server.set_paused(true);
    let reply = conn.call(command(&["GET", "k"]), false);
    tokio::pin!(reply);
    let early = tokio::time::timeout(Duration::from_millis(700), &mut reply).await;
    server.set_paused(false);
    assert!(
        early.is_err(),
        "answered while the node was stopped: {early:?}"
    );
    assert_eq!(
        reply.await.expect("the reply, once the node runs"),
        bulk("v")
    );
}
