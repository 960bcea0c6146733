//! Replies the proxy writes itself: every client-visible error text lives here, worded like
//! Redis's own, so clients and their error matching see familiar messages.

pub mod access;
pub mod acl;
pub mod connection;
pub mod crossslot;
pub mod database;
pub mod merge;
pub mod refusals;
pub mod transaction;

use bytes::{BufMut, Bytes, BytesMut};

/// `-ERR` error replies with fixed text.
pub mod text {
    /// SELECT of a database at or above `databases`, or below 0.
    pub const SELECT_RANGE: &str = "ERR DB index is out of range";
    /// No master serves the slot, even after a topology refresh.
    pub const SLOT_UNSERVED: &str = "CLUSTERDOWN Hash slot not served";
    /// More MOVED/ASK hops than `retry.max_redirects` allows.
    pub const TOO_MANY_REDIRECTS: &str =
        "ERR proxy: too many redirects for this command (the cluster is resharding; try again)";
    /// HELLO with a protocol version other than 2 or 3.
    pub const NO_PROTO: &str = "NOPROTO unsupported protocol version";
    /// AUTH with a password when no password is configured.
    pub const AUTH_NOT_CONFIGURED: &str = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?";
    /// A command that arrives while the proxy drains.
    pub const SHUTTING_DOWN: &str = "ERR proxy: shutting down, no new commands accepted";
    /// Arguments that do not fit the command's syntax.
    pub const SYNTAX: &str = "ERR syntax error";
    /// SORT ... BY pattern from a user without access to every key, as Redis 7.
    pub const SORT_BY_DENIED: &str =
        "ERR BY option of SORT denied due to insufficient ACL permissions.";
    /// SORT ... GET pattern from a user without access to every key, as Redis 7.
    pub const SORT_GET_DENIED: &str =
        "ERR GET option of SORT denied due to insufficient ACL permissions.";
    /// A number argument that is not an integer, as Redis 7.
    pub const NOT_AN_INTEGER: &str = "ERR value is not an integer or out of range";
    /// A SCAN cursor the proxy did not hand out, as Redis 7.
    pub const INVALID_CURSOR: &str = "ERR invalid cursor";
    /// SORT of values that are not numbers (without ALPHA), as Redis 7.
    pub const SCORE_NOT_DOUBLE: &str = "ERR One or more scores can't be converted into double";
    /// A client over `maxclients`, as Redis 7 (written raw, before the connection closes).
    pub const MAX_CLIENTS: &[u8] = b"-ERR max number of clients reached\r\n";
    /// A node connection closed before answering.
    pub const NO_REPLY: &str = "ERR proxy: no reply";
    /// A pinned connection closed before answering EXEC.
    pub const NO_REPLY_TO_EXEC: &str = "ERR proxy: no reply to EXEC";
    /// A node answered SORT with something that is not a list.
    pub const SORT_UNEXPECTED_REPLY: &str = "ERR proxy: unexpected reply to SORT";
    /// A command sent to every master got different answers.
    pub const MASTERS_DISAGREE: &str =
        "ERR proxy: the masters gave different replies; check each master";
    /// A node answered SCAN with a cursor that is not a number.
    pub const NODE_SCAN_CURSOR: &str = "ERR unexpected SCAN cursor from a node";
    /// A layout listing cursor beyond what the proxy hands out.
    pub const LISTING_CURSOR_RANGE: &str = "ERR listing cursor out of range";
    /// A SCAN cursor that cannot share a cursor with a live migration's source phase.
    pub const LIVE_SCAN_CURSOR_RANGE: &str =
        "ERR proxy: SCAN cursor out of range during a live migration";
    /// An indexed layout write that names no key (a bug, never a client's doing).
    pub const INDEXED_WRITE_WITHOUT_KEYS: &str = "ERR internal: indexed write without keys";
    /// SUBSCRIBE and friends sent where no client connection holds them.
    pub const SUBSCRIBE_NEEDS_CLIENT: &str =
        "ERR proxy: subscriptions are only possible on a client connection";
}

