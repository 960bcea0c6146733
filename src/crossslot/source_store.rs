//! Stores whose result one node computes from one source key: ZRANGESTORE, GEOSEARCHSTORE and
//! GEORADIUS/GEORADIUSBYMEMBER with STORE or STOREDIST, when the destination lives in another
//! slot than the source (`cross_slot.stores`). Pure: the planner sends [`SourceStore::script`]
//! to the source's master and the writes [`SourceStore::outcome`] gives to the destination's.
//!
//! The source's master runs the client's command itself, with a scratch key of the source's
//! slot as its destination, inside one script that reads the result back and deletes the
//! scratch key: the result (ranges, limits, `BYLEX`, geohash scores, `STOREDIST` distances)
//! and every error (WRONGTYPE, syntax, ranges) are Redis's own, and no other client can see
//! the scratch key. The result is then written to the destination's master as `MULTI`, `DEL`,
//! `ZADD`..., `EXEC` (an empty result as `DEL`), so the destination is replaced whole or not at
//! all, and the command's own count is the reply once that is applied. The scores travel as
//! the text Redis writes them (`%.17g`), which reads back to the same double.
//!
//! Not one atomic step: another client's write to the source between the script and the
//! destination's EXEC is not in the result (as if the store ran just before it).

use bytes::Bytes;

use super::write;
use crate::command::KeyPos;
use crate::protocol::ReplyView;
use crate::reply::{self, crossslot as text};

/// `KEYS[1]` the source, `KEYS[2]` the scratch key, `ARGV[1]` the most members read back,
/// `ARGV[2..]` the command. Replies the command's error as it is, or `{count, members and
/// scores}`, or `{count, size}` when the result holds more than `ARGV[1]` members (then
/// nothing is read back). The scratch key is gone when it returns.
const STORE_SCRIPT: &str = "\
local count = redis.pcall(unpack(ARGV, 2)) \
if type(count) == 'table' and count.err then return count end \
local size = redis.call('ZCARD', KEYS[2]) \
if size > tonumber(ARGV[1]) then redis.call('DEL', KEYS[2]) return {count, size} end \
local items = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES') \
redis.call('DEL', KEYS[2]) \
return {count, items}";

/// What follows the scratch key's hash tag; long and specific so that no application key
/// shares the name.
const SCRATCH_SUFFIX: &str = ":slotbridge:cross-slot-store-scratch";

/// A store computed on the source's master and written to the destination's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceStore {
    /// The command's name, upper case, as the limit error names it.
    name: String,
    /// The client's arguments.
    args: Vec<Bytes>,
    /// Where the destination is among `args`.
    destination_at: usize,
    /// The key the command reads.
    pub source: Bytes,
    /// The key it writes.
    pub destination: Bytes,
}

/// The store of `args` (the command name first, `keys` its key positions) when it is one
/// of this module's commands with its source and destination found, else `None`.
pub fn parse_source_store(args: &[Bytes], keys: &[KeyPos]) -> Option<SourceStore> {
    let name = args.first()?.to_ascii_lowercase();
    let (source_at, destination_at) = match name.as_slice() {
        b"zrangestore" | b"geosearchstore" => (2, 1),
        // The destination follows the last STORE or STOREDIST, as the command table says.
        b"georadius" | b"georadiusbymember" => (1, keys.iter().find(|k| k.index != 1)?.index),
        _ => return None,
    };
    Some(SourceStore {
        name: String::from_utf8_lossy(&name).to_ascii_uppercase(),
        source: args.get(source_at)?.clone(),
        destination: args.get(destination_at)?.clone(),
        args: args.to_vec(),
        destination_at,
    })
}

impl SourceStore {
    /// The scratch key for a source whose slot has the hash tag `tag`
    /// (`crate::route::tag_in_slot`).
    pub fn scratch_key(tag: u32) -> Bytes {
        Bytes::from(format!("{{{tag}}}{SCRATCH_SUFFIX}"))
    }

    /// The script for the source's master: the client's command into `scratch`, read back
    /// when it holds at most `max_members`.
    pub fn script(&self, scratch: &Bytes, max_members: u64) -> Vec<Bytes> {
        let mut command = Vec::with_capacity(self.args.len() + 6);
        command.extend([
            Bytes::from_static(b"EVAL"),
            Bytes::from_static(STORE_SCRIPT.as_bytes()),
            Bytes::from_static(b"2"),
            self.source.clone(),
            scratch.clone(),
            Bytes::from(max_members.to_string()),
        ]);
        command.extend(self.args.iter().enumerate().map(|(at, arg)| {
            if at == self.destination_at {
                scratch.clone()
            } else {
                arg.clone()
            }
        }));
        command
    }

