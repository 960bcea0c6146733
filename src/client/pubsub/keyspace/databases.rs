//! Keyspace notifications of the databases other than 0 (`SELECT n`, stored as the key
//! prefix `__db<n>:`, see `rewrite::database`). The cluster publishes every notification
//! as database 0's, under the stored name: a write to `k` in database 3 is
//! `__keyspace@0__:__db3:k` and `__keyevent@0__:<event>` with payload `__db3:k`. A
//! client's `__keyspace@3__:k` (channel or pattern) subscribes that upstream, and each
//! message is shown as database 3 would publish it (`__keyspace@3__:k`, `__keyevent@3__`
//! with payload `k`) before it is matched against the client's own names. A pattern whose
//! database is a wildcard (`__keyspace@*__:k`) is subscribed as it is: it sees what the
//! cluster publishes under it, database 0's keys by name and the others' by stored name
//! only where its key part matches those.

use bytes::Bytes;

use crate::rewrite::database;
use crate::upstream::pushes::{KEYEVENT, KEYSPACE};

/// For a channel or pattern starting `__keyspace@<n>__:` or `__keyevent@<n>__:` with `n` a
/// database other than 0: whether it is a keyspace one, `n`, and the length of that head.
fn database_head(name: &[u8], databases: u32) -> Option<(bool, u32, usize)> {
    let (keyspace, rest) = match name.strip_prefix(KEYSPACE) {
        Some(rest) => (true, rest),
        None => (false, name.strip_prefix(KEYEVENT)?),
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 10 || rest[0] == b'0' || rest.get(digits..digits + 3) != Some(b"__:")
    {
        return None;
    }
    let db: u32 = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    (db < databases).then_some((keyspace, db, KEYSPACE.len() + digits + 3))
}

/// The upstream name of a client's keyspace channel or pattern of a database other than 0;
/// `None` for any other name (subscribed as it is).
pub(in crate::client::pubsub) fn upstream_name(name: &[u8], databases: u32) -> Option<Bytes> {
    let (keyspace, db, head) = database_head(name, databases)?;
    let mut out = Vec::with_capacity(name.len() + 8);
    out.extend_from_slice(if keyspace { KEYSPACE } else { KEYEVENT });
    out.extend_from_slice(b"0__:");
    if keyspace {
        out.extend_from_slice(&database::prefix(db));
    }
    out.extend_from_slice(&name[head..]);
    Some(Bytes::from(out))
}

/// A notification `channel` and `payload` from the cluster as the database of its key
/// publishes it (unchanged for database 0's keys and ordinary channels).
pub(in crate::client::pubsub) fn shown(
    channel: &[u8],
    payload: &[u8],
    databases: u32,
) -> (Bytes, Bytes) {
    let as_database = |kind: &[u8], db: u32, rest: &[u8]| {
        let mut out = Vec::with_capacity(kind.len() + rest.len() + 16);
        out.extend_from_slice(kind);
        out.extend_from_slice(format!("{db}__:").as_bytes());
        out.extend_from_slice(rest);
        Bytes::from(out)
    };
    if let Some(key) = channel.strip_prefix(b"__keyspace@0__:") {
        if let (db @ 1.., name) = database::split(key, databases) {
            return (
                as_database(KEYSPACE, db, name),
                Bytes::copy_from_slice(payload),
            );
        }
    } else if let Some(event) = channel.strip_prefix(b"__keyevent@0__:") {
        if let (db @ 1.., name) = database::split(payload, databases) {
            return (
                as_database(KEYEVENT, db, event),
                Bytes::copy_from_slice(name),
            );
        }
    }
    (
        Bytes::copy_from_slice(channel),
        Bytes::copy_from_slice(payload),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_databases_channels_and_patterns_subscribe_the_stored_names() {
        let up = |name: &str| upstream_name(name.as_bytes(), 16);
        assert_eq!(
            up("__keyspace@3__:k").as_deref(),
            Some(&b"__keyspace@0__:__db3:k"[..])
        );
        assert_eq!(
            up("__keyspace@3__:u*").as_deref(),
            Some(&b"__keyspace@0__:__db3:u*"[..])
        );
        assert_eq!(
            up("__keyevent@12__:set").as_deref(),
            Some(&b"__keyevent@0__:set"[..])
        );
        for unchanged in [
            "__keyspace@0__:k",
            "__keyspace@16__:k",
            "__keyspace@03__:k",
            "__keyspace@*__:k",
            "news",
        ] {
            assert_eq!(up(unchanged), None, "{unchanged}");
        }
    }

    #[test]
    fn notifications_are_shown_as_their_database_publishes_them() {
        let show = |channel: &str, payload: &str| {
            let (c, p) = shown(channel.as_bytes(), payload.as_bytes(), 16);
            (
                String::from_utf8(c.to_vec()).unwrap(),
                String::from_utf8(p.to_vec()).unwrap(),
            )
        };
        assert_eq!(
            show("__keyspace@0__:__db3:k", "set"),
            ("__keyspace@3__:k".into(), "set".into())
        );
        assert_eq!(
            show("__keyevent@0__:set", "__db3:k"),
            ("__keyevent@3__:set".into(), "k".into())
        );
        assert_eq!(
            show("__keyspace@0__:k", "set"),
            ("__keyspace@0__:k".into(), "set".into())
        );
        assert_eq!(
            show("__keyevent@0__:del", "k"),
            ("__keyevent@0__:del".into(), "k".into())
        );
        assert_eq!(show("news", "__db3:k"), ("news".into(), "__db3:k".into()));
    }
}
