//! The proxy's ACL LOG: its own denials and failed authentications, kept as Redis keeps
//! them (`addACLLogEntry`): newest first, an entry like one of the last 10 (same reason,
//! context, object and user, within 60 s) counted again instead of added, at most
//! [`ACLLOG_MAX_LEN`] entries.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};

use crate::protocol::{encode, Proto};

/// Redis's `acllog-max-len` default.
pub const ACLLOG_MAX_LEN: usize = 128;
/// Entries an event is compared with before it is added (Redis's `toscan`).
const GROUPING_SCAN: usize = 10;
/// Redis's `ACL_LOG_GROUPING_MAX_TIME_DELTA`, milliseconds.
const GROUPING_MAX_DELTA_MS: u64 = 60_000;

/// Why the entry was logged (its `reason` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// `command`: no rule allows the command (script refusals are logged as this too).
    Command,
    /// `key`.
    Key,
    /// `channel`.
    Channel,
    /// `auth`: a failed AUTH or HELLO AUTH.
    Auth,
}

impl Reason {
    fn name(self) -> &'static str {
        match self {
            Reason::Command => "command",
            Reason::Key => "key",
            Reason::Channel => "channel",
            Reason::Auth => "auth",
        }
    }
}

/// Where the denied command ran (its `context` field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Context {
    /// `toplevel`.
    TopLevel,
    /// `multi`: queued in a transaction.
    Multi,
}

/// One log entry.
#[derive(Debug, Clone)]
struct Entry {
    count: u64,
    reason: Reason,
    context: Context,
    object: Vec<u8>,
    username: Vec<u8>,
    at_ms: u64,
    client_info: Vec<u8>,
}

/// The log, shared by every session.
#[derive(Debug, Default)]
pub struct AclLog {
    entries: Mutex<VecDeque<Entry>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl AclLog {
    /// Records a denial: `object` is the command name (`config|set`), key, channel, or for
    /// [`Reason::Auth`] the command (`AUTH`, `HELLO`) as sent; `client_info` is the
    /// client's CLIENT LIST line.
    pub fn record(
        &self,
        reason: Reason,
        context: Context,
        object: &[u8],
        username: &[u8],
        client_info: &[u8],
    ) {
        self.record_at(reason, context, object, username, client_info, now_ms());
    }

    fn record_at(
        &self,
        reason: Reason,
        context: Context,
        object: &[u8],
        username: &[u8],
        client_info: &[u8],
        at_ms: u64,
    ) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let same = entries.iter().take(GROUPING_SCAN).position(|e| {
            e.reason == reason
                && e.context == context
                && e.object == object
                && e.username == username
                && at_ms.saturating_sub(e.at_ms) <= GROUPING_MAX_DELTA_MS
        });
        if let Some(at) = same {
            if let Some(mut entry) = entries.remove(at) {
                entry.count += 1;
                entry.at_ms = at_ms;
                entry.client_info = client_info.to_vec();
                entries.push_front(entry);
            }
            return;
        }
        entries.push_front(Entry {
            count: 1,
            reason,
            context,
            object: object.to_vec(),
            username: username.to_vec(),
            at_ms,
            client_info: client_info.to_vec(),
        });
        entries.truncate(ACLLOG_MAX_LEN);
    }

    /// `ACL LOG RESET`.
    pub fn reset(&self) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `ACL LOG [count]` reply: the newest `count` entries, each a map of `count`,
    /// `reason`, `context`, `object`, `username`, `age-seconds`, `client-info`.
    pub fn reply(&self, count: usize, proto: Proto) -> Bytes {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let now = now_ms();
        let count = count.min(entries.len());
        let mut out = BytesMut::new();
        encode::array_header(&mut out, count);
        for entry in entries.iter().take(count) {
            encode::map_header(&mut out, proto, 7);
            encode::bulk(&mut out, b"count");
            encode::integer(&mut out, entry.count as i64);
            encode::bulk(&mut out, b"reason");
            encode::bulk(&mut out, entry.reason.name().as_bytes());
            encode::bulk(&mut out, b"context");
            encode::bulk(
                &mut out,
                match entry.context {
                    Context::TopLevel => b"toplevel",
                    Context::Multi => b"multi",
                },
            );
            encode::bulk(&mut out, b"object");
            encode::bulk(&mut out, &entry.object);
            encode::bulk(&mut out, b"username");
            encode::bulk(&mut out, &entry.username);
            encode::bulk(&mut out, b"age-seconds");
            let age = now.saturating_sub(entry.at_ms) as f64 / 1000.0;
            double_17g(&mut out, proto, age);
            encode::bulk(&mut out, b"client-info");
            encode::bulk(&mut out, &entry.client_info);
        }
        out.freeze()
    }
}

/// A double as Redis 7.0's `addReplyDouble` writes it: C's `%.17g`.
fn double_17g(out: &mut BytesMut, proto: Proto, value: f64) {
    let text = format_17g(value);
    match proto {
        Proto::Resp2 => encode::bulk(out, text.as_bytes()),
        Proto::Resp3 => {
            out.extend_from_slice(b",");
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// C's `%.17g` of a finite value.
pub fn format_17g(value: f64) -> String {
    if value == 0.0 {
        return "0".into();
    }
    let scientific = format!("{value:.16e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    if (-4..17).contains(&exponent) {
        let fixed = format!("{value:.*}", (16 - exponent) as usize);
        strip_zeros(&fixed).to_string()
    } else {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip_zeros(mantissa), exponent.abs())
    }
}

fn strip_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_print_as_c_percent_17g() {
        assert_eq!(format_17g(0.003), "0.0030000000000000001");
        assert_eq!(format_17g(1.5), "1.5");
        assert_eq!(format_17g(12.0), "12");
        assert_eq!(format_17g(1e20), "1e+20");
        assert_eq!(format_17g(0.00001), "1.0000000000000001e-05");
    }

    #[test]
    fn entries_group_newest_first_and_stay_bounded() {
        let log = AclLog::default();
        log.record_at(
            Reason::Command,
            Context::TopLevel,
            b"get",
            b"u",
            b"id=1",
            1000,
        );
        log.record_at(Reason::Key, Context::TopLevel, b"k", b"u", b"id=1", 1000);
        log.record_at(
            Reason::Command,
            Context::TopLevel,
            b"get",
            b"u",
            b"id=2",
            2000,
        );
        assert_eq!(log.len(), 2);
        let reply = log.reply(1, Proto::Resp2);
        let text = String::from_utf8_lossy(&reply);
        assert!(
            text.starts_with("*1\r\n*14\r\n$5\r\ncount\r\n:2\r\n"),
            "{text}"
        );
        assert!(text.contains("id=2"), "{text}");
        // Outside the grouping window: a new entry.
        log.record_at(
            Reason::Command,
            Context::TopLevel,
            b"get",
            b"u",
            b"id=3",
            70_000,
        );
        assert_eq!(log.len(), 3);
        for i in 0..200u64 {
            log.record_at(
                Reason::Key,
                Context::Multi,
                &i.to_be_bytes(),
                b"u",
                b"",
                80_000,
            );
        }
        assert_eq!(log.len(), ACLLOG_MAX_LEN);
        log.reset();
        assert!(log.is_empty());
    }
}
