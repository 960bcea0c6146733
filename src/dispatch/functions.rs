//! Redis Functions across masters. FUNCTION LOAD/DELETE/FLUSH/RESTORE go to every master
//! (see `fanout`), but a master that joined the cluster later, or restarted without its
//! data, has none of the libraries: FCALL for a key it owns answers "Function not found"
//! where a single Redis would run the function.
//!
//! On that answer the proxy looks for a master that has the function, copies its
//! libraries (FUNCTION DUMP, then FUNCTION RESTORE with the default APPEND policy) to every
//! master that lacks it, and runs the FCALL once more. APPEND never replaces a library: a
//! master that holds a different library of the same name refuses the copy, and the client
//! gets the node's original answer.

use bytes::Bytes;
use futures_util::future::join_all;

use crate::protocol::{encode, Proto, Request};

use super::{Proxy, Target};

/// The node's answer to FCALL of a function it does not have.
const NOT_FOUND: &[u8] = b"-ERR Function not found";

impl Proxy {
    /// FCALL / FCALL_RO: forwarded; on "Function not found", the libraries are copied to
    /// the masters without the function and the call is made again.
    pub(super) async fn run_function(
        &self,
        target: Target,
        request: &Request,
        proto: Proto,
    ) -> Bytes {
        let reply = self
            .upstream
            .run_script_alone(target, request.raw.clone(), proto)
            .await;
        if !reply.starts_with(NOT_FOUND) {
            return reply;
        }
        match request.args.get(1) {
            Some(name) if self.copy_function_everywhere(name).await => {
                self.upstream
                    .run_script_alone(target, request.raw.clone(), proto)
                    .await
            }
            _ => reply,
        }
    }

    /// Copies the libraries of the first master that has function `name` to each master
    /// that does not; whether every master has it afterwards.
    async fn copy_function_everywhere(&self, name: &[u8]) -> bool {
        let Ok(masters) = self.masters_in_order().await else {
            return false;
        };
        let list = encode::encode_request(&[b"FUNCTION", b"LIST"]);
        let lists = join_all(
            masters
                .iter()
                .map(|addr| self.call_node(addr, list.clone(), Proto::Resp2)),
        )
        .await;
        let has: Vec<bool> = lists.iter().map(|l| lists_function(l, name)).collect();
        let Some(source) = has.iter().position(|&h| h) else {
            return false;
        };
        let dump = encode::encode_request(&[b"FUNCTION", b"DUMP"]);
        let payload = self.call_node(&masters[source], dump, Proto::Resp2).await;
        let Some(payload) = bulk_body(&payload) else {
            return false;
        };
        let restore = encode::encode_request(&[b"FUNCTION", b"RESTORE", payload]);
        let copies = masters
            .iter()
            .zip(&has)
            .filter(|(_, has)| !**has)
            .map(|(addr, _)| self.call_node(addr, restore.clone(), Proto::Resp2));
        let restored = join_all(copies).await;
        let failed: Vec<String> = restored
            .iter()
            .filter(|reply| !reply.starts_with(b"+OK"))
            .map(|reply| String::from_utf8_lossy(&reply[..reply.len().min(200)]).into_owned())
            .collect();
        if !failed.is_empty() {
            tracing::warn!(?failed, "copying function libraries to a master failed");
        }
        failed.is_empty()
    }
}

/// Whether a RESP2 FUNCTION LIST reply names function `name` (Redis matches function
/// names without regard to case). Each function appears as `name`, then its name.
fn lists_function(reply: &[u8], name: &[u8]) -> bool {
    let mut needle = format!("$4\r\nname\r\n${}\r\n", name.len()).into_bytes();
    needle.extend_from_slice(name);
    needle.extend_from_slice(b"\r\n");
    reply
        .windows(needle.len())
        .any(|window| window.eq_ignore_ascii_case(&needle))
}

/// The body of a RESP bulk string frame.
fn bulk_body(frame: &[u8]) -> Option<&[u8]> {
    let rest = frame.strip_prefix(b"$")?;
    let end = rest.iter().position(|&b| b == b'\r')?;
    let len: usize = std::str::from_utf8(&rest[..end]).ok()?.parse().ok()?;
    rest.get(end + 2..end + 2 + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &[u8] = b"*1\r\n*6\r\n$12\r\nlibrary_name\r\n$5\r\nmylib\r\n$6\r\nengine\r\n$3\r\nLUA\r\n$9\r\nfunctions\r\n*1\r\n*6\r\n$4\r\nname\r\n$5\r\nmyfun\r\n$11\r\ndescription\r\n$-1\r\n$5\r\nflags\r\n*0\r\n";

    #[test]
    fn a_function_is_found_by_its_name_in_any_case_and_not_by_its_library_name() {
        assert!(lists_function(LIST, b"myfun"));
        assert!(lists_function(LIST, b"MyFun"));
        assert!(!lists_function(LIST, b"mylib"));
        assert!(!lists_function(LIST, b"myfu"));
        assert!(!lists_function(b"*0\r\n", b"myfun"));
    }

    #[test]
    fn bulk_bodies_are_cut_by_their_length() {
        assert_eq!(bulk_body(b"$3\r\na\r\n\r\n"), Some(&b"a\r\n"[..]));
        assert_eq!(bulk_body(b"$0\r\n\r\n"), Some(&b""[..]));
        assert_eq!(bulk_body(b"-ERR x\r\n"), None);
        assert_eq!(bulk_body(b"$5\r\nab\r\n"), None);
    }
}
