//! Classifying a backend error reply: redirect, retryable, or final.
//!
//! Only the first bytes of a reply are inspected, and nothing is allocated unless the
//! reply is a redirect, so every error passing through the proxy can be checked.

use super::slot_map::{join_host_port, split_host_port, NodeAddr};
use super::SLOT_COUNT;

/// How Redis 7 ends a blocking command whose master turns into a replica, after `UNBLOCKED `
/// (`-UNBLOCKED force unblock from blocking operation, instance state changed (master ->
/// replica?)`).
const DEMOTED_WHILE_BLOCKED: &[u8] =
    b"force unblock from blocking operation, instance state changed";

/// What an error reply from a cluster node asks the proxy to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {
    /// `-MOVED <slot> <addr>`: the slot lives on `addr` now; update the map and resend.
    Moved {
        /// The slot that moved.
        slot: u16,
        /// Canonical `host:port` of the new owner, before address remapping.
        addr: NodeAddr,
    },
    /// `-ASK <slot> <addr>`: send `ASKING` plus the command to `addr`, once.
    Ask {
        /// The slot being migrated.
        slot: u16,
        /// Canonical `host:port` of the importing node, before address remapping.
        addr: NodeAddr,
    },
    /// `-TRYAGAIN`: a multi-key command hit a slot being migrated; retry later.
    TryAgain,
    /// `-CLUSTERDOWN`: the cluster (or this slot) is not served right now; retry later.
    ClusterDown,
    /// `-LOADING`: the node is loading its dataset; retry later.
    Loading,
    /// `-MASTERDOWN`: a replica lost its master; retry later (a failover may follow).
    MasterDown,
    /// `-READONLY`: a write reached a replica (usually just after a failover); retry later.
    /// Also a blocking command's `-UNBLOCKED force unblock ... instance state changed`: its
    /// node became a replica while it waited, and nothing was served.
    ReadOnly,
    /// `-NOSCRIPT`: EVALSHA of a script this node has not loaded.
    NoScript,
}

impl Redirect {
    /// Classifies a raw error frame (`-MOVED 3999 127.0.0.1:6381\r\n`). `from` is the
    /// `host:port` of the node that answered, used for the Redis 7 form with an empty host
    /// (`-MOVED 3999 :6381`). Anything that is not one of the known answers is `None`.
    pub fn classify(error_reply: &[u8], from: &str) -> Option<Redirect> {
        let text = error_text(error_reply)?;
        let (code, rest) = match text.iter().position(|&b| b == b' ') {
            Some(space) => (&text[..space], &text[space + 1..]),
            None => (text, &[][..]),
        };
        match code {
            b"MOVED" => {
                let (slot, addr) = slot_and_addr(rest, from)?;
                Some(Redirect::Moved { slot, addr })
            }
            b"ASK" => {
                let (slot, addr) = slot_and_addr(rest, from)?;
                Some(Redirect::Ask { slot, addr })
            }
            b"TRYAGAIN" => Some(Redirect::TryAgain),
            b"CLUSTERDOWN" => Some(Redirect::ClusterDown),
            b"LOADING" => Some(Redirect::Loading),
            b"MASTERDOWN" => Some(Redirect::MasterDown),
            b"READONLY" => Some(Redirect::ReadOnly),
            // Only the demotion: CLIENT UNBLOCK ... ERROR also answers -UNBLOCKED, and that
            // one is the client's to see.
            b"UNBLOCKED" if rest.starts_with(DEMOTED_WHILE_BLOCKED) => Some(Redirect::ReadOnly),
            b"NOSCRIPT" => Some(Redirect::NoScript),
            _ => None,
        }
    }

    /// A short lowercase label for metrics: `tryagain`, `clusterdown`, `loading`,
    /// `masterdown`, `readonly`, and `moved`, `ask`, `noscript` for the others.
    pub fn retry_reason(&self) -> &'static str {
        match self {
            Redirect::Moved { .. } => "moved",
            Redirect::Ask { .. } => "ask",
            Redirect::TryAgain => "tryagain",
            Redirect::ClusterDown => "clusterdown",
            Redirect::Loading => "loading",
            Redirect::MasterDown => "masterdown",
            Redirect::ReadOnly => "readonly",
            Redirect::NoScript => "noscript",
        }
    }

    /// Whether the answer means "nothing ran, the same command may succeed later":
    /// retried with backoff on the same route.
    pub fn is_retry_later(&self) -> bool {
        matches!(
            self,
            Redirect::TryAgain
                | Redirect::ClusterDown
                | Redirect::Loading
                | Redirect::MasterDown
                | Redirect::ReadOnly
        )
    }
}

/// The error text of a `-` simple error or a `!` blob error, without type byte and CRLF.
fn error_text(reply: &[u8]) -> Option<&[u8]> {
    let body = match reply.first()? {
        b'-' => &reply[1..],
        b'!' => {
            let header_end = reply.iter().position(|&b| b == b'\n')?;
            reply.get(header_end + 1..)?
        }
        _ => return None,
    };
    let end = body.iter().position(|&b| b == b'\r').unwrap_or(body.len());
    Some(&body[..end])
}

