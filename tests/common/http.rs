//! A minimal HTTP/1.1 client for the proxy's admin port: one request per connection, the
//! whole response read until the server closes it.
//!
//! Invariants: a read waits at most 10 s (a hung endpoint fails the test instead of hanging
//! it); a response's Content-Length must match its body.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Sends raw bytes to the admin port at `addr` and returns (status, body).
pub fn http_raw(addr: &str, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let text = String::from_utf8(response).expect("response is UTF-8");
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no header end in {text:?}"));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("bad status line in {head:?}"));
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("Content-Length: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Content-Length in {head:?}"));
    assert_eq!(length, body.len(), "Content-Length matches the body");
    (status, body.to_string())
}

/// `GET path` on the admin port at `addr`: (status, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    http_raw(
        addr,
        format!("GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").as_bytes(),
    )
}
