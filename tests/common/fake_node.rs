//! A scripted stand-in for a Redis node ("expect these bytes, answer those"), only for the
//! faults a real `redis-server` cannot be made to produce on demand: a redirect loop, an ASK
//! to a node that is not importing, a reply lost after the request was sent, a node that
//! stops answering. Behaviour tests use real servers.
//!
//! The node parses each request, asks the test's script what to do with it ([`Answer`]), and
//! records what it saw: every request, the raw bytes per connection, and how many
//! connections were opened and closed by the peer.
//!
//! Invariant: the node runs on the tokio runtime of the code that starts it when there is one,
//! so a test with a paused clock drives the node on its own thread and nothing moves the
//! clock behind its back; started outside a runtime (a `#[test]`), it gets a thread and a
//! runtime of its own. Either way it lives as long as that runtime.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the node does with one request.
#[derive(Debug, Clone)]
pub enum Answer {
    /// Writes these bytes, which need not be one whole frame.
    Reply(Vec<u8>),
    /// Waits (on the runtime's clock), then writes these bytes.
    Later(Duration, Vec<u8>),
    /// Answers neither this request nor any later one on this connection, but keeps reading
    /// until the peer closes: a node that hangs.
    Hold,
    /// Closes the connection without answering.
    Close,
    /// Writes these bytes, then closes the connection.
    ReplyAndClose(Vec<u8>),
}

impl Answer {
    /// A reply given as text.
    pub fn text(reply: &str) -> Answer {
        Answer::Reply(reply.as_bytes().to_vec())
    }
}

/// One request as the node parsed it.
pub struct Request {
    /// The arguments, the command name first.
    pub args: Vec<Vec<u8>>,
    /// 1-based count of the requests this node handed to its script so far, this one included.
    pub n: usize,
    /// 1-based index of the connection it came on, in accept order.
    pub conn: usize,
}

impl Request {
    /// Whether the command is `name` (any case).
    pub fn is(&self, name: &str) -> bool {
        self.args
            .first()
            .is_some_and(|first| first.eq_ignore_ascii_case(name.as_bytes()))
    }
}

/// The test's script: what to do with each request that reaches it.
pub type Script = dyn Fn(&Request) -> Answer + Send + Sync;

/// Which node a cluster of fake nodes names as the owner of every slot; settable after the
/// nodes started, since they name each other.
#[derive(Clone, Default)]
pub struct SlotOwner(Arc<Mutex<u16>>);

impl SlotOwner {
    /// No owner yet (port 0); [`SlotOwner::set`] before the proxy starts.
    pub fn new() -> SlotOwner {
        SlotOwner::default()
    }

    /// Makes `node` the owner of every slot.
    pub fn set(&self, node: &FakeNode) {
        *self.0.lock().unwrap() = node.port();
    }

    fn port(&self) -> u16 {
        *self.0.lock().unwrap()
    }
}

/// What a fake node saw.
#[derive(Debug, Clone, Default)]
pub struct Seen {
    /// Every request, start-up questions included, in arrival order.
    pub requests: Vec<Vec<Vec<u8>>>,
    /// The raw bytes read on each connection, in accept order.
    pub bytes: Vec<Vec<u8>>,
    /// Connections the peer closed (read end of file or error).
    pub closed_by_peer: usize,
}

impl Seen {
    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.bytes.len()
    }
}

/// A scripted node on a free loopback port.
pub struct FakeNode {
    port: u16,
    seen: Arc<Mutex<Seen>>,
}

struct Shared {
    script: Box<Script>,
    /// `Some` for a cluster node: answers the proxy's start-up questions itself.
    owner: Option<SlotOwner>,
    seen: Arc<Mutex<Seen>>,
    scripted: Mutex<usize>,
}

impl FakeNode {
    /// A node that hands every request to `script`.
    pub fn start(script: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> FakeNode {
        FakeNode::bind(0, None, Box::new(script))
    }

    /// As [`FakeNode::start`], on `port` (a node that comes up where one was refused).
    pub fn start_on(
        port: u16,
        script: impl Fn(&Request) -> Answer + Send + Sync + 'static,
    ) -> FakeNode {
        FakeNode::bind(port, None, Box::new(script))
    }

    /// A cluster node: answers CLUSTER SLOTS with `owner` serving every slot, other CLUSTER
    /// subcommands, COMMAND and INFO with an error (the proxy then uses its built-in command
    /// table and version), ASKING with +OK; hands every other request to `script`.
    pub fn cluster(
        owner: &SlotOwner,
        script: impl Fn(&Request) -> Answer + Send + Sync + 'static,
    ) -> FakeNode {
        FakeNode::bind(0, Some(owner.clone()), Box::new(script))
    }

    /// A cluster node that owns every slot itself.
    pub fn cluster_alone(script: impl Fn(&Request) -> Answer + Send + Sync + 'static) -> FakeNode {
        let owner = SlotOwner::new();
        let node = FakeNode::cluster(&owner, script);
        owner.set(&node);
        node
    }

    fn bind(port: u16, owner: Option<SlotOwner>, script: Box<Script>) -> FakeNode {
        let listener = std::net::TcpListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("fake node cannot bind 127.0.0.1:{port}: {e}"));
        listener.set_nonblocking(true).expect("non-blocking");
        let port = listener.local_addr().expect("local addr").port();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let shared = Arc::new(Shared {
            script,
            owner,
            seen: seen.clone(),
            scripted: Mutex::new(0),
        });
        run(async move {
            let listener = TcpListener::from_std(listener).expect("tokio listener");
            while let Ok((stream, _)) = listener.accept().await {
                let conn = {
                    let mut seen = shared.seen.lock().unwrap();
                    seen.bytes.push(Vec::new());
                    seen.bytes.len()
                };
                tokio::spawn(serve(stream, conn, shared.clone()));
            }
        });
        FakeNode { port, seen }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// A copy of what the node saw so far.
    pub fn seen(&self) -> Seen {
        self.seen.lock().unwrap().clone()
    }

    /// The requests named `name` (any case) the node received.
    pub fn received(&self, name: &str) -> Vec<Vec<Vec<u8>>> {
        self.seen
            .lock()
            .unwrap()
            .requests
            .iter()
            .filter(|r| r[0].eq_ignore_ascii_case(name.as_bytes()))
            .cloned()
            .collect()
    }

    /// The raw bytes read on connection `conn` (1-based).
    pub fn bytes(&self, conn: usize) -> Vec<u8> {
        self.seen.lock().unwrap().bytes[conn - 1].clone()
    }
}

/// Runs `task` on the current runtime, or on a runtime of its own on a new thread.
fn run(task: impl Future<Output = ()> + Send + 'static) {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn(task);
        }
        Err(_) => {
            std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("fake node runtime")
                    .block_on(task)
            });
        }
    }
}

