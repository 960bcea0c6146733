//! The check EXEC makes, under `cross_slot_transactions: split`, before it runs a
//! transaction whose WATCH spans slots: every slot's watched keys are held on a connection
//! of the client's own to that slot's master (the one that will run the slot's MULTI/EXEC),
//! and each connection is asked, without giving up its watch, whether a key it watches
//! changed.
//!
//! Why this is sound, and where it is weaker than one Redis:
//! - Redis marks a watching connection dirty the moment a watched key is written, deleted,
//!   expired or flushed, and `CLIENT INFO` on that very connection shows the mark as flag
//!   `d` (Redis 6.2 and later) without clearing it; only EXEC, DISCARD, UNWATCH and RESET
//!   clear it. Before `CLIENT INFO` the check reads the watched keys with `EXISTS`: Redis
//!   deletes a key whose time ran out when it is read, which marks the watchers as its
//!   EXEC would have failed them (it fails an EXEC over a watched key that expired since
//!   the WATCH), and a redirect or `-TRYAGAIN` in its place says the slot left, or is
//!   leaving, the master that holds the watch: then the watch can no longer see every
//!   write to its keys, and the check fails.
//! - A failed check means nothing ran: EXEC answers null, as Redis does after a change.
//! - After a passed check each slot's MULTI/EXEC runs on its watching connection, so its
//!   own master still checks that slot's watched keys atomically with the slot's commands.
//!   A key changed between the check and its slot's EXEC aborts that slot alone, while the
//!   other slots may be applied (see `block::run_split`). A slot that only watches keys
//!   (no command of the transaction is in it) guards the other slots up to the check only.

use bytes::Bytes;
use futures_util::future::join_all;

use super::pinned::{call_in_order, WatchPin};
use crate::protocol::encode;
use crate::reply;
use crate::route::Redirect;

/// `CLIENT INFO`: the connection's own line of `CLIENT LIST`, flags included.
const CLIENT_INFO: &[u8] = b"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n";
/// The `flags` field of a `CLIENT INFO` line (never its first field, which is `id`).
const FLAGS_FIELD: &[u8] = b" flags=";
/// The flag of a connection whose watched key changed: its EXEC will fail.
const DIRTY_FLAG: u8 = b'd';

/// One slot's share of a client's WATCH spanning slots.
pub struct WatchedSlot {
    pub slot: u16,
    /// The connection holding the slot's watched keys.
    pub pin: WatchPin,
    /// The keys watched in the slot (cluster names).
    pub keys: Vec<Bytes>,
}

/// What the check of every watching connection found.
#[derive(Debug, PartialEq, Eq)]
pub enum WatchCheck {
    /// No watched key has changed yet and every watch is on its slot's master.
    Clean,
    /// A watched key changed or expired, a watching connection is gone, or a slot moved:
    /// EXEC answers null, as Redis does after a change.
    Failed,
    /// A master could not be checked (its error, or the proxy's when `CLIENT INFO` shows
    /// no flags): EXEC answers it, and nothing runs.
    Unchecked(Bytes),
}

/// Checks every watching connection at once, without giving up any watch.
pub async fn check_watches(parts: &[WatchedSlot]) -> WatchCheck {
    let checks = join_all(parts.iter().map(check_one)).await;
    if checks.contains(&WatchCheck::Failed) {
        return WatchCheck::Failed;
    }
    checks
        .into_iter()
        .find(|check| *check != WatchCheck::Clean)
        .unwrap_or(WatchCheck::Clean)
}

async fn check_one(part: &WatchedSlot) -> WatchCheck {
    let conn = &part.pin.conn;
    if !conn.is_connected() {
        return WatchCheck::Failed;
    }
    let mut exists: Vec<&[u8]> = Vec::with_capacity(part.keys.len() + 1);
    exists.push(b"EXISTS");
    exists.extend(part.keys.iter().map(|key| &key[..]));
    let requests = vec![
        (encode::encode_request(&exists), part.pin.asking),
        (Bytes::from_static(CLIENT_INFO), false),
    ];
    let Ok(replies) = call_in_order(conn, requests).await else {
        // The connection, and what it watched, is gone.
        return WatchCheck::Failed;
    };
    let [exists, info] = &replies[..] else {
        return WatchCheck::Failed;
    };
    if exists.first() == Some(&b'-') {
        return match Redirect::classify(exists, conn.addr()) {
            Some(_) => WatchCheck::Failed,
            None => WatchCheck::Unchecked(exists.clone()),
        };
    }
    if info.first() == Some(&b'-') {
        return WatchCheck::Unchecked(info.clone());
    }
    match watch_dirty(info) {
        Some(true) => WatchCheck::Failed,
        Some(false) => WatchCheck::Clean,
        None => WatchCheck::Unchecked(reply::error(reply::transaction::WATCH_CHECK_UNAVAILABLE)),
    }
}

/// Whether the `CLIENT INFO` reply `info` (RESP2 bulk or RESP3 verbatim string) shows the
/// dirty flag; `None` when it has no `flags` field.
fn watch_dirty(info: &[u8]) -> Option<bool> {
    let at = info
        .windows(FLAGS_FIELD.len())
        .position(|window| window == FLAGS_FIELD)?;
    let flags = &info[at + FLAGS_FIELD.len()..];
    let end = flags
        .iter()
        .position(|b| b.is_ascii_whitespace())
        .unwrap_or(flags.len());
    Some(flags[..end].contains(&DIRTY_FLAG))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dirty_flag_is_read_from_client_info_in_both_protocols() {
        // Redis 7.0's replies, on a connection whose watched key was written, and not.
        let dirty = b"$63\r\nid=3 addr=127.0.0.1:49422 fd=8 name= age=0 idle=0 flags=d db=0\n\r\n";
        let clean =
            b"=67\r\ntxt:id=3 addr=127.0.0.1:49422 fd=8 name= age=0 idle=0 flags=N db=0\n\r\n";
        assert_eq!(watch_dirty(dirty), Some(true));
        assert_eq!(watch_dirty(clean), Some(false));
        // Several flags at once, the dirty one among them.
        assert_eq!(watch_dirty(b"$20\r\nid=1 flags=Mdx db=0\r\n"), Some(true));
        // `d` elsewhere in the line (a name, the address) is not the flag.
        assert_eq!(
            watch_dirty(b"$40\r\nid=1 name=dd laddr=d flags=N db=0\r\n"),
            Some(false)
        );
        assert_eq!(watch_dirty(b"$20\r\nid=1 name=d db=0\r\n"), None);
    }
}