/// Parses `<slot> <host:port>`; an empty host means the host of `from`.
fn slot_and_addr(rest: &[u8], from: &str) -> Option<(u16, NodeAddr)> {
    let rest = std::str::from_utf8(rest).ok()?;
    let (slot, addr) = rest.split_once(' ')?;
    let slot = slot
        .parse::<u16>()
        .ok()
        .filter(|&s| usize::from(s) < SLOT_COUNT)?;
    let (host, port) = split_host_port(addr.trim_end())?;
    let host = if host.is_empty() {
        split_host_port(from).map(|(from_host, _)| from_host)?
    } else {
        host
    };
    Some((slot, NodeAddr::from(join_host_port(host, port))))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FROM: &str = "10.0.0.1:7000";

    fn moved(slot: u16, addr: &str) -> Option<Redirect> {
        Some(Redirect::Moved {
            slot,
            addr: NodeAddr::from(addr),
        })
    }

    #[test]
    fn moved_and_ask() {
        assert_eq!(
            Redirect::classify(b"-MOVED 3999 127.0.0.1:6381\r\n", FROM),
            moved(3999, "127.0.0.1:6381")
        );
        assert_eq!(
            Redirect::classify(b"-ASK 3999 127.0.0.1:6381\r\n", FROM),
            Some(Redirect::Ask {
                slot: 3999,
                addr: NodeAddr::from("127.0.0.1:6381")
            })
        );
        assert_eq!(
            Redirect::classify(b"-MOVED 16383 node-b.example:7001\r\n", FROM),
            moved(16383, "node-b.example:7001")
        );
    }

    #[test]
    fn empty_host_means_the_answering_node() {
        assert_eq!(
            Redirect::classify(b"-MOVED 3999 :6381\r\n", FROM),
            moved(3999, "10.0.0.1:6381")
        );
        assert_eq!(
            Redirect::classify(b"-MOVED 3999 :6381\r\n", "[::1]:7000"),
            moved(3999, "[::1]:6381")
        );
    }

    #[test]
    fn ipv6_addresses_become_bracketed() {
        assert_eq!(
            Redirect::classify(b"-MOVED 1 [::1]:6381\r\n", FROM),
            moved(1, "[::1]:6381")
        );
        // Redis formats IPv6 redirects as `ip:port` without brackets.
        assert_eq!(
            Redirect::classify(b"-ASK 1 fe80::1:6381\r\n", FROM),
            Some(Redirect::Ask {
                slot: 1,
                addr: NodeAddr::from("[fe80::1]:6381")
            })
        );
    }

    #[test]
    fn retryable_answers_use_redis_texts() {
        let cases: [(&[u8], Redirect, &str); 7] = [
            (
                b"-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
                Redirect::TryAgain,
                "tryagain",
            ),
            (
                b"-CLUSTERDOWN The cluster is down\r\n",
                Redirect::ClusterDown,
                "clusterdown",
            ),
            (
                b"-CLUSTERDOWN Hash slot not served\r\n",
                Redirect::ClusterDown,
                "clusterdown",
            ),
            (
                b"-LOADING Redis is loading the dataset in memory\r\n",
                Redirect::Loading,
                "loading",
            ),
            (
                b"-MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.\r\n",
                Redirect::MasterDown,
                "masterdown",
            ),
            (
                b"-READONLY You can't write against a read only replica.\r\n",
                Redirect::ReadOnly,
                "readonly",
            ),
            (
                b"-UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)\r\n",
                Redirect::ReadOnly,
                "readonly",
            ),
        ];
        for (reply, expected, reason) in cases {
            let got = Redirect::classify(reply, FROM).unwrap();
            assert_eq!(got, expected);
            assert_eq!(got.retry_reason(), reason);
            assert!(got.is_retry_later());
        }
        let noscript =
            Redirect::classify(b"-NOSCRIPT No matching script. Please use EVAL.\r\n", FROM);
        assert_eq!(noscript, Some(Redirect::NoScript));
        assert!(!Redirect::NoScript.is_retry_later());
        assert!(!moved(1, "h:1").unwrap().is_retry_later());
        // CLIENT UNBLOCK id ERROR: the client asked for it, it is not retried.
        let unblock = b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n";
        assert_eq!(Redirect::classify(unblock, FROM), None);
    }

    #[test]
    fn blob_errors_are_read_too() {
        assert_eq!(
            Redirect::classify(b"!24\r\nMOVED 3999 127.0.0.1:6381\r\n", FROM),
            moved(3999, "127.0.0.1:6381")
        );
    }

    #[test]
    fn other_replies_are_not_redirects() {
        let replies: &[&[u8]] = &[
            b"",
            b"+OK\r\n",
            b"$5\r\nMOVED\r\n",
            b"-ERR unknown command 'FOO'\r\n",
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            b"-MOVEDX 1 h:1\r\n",
            b"-MOVED\r\n",
            b"-MOVED 16384 h:1\r\n",
            b"-MOVED -1 h:1\r\n",
            b"-MOVED 1 h\r\n",
            b"-MOVED 1 h:0\r\n",
            b"-MOVED 1 h:99999\r\n",
            b"-MOVED 1\r\n",
            b"-ASK x h:1\r\n",
            b"-TRYAGAINX\r\n",
            b"-MOVED 1 :1\r\n",
        ];
        for reply in replies {
            let from = if reply == b"-MOVED 1 :1\r\n" {
                "no-port"
            } else {
                FROM
            };
            assert_eq!(Redirect::classify(reply, from), None, "{reply:?}");
        }
    }
}