/// A complete error frame `-<text>\r\n` (the text carries its own prefix, e.g. `ERR `).
pub fn error(text: &str) -> Bytes {
    let mut out = BytesMut::with_capacity(text.len() + 3);
    out.put_u8(b'-');
    // An error reply must be one line: a newline inside would split the frame.
    out.extend(
        text.bytes()
            .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
    );
    out.put_slice(b"\r\n");
    out.freeze()
}

/// `-ERR unknown command 'name', with args beginning with: 'a' 'b' ` exactly as Redis 7.
pub fn unknown_command(args: &[Bytes]) -> Bytes {
    let mut text = format!(
        "ERR unknown command '{}', with args beginning with: ",
        lossy(&args[0], 128)
    );
    for arg in args.iter().skip(1) {
        if text.len() >= 128 * 4 {
            break;
        }
        text.push_str(&format!("'{}' ", lossy(arg, 128)));
    }
    error(&text)
}

/// `-ERR unknown subcommand 'x'. Try CLIENT HELP.` as Redis 7.
pub fn unknown_subcommand(command: &str, sub: &[u8]) -> Bytes {
    error(&format!(
        "ERR unknown subcommand '{}'. Try {} HELP.",
        lossy(sub, 128),
        command.to_ascii_uppercase()
    ))
}

/// `-ERR wrong number of arguments for 'get' command` as Redis 7.
pub fn wrong_arity(name: &str) -> Bytes {
    error(&format!(
        "ERR wrong number of arguments for '{name}' command"
    ))
}

/// `-CROSSSLOT` naming the keys and their slots, so the user sees exactly why.
pub fn cross_slot(keys_and_slots: &[(&[u8], u16)]) -> Bytes {
    let mut text = String::from("CROSSSLOT Keys in request don't hash to the same slot (");
    for (i, (key, slot)) in keys_and_slots.iter().take(8).enumerate() {
        if i > 0 {
            text.push_str(", ");
        }
        text.push_str(&format!("'{}' -> {}", lossy(key, 64), slot));
    }
    if keys_and_slots.len() > 8 {
        text.push_str(&format!(", and {} more", keys_and_slots.len() - 8));
    }
    text.push(')');
    error(&text)
}

/// The reply for a command whose connection failed after it was written: the proxy cannot
/// know whether it ran, so it must not resend it.
pub fn outcome_unknown(node: &str, detail: &str) -> Bytes {
    error(&format!(
        "ERR proxy: connection to {node} failed after the command was sent ({detail}); its outcome is unknown"
    ))
}

/// The reply for a command that could not be delivered within the retry budget.
pub fn unavailable(node: &str, detail: &str) -> Bytes {
    error(&format!(
        "CLUSTERDOWN proxy: node {node} unavailable ({detail})"
    ))
}

/// Client input rendered for an error message: lossy UTF-8, control bytes hidden, capped.
fn lossy(bytes: &[u8], max: usize) -> String {
    let cut = &bytes[..bytes.len().min(max)];
    String::from_utf8_lossy(cut)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_command_matches_redis_wording() {
        let args = [Bytes::from_static(b"foo"), Bytes::from_static(b"bar")];
        assert_eq!(
            unknown_command(&args),
            Bytes::from_static(b"-ERR unknown command 'foo', with args beginning with: 'bar' \r\n")
        );
    }

    #[test]
    fn error_text_never_breaks_the_frame() {
        assert_eq!(error("ERR a\r\nb"), Bytes::from_static(b"-ERR a  b\r\n"));
    }

    #[test]
    fn cross_slot_names_keys() {
        let reply = cross_slot(&[(b"a", 15495), (b"b", 3300)]);
        let text = std::str::from_utf8(&reply).unwrap();
        assert!(text.starts_with("-CROSSSLOT Keys in request don't hash to the same slot"));
        assert!(text.contains("'a' -> 15495") && text.contains("'b' -> 3300"));
    }
}