    /// From the script's reply (a RESP2 frame): the client's reply and the destination's
    /// writes, or `Err` with the reply when nothing is to be written (the command's error,
    /// a result above `max_members`).
    pub fn outcome(
        &self,
        script_reply: &[u8],
        max_members: u64,
    ) -> Result<(Bytes, Vec<Vec<Bytes>>), Bytes> {
        if matches!(script_reply.first(), Some(b'-' | b'!')) {
            return Err(Bytes::copy_from_slice(script_reply));
        }
        let unexpected = || reply::error(text::STORE_NOT_APPLIED);
        let view = ReplyView::parse(script_reply).map_err(|_| unexpected())?;
        let mut parts = view.elements_or_empty().ok_or_else(unexpected)?;
        let (Some(count), Some(result), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(unexpected());
        };
        let count = count.integer().ok_or_else(unexpected)?;
        let size = match result {
            ReplyView::Int(size) => Some(size),
            ReplyView::Boolean(b) => Some(i64::from(b)),
            _ => None,
        };
        if let Some(size) = size {
            let size = u64::try_from(size).unwrap_or(u64::MAX);
            let refusal = text::too_large(&self.name, "members", size, max_members);
            return Err(reply::error(&refusal));
        }
        let mut items = result.elements_or_empty().ok_or_else(unexpected)?;
        // ZRANGE WITHSCORES lists member, score; ZADD takes score, member.
        let mut pairs = Vec::with_capacity(items.len());
        while let Some(member) = items.next() {
            let Some(score) = items.next() else {
                return Err(unexpected());
            };
            let (Some(member), Some(score)) = (member.text(), score.text()) else {
                return Err(unexpected());
            };
            pairs.push(Bytes::copy_from_slice(score));
            pairs.push(Bytes::copy_from_slice(member));
        }
        let chunks: Vec<&[Bytes]> = pairs.chunks(write::CHUNK_ARGS).collect();
        let writes = write::replace(&self.destination, b"ZADD", &chunks);
        Ok((Bytes::from(format!(":{count}\r\n")), writes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::KeyFlags;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::from(w.to_string())).collect()
    }

    fn key(index: usize) -> KeyPos {
        KeyPos {
            index,
            flags: KeyFlags(0),
        }
    }

    #[test]
    fn source_and_destination_are_found_per_command() {
        let zrange = parse_source_store(&args(&["ZRANGESTORE", "d", "s", "0", "-1"]), &[])
            .expect("zrangestore");
        assert_eq!(
            (zrange.source.as_ref(), zrange.destination.as_ref()),
            (&b"s"[..], &b"d"[..])
        );
        let georadius = args(&["GEORADIUS", "s", "1", "2", "3", "km", "STORE", "d"]);
        let store = parse_source_store(&georadius, &[key(1), key(7)]).expect("georadius");
        assert_eq!(
            (store.source.as_ref(), store.destination.as_ref()),
            (&b"s"[..], &b"d"[..])
        );
        assert!(parse_source_store(&georadius, &[key(1)]).is_none());
        assert!(parse_source_store(&args(&["SUNIONSTORE", "d", "s"]), &[]).is_none());
    }

    #[test]
    fn the_script_runs_the_command_into_the_scratch_key() {
        let store = parse_source_store(&args(&["zrangestore", "d", "s", "0", "-1"]), &[]).unwrap();
        let scratch = SourceStore::scratch_key(7);
        let script = store.script(&scratch, 10);
        assert_eq!(
            &script[2..],
            &args(&[
                "2",
                "s",
                "{7}:slotbridge:cross-slot-store-scratch",
                "10",
                "zrangestore",
                "{7}:slotbridge:cross-slot-store-scratch",
                "s",
                "0",
                "-1"
            ])[..]
        );
    }

    #[test]
    fn the_result_replaces_the_destination_and_the_count_is_the_reply() {
        let store = parse_source_store(&args(&["zrangestore", "d", "s", "0", "-1"]), &[]).unwrap();
        let reply = b"*2\r\n:2\r\n*4\r\n$1\r\na\r\n$3\r\n1.5\r\n$1\r\nb\r\n$1\r\n2\r\n";
        let (client, writes) = store.outcome(reply, 10).unwrap();
        assert_eq!(client.as_ref(), b":2\r\n");
        assert_eq!(
            writes,
            vec![
                args(&["MULTI"]),
                args(&["DEL", "d"]),
                args(&["ZADD", "d", "1.5", "a", "2", "b"]),
                args(&["EXEC"]),
            ]
        );
        let (client, writes) = store.outcome(b"*2\r\n:0\r\n*0\r\n", 10).unwrap();
        assert_eq!(
            (client.as_ref(), writes),
            (&b":0\r\n"[..], vec![args(&["DEL", "d"])])
        );
    }

    #[test]
    fn errors_and_oversized_results_write_nothing() {
        let store = parse_source_store(&args(&["zrangestore", "d", "s", "0", "-1"]), &[]).unwrap();
        let wrongtype = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
        assert_eq!(
            store.outcome(wrongtype, 10).unwrap_err().as_ref(),
            &wrongtype[..]
        );
        let refusal = store.outcome(b"*2\r\n:11\r\n:11\r\n", 10).unwrap_err();
        assert!(refusal.starts_with(b"-ERR proxy: cross-slot ZRANGESTORE reads 11 members"));
    }
}
