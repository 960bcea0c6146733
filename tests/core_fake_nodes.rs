//! Corner cases a real cluster won't produce on demand, against scripted fake nodes that
//! record the exact bytes the proxy sends: ASK, redirect loops, CLUSTERDOWN retries, and a
//! connection dropped after the command was sent.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use common::Proxy;

/// What a fake node does with one request.
enum Action {
    Reply(Vec<u8>),
    /// Close the connection without answering.
    Close,
}

type Handler = dyn Fn(&[Vec<u8>], usize) -> Action + Send + Sync;

/// A scripted node: answers the proxy's start-up questions (every slot is served by
/// `owner`; COMMAND and INFO are errors), hands everything else to `handler` with a per-node count of such requests,
/// and records every request and every raw read.
struct FakeNode {
    port: u16,
    requests: Arc<Mutex<Vec<Vec<Vec<u8>>>>>,
    reads: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl FakeNode {
    fn start(owner: Arc<Mutex<u16>>, handler: Arc<Handler>) -> FakeNode {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let reads = Arc::new(Mutex::new(Vec::new()));
        let counter = Arc::new(Mutex::new(0usize));
        let (req, rd) = (requests.clone(), reads.clone());
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (owner, handler, req, rd, counter) = (
                    owner.clone(),
                    handler.clone(),
                    req.clone(),
                    rd.clone(),
                    counter.clone(),
                );
                thread::spawn(move || serve(stream, owner, handler, req, rd, counter));
            }
        });
        FakeNode {
            port,
            requests,
            reads,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The requests named `name` this node received.
    fn received(&self, name: &str) -> Vec<Vec<Vec<u8>>> {
        let requests = self.requests.lock().unwrap();
        requests
            .iter()
            .filter(|r| r[0].eq_ignore_ascii_case(name.as_bytes()))
            .cloned()
            .collect()
    }
}

fn serve(
    mut stream: TcpStream,
    owner: Arc<Mutex<u16>>,
    handler: Arc<Handler>,
    requests: Arc<Mutex<Vec<Vec<Vec<u8>>>>>,
    reads: Arc<Mutex<Vec<Vec<u8>>>>,
    counter: Arc<Mutex<usize>>,
) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        reads.lock().unwrap().push(chunk[..n].to_vec());
        buffer.extend_from_slice(&chunk[..n]);
        while let Some((args, used)) = parse_request(&buffer) {
            buffer.drain(..used);
            requests.lock().unwrap().push(args.clone());
            let name = String::from_utf8_lossy(&args[0]).to_ascii_uppercase();
            let action = match name.as_str() {
                "CLUSTER" if args[1].eq_ignore_ascii_case(b"SLOTS") => {
                    Action::Reply(cluster_slots(*owner.lock().unwrap()))
                }
                // Start-up questions with no scripted answer (COMMAND, INFO server): the
                // proxy falls back to its built-in table and version.
                "CLUSTER" | "COMMAND" | "INFO" => {
                    Action::Reply(b"-ERR unknown command\r\n".to_vec())
                }
                "ASKING" => Action::Reply(b"+OK\r\n".to_vec()),
                _ => {
                    let mut count = counter.lock().unwrap();
                    *count += 1;
                    handler(&args, *count)
                }
            };
            match action {
                Action::Reply(bytes) => {
                    if stream.write_all(&bytes).is_err() {
                        return;
                    }
                }
                Action::Close => return,
            }
        }
    }
}

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
        let end = buf[from..].windows(2).position(|w| w == b"\r\n")? + from;
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
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return None;
        }
        args.push(buf[start..end].to_vec());
        at = end + 2;
    }
    Some((args, at))
}

fn get(proxy: &Proxy, key: &str) -> redis::RedisResult<String> {
    let mut con = proxy.client().get_connection()?;
    redis::cmd("GET").arg(key).query(&mut con)
}

#[test]
fn ask_sends_asking_then_the_command_to_the_target() {
    let owner = Arc::new(Mutex::new(0));
    let target = FakeNode::start(
        owner.clone(),
        Arc::new(|_args: &[Vec<u8>], _| Action::Reply(b"$6\r\nmoved!\r\n".to_vec())),
    );
    let target_addr = target.addr();
    let source = FakeNode::start(
        owner.clone(),
        Arc::new(move |_args: &[Vec<u8>], _| {
            Action::Reply(format!("-ASK 1234 {target_addr}\r\n").into_bytes())
        }),
    );
    *owner.lock().unwrap() = source.port;
    let proxy = Proxy::start(&["--cluster", &source.addr()]);
    assert_eq!(get(&proxy, "k").unwrap(), "moved!");
    // The target got ASKING immediately followed by the command, in one write.
    let reads = target.reads.lock().unwrap().concat();
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
    let owner = Arc::new(Mutex::new(0));
    let other = Arc::new(Mutex::new(String::new()));
    let o = other.clone();
    let a = FakeNode::start(
        owner.clone(),
        Arc::new(move |_args: &[Vec<u8>], _| {
            Action::Reply(format!("-MOVED 7 {}\r\n", o.lock().unwrap()).into_bytes())
        }),
    );
    let a_addr = a.addr();
    let b = FakeNode::start(
        owner.clone(),
        Arc::new(move |_args: &[Vec<u8>], _| {
            Action::Reply(format!("-MOVED 7 {a_addr}\r\n").into_bytes())
        }),
    );
    *other.lock().unwrap() = b.addr();
    *owner.lock().unwrap() = a.port;
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
    let owner = Arc::new(Mutex::new(0));
    let node = FakeNode::start(
        owner.clone(),
        Arc::new(|_args: &[Vec<u8>], n| {
            if n <= 2 {
                Action::Reply(b"-CLUSTERDOWN The cluster is down\r\n".to_vec())
            } else {
                Action::Reply(b"$5\r\nvalue\r\n".to_vec())
            }
        }),
    );
    *owner.lock().unwrap() = node.port;
    let proxy = Proxy::start(&["--cluster", &node.addr()]);
    assert_eq!(get(&proxy, "k").unwrap(), "value");
    assert_eq!(node.received("GET").len(), 3);
}

#[test]
fn a_reply_lost_after_sending_is_never_resent() {
    let owner = Arc::new(Mutex::new(0));
    let node = FakeNode::start(
        owner.clone(),
        Arc::new(|_args: &[Vec<u8>], _| Action::Close),
    );
    *owner.lock().unwrap() = node.port;
    let proxy = Proxy::start(&["--cluster", &node.addr()]);
    let mut con = proxy.client().get_connection().unwrap();
    let err = redis::cmd("INCR")
        .arg("k")
        .query::<i64>(&mut con)
        .unwrap_err()
        .to_string();
    assert!(err.contains("outcome is unknown"), "{err}");
    thread::sleep(Duration::from_millis(500));
    assert_eq!(
        node.received("INCR").len(),
        1,
        "INCR must reach the node exactly once"
    );
    // The client's connection is still usable.
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}