async fn serve(mut stream: TcpStream, conn: usize, shared: Arc<Shared>) {
    // Without it, a reply written while an earlier one is unacknowledged waits for the
    // peer's delayed ACK: real milliseconds in which a paused clock runs away.
    let _ = stream.set_nodelay(true);
    let mut buffer = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut out = Vec::new();
    let mut holding = false;
    loop {
        let n = match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                shared.seen.lock().unwrap().closed_by_peer += 1;
                return;
            }
            Ok(n) => n,
        };
        shared.seen.lock().unwrap().bytes[conn - 1].extend_from_slice(&chunk[..n]);
        buffer.extend_from_slice(&chunk[..n]);
        // The answers to the requests of one read leave in one write, as a server's do.
        while let Some((args, used)) = parse_request(&buffer) {
            buffer.drain(..used);
            shared.seen.lock().unwrap().requests.push(args.clone());
            if holding {
                continue;
            }
            let answer = match startup_answer(&args, shared.owner.as_ref()) {
                Some(answer) => answer,
                None => {
                    let n = {
                        let mut count = shared.scripted.lock().unwrap();
                        *count += 1;
                        *count
                    };
                    (shared.script)(&Request { args, n, conn })
                }
            };
            match answer {
                Answer::Reply(bytes) => out.extend_from_slice(&bytes),
                Answer::Later(wait, bytes) => {
                    if !flush(&mut stream, &mut out).await {
                        return;
                    }
                    tokio::time::sleep(wait).await;
                    out.extend_from_slice(&bytes);
                }
                Answer::Hold => holding = true,
                Answer::Close => {
                    let _ = flush(&mut stream, &mut out).await;
                    return;
                }
                Answer::ReplyAndClose(bytes) => {
                    out.extend_from_slice(&bytes);
                    let _ = flush(&mut stream, &mut out).await;
                    return;
                }
            }
        }
        if !flush(&mut stream, &mut out).await {
            return;
        }
    }
}

/// Writes and empties `out`; `false` when the peer is gone.
async fn flush(stream: &mut TcpStream, out: &mut Vec<u8>) -> bool {
    if out.is_empty() {
        return true;
    }
    let written = stream.write_all(out).await.is_ok();
    out.clear();
    written
}

/// A cluster node's own answer to the proxy's start-up questions; `None` for the script's.
fn startup_answer(args: &[Vec<u8>], owner: Option<&SlotOwner>) -> Option<Answer> {
    let owner = owner?;
    let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
    match name.as_str() {
        "CLUSTER"
            if args
                .get(1)
                .is_some_and(|a| a.eq_ignore_ascii_case(b"SLOTS")) =>
        {
            Some(Answer::Reply(cluster_slots(owner.port())))
        }
        "CLUSTER" | "COMMAND" | "INFO" => Some(Answer::text("-ERR unknown command\r\n")),
        "ASKING" => Some(Answer::text("+OK\r\n")),
        _ => None,
    }
}

/// A CLUSTER SLOTS reply: every slot served by the master on `port`.
fn cluster_slots(port: u16) -> Vec<u8> {
    format!(
        "*1\r\n*3\r\n:0\r\n:16383\r\n*3\r\n$9\r\n127.0.0.1\r\n:{port}\r\n$40\r\n{}\r\n",
        "f".repeat(40)
    )
    .into_bytes()
}

/// One multibulk request off the front of `buf`: its arguments and its length.
fn parse_request(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    fn line(buf: &[u8], from: usize) -> Option<(i64, usize)> {
        let end = buf.get(from..)?.windows(2).position(|w| w == b"\r\n")? + from;
        let n = std::str::from_utf8(&buf[from + 1..end])
            .ok()?
            .parse()
            .ok()?;
        Some((n, end + 2))
    }
    let (count, mut at) = line(buf, 0)?;
    let mut args = Vec::new();
    for _ in 0..count {
        let (len, start) = line(buf, at)?;
        let end = start + usize::try_from(len).ok()?;
        if buf.len() < end + 2 {
            return None;
        }
        args.push(buf[start..end].to_vec());
        at = end + 2;
    }
    Some((args, at))
}
