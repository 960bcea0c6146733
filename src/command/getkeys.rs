//! The key-finding routines Redis keeps in C for commands whose key specs cannot say it
//! all (SORT's `STORE`, MIGRATE's `KEYS`, SET's `GET` changing the flags...).
//!
//! Each routine is a port of the matching `*GetKeys` function of Redis 7.0 (src/db.c)
//! and is used only where Redis itself falls back to it: when the specs are incomplete,
//! unknown, have variable flags, or do not fit the arguments. Invariant: every index
//! pushed is `< args.len()`.

use bytes::Bytes;

use super::keys::{KeyFlags, KeyList, KeyPos};

/// A command's own key-finding routine, chosen by command name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetKeysProc {
    /// SORT: the sorted key, and the destination after the last `STORE`.
    Sort,
    /// SORT_RO: the sorted key only.
    SortRo,
    /// MIGRATE: the key argument, or the keys after `KEYS` when it is empty.
    Migrate,
    /// SET: one key, read-write with `GET`, overwrite otherwise.
    Set,
    /// BITFIELD: one key, read-only when it only GETs.
    Bitfield,
    /// GEORADIUS / GEORADIUSBYMEMBER: the key and the last `STORE`/`STOREDIST` target.
    Georadius,
    /// XREAD / XREADGROUP: the streams after `STREAMS`.
    Xread,
    /// `[dest] numkeys key...` commands (Redis's `genericGetKeys`): ZUNIONSTORE, EVAL,
    /// LMPOP, SINTERCARD...
    NumKeys {
        /// Index of the destination key, 0 when none.
        store: usize,
        /// Index of the key count.
        count: usize,
        /// Index of the first key.
        first: usize,
    },
}

impl GetKeysProc {
    /// The routine Redis 7.0 has for this (lower-case) command name, if any.
    pub fn for_command(name: &str) -> Option<Self> {
        let numkeys = |store, count, first| Self::NumKeys {
            store,
            count,
            first,
        };
        Some(match name {
            "sort" => Self::Sort,
            "sort_ro" => Self::SortRo,
            "migrate" => Self::Migrate,
            "set" => Self::Set,
            "bitfield" => Self::Bitfield,
            "georadius" | "georadiusbymember" => Self::Georadius,
            "xread" | "xreadgroup" => Self::Xread,
            "zunionstore" | "zinterstore" | "zdiffstore" => numkeys(1, 2, 3),
            "zunion" | "zinter" | "zdiff" | "zintercard" | "sintercard" | "lmpop" | "zmpop" => {
                numkeys(0, 1, 2)
            }
            "eval" | "eval_ro" | "evalsha" | "evalsha_ro" | "fcall" | "fcall_ro" | "blmpop"
            | "bzmpop" => numkeys(0, 2, 3),
            _ => return None,
        })
    }

    /// Runs the routine over `args` (command name at 0), appending to `out`.
    pub fn find_keys(self, args: &[Bytes], out: &mut KeyList) {
        match self {
            Self::Sort => sort_keys(args, out),
            Self::SortRo => push(out, args, 1, KeyFlags::RO | KeyFlags::ACCESS),
            Self::Migrate => migrate_keys(args, out),
            Self::Set => set_keys(args, out),
            Self::Bitfield => bitfield_keys(args, out),
            Self::Georadius => georadius_keys(args, out),
            Self::Xread => xread_keys(args, out),
            Self::NumKeys {
                store,
                count,
                first,
            } => numkeys_keys(args, store, count, first, out),
        }
    }
}

fn push(out: &mut KeyList, args: &[Bytes], index: usize, flags: u16) {
    if index < args.len() {
        out.push(KeyPos {
            index,
            flags: KeyFlags(flags),
        });
    }
}

fn is(arg: &[u8], word: &str) -> bool {
    arg.eq_ignore_ascii_case(word.as_bytes())
}

/// C's `atoi`: leading spaces, a sign, then digits up to the first non-digit; 0 when
/// there are none. Saturates instead of overflowing.
fn atoi(text: &[u8]) -> i64 {
    let text = match text.iter().position(|b| !b" \t\n\r\x0b\x0c".contains(b)) {
        Some(start) => &text[start..],
        None => return 0,
    };
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    let magnitude = digits
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .fold(0i64, |acc, b| {
            acc.saturating_mul(10).saturating_add(i64::from(b - b'0'))
        });
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

fn sort_keys(args: &[Bytes], out: &mut KeyList) {
    push(out, args, 1, KeyFlags::RO | KeyFlags::ACCESS);
    let mut store = None;
    let mut i = 2;
    while i < args.len() {
        let arg = &args[i];
        if is(arg, "limit") {
            i += 2;
        } else if is(arg, "store") && i + 1 < args.len() {
            // The last STORE wins, as in SORT itself; the target is not skipped.
            store = Some(i + 1);
        } else if is(arg, "get") || is(arg, "by") {
            i += 1;
        }
        i += 1;
    }
    if let Some(index) = store {
        push(out, args, index, KeyFlags::OW | KeyFlags::UPDATE);
    }
}

fn migrate_keys(args: &[Bytes], out: &mut KeyList) {
    let flags = KeyFlags::RW | KeyFlags::ACCESS | KeyFlags::DELETE;
    let mut keys = 3..4;
    let mut i = 6;
    while i < args.len() {
        let arg = &args[i];
        if is(arg, "keys") {
            // i >= 6, so args[3] exists.
            keys = if args[3].is_empty() {
                i + 1..args.len()
            } else {
                // KEYS with a non-empty key argument is a syntax error: no keys.
                0..0
            };
            break;
        }
        // Option values are skipped so that a password spelled "keys" is not taken
        // for the option.
        if is(arg, "auth") {
            i += 1;
        } else if is(arg, "auth2") {
            i += 2;
        }
        i += 1;
    }
    for index in keys {
        push(out, args, index, flags);
    }
}

fn set_keys(args: &[Bytes], out: &mut KeyList) {
    let reads = args.iter().skip(3).any(|arg| is(arg, "get"));
    let flags = if reads {
        KeyFlags::RW | KeyFlags::ACCESS | KeyFlags::UPDATE
    } else {
        KeyFlags::OW | KeyFlags::UPDATE
    };
    push(out, args, 1, flags);
}

fn bitfield_keys(args: &[Bytes], out: &mut KeyList) {
    // Read-only only when every operation is a complete GET (OVERFLOW aside); anything
    // else, a syntax error included, is taken as a write.
    let argc = args.len();
    let mut read_only = true;
    let mut i = 2;
    while i < argc {
        let remaining = argc - i - 1;
        let arg = &args[i];
        if is(arg, "get") && remaining >= 2 {
            i += 2;
        } else if is(arg, "overflow") && remaining >= 1 {
            i += 1;
        } else {
            read_only = false;
            break;
        }
        i += 1;
    }
    let flags = if read_only {
        KeyFlags::RO | KeyFlags::ACCESS
    } else {
        KeyFlags::RW | KeyFlags::ACCESS | KeyFlags::UPDATE
    };
    push(out, args, 1, flags);
}

fn georadius_keys(args: &[Bytes], out: &mut KeyList) {
    let mut stored = None;
    let mut i = 5;
    while i < args.len() {
        if (is(&args[i], "store") || is(&args[i], "storedist")) && i + 1 < args.len() {
            stored = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    push(out, args, 1, 0);
    if let Some(index) = stored {
        push(out, args, index, 0);
    }
}

fn xread_keys(args: &[Bytes], out: &mut KeyList) {
    let mut streams_at = None;
    let mut i = 1;
    while i < args.len() {
        let arg = &args[i];
        if is(arg, "block") || is(arg, "count") {
            i += 1;
        } else if is(arg, "group") {
            i += 2;
        } else if is(arg, "streams") {
            streams_at = Some(i);
            break;
        } else if !is(arg, "noack") {
            break;
        }
        i += 1;
    }
    let Some(streams_at) = streams_at else {
        return;
    };
    let rest = args.len() - streams_at - 1;
    if rest == 0 || rest % 2 != 0 {
        return;
    }
    for index in streams_at + 1..streams_at + 1 + rest / 2 {
        push(out, args, index, 0);
    }
}

fn numkeys_keys(args: &[Bytes], store: usize, count: usize, first: usize, out: &mut KeyList) {
    let Some(count_arg) = args.get(count) else {
        return;
    };
    let numkeys = atoi(count_arg);
    let room = args.len().saturating_sub(first) as i64;
    if numkeys < 1 || numkeys > room {
        return;
    }
    // numkeys <= room <= args.len(), so the cast is lossless.
    for index in first..first + numkeys as usize {
        push(out, args, index, 0);
    }
    if store != 0 {
        push(out, args, store, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atoi_reads_like_c() {
        assert_eq!(atoi(b"12"), 12);
        assert_eq!(atoi(b"  -3x"), -3);
        assert_eq!(atoi(b"+4"), 4);
        assert_eq!(atoi(b"x4"), 0);
        assert_eq!(atoi(b""), 0);
        assert_eq!(atoi(b"99999999999999999999999"), i64::MAX);
    }

    #[test]
    fn routines_never_index_past_the_arguments() {
        let procs = [
            GetKeysProc::Sort,
            GetKeysProc::SortRo,
            GetKeysProc::Migrate,
            GetKeysProc::Set,
            GetKeysProc::Bitfield,
            GetKeysProc::Georadius,
            GetKeysProc::Xread,
            GetKeysProc::for_command("zunionstore").unwrap_or(GetKeysProc::Sort),
            GetKeysProc::for_command("eval").unwrap_or(GetKeysProc::Sort),
        ];
        let words = [
            "x", "STORE", "LIMIT", "KEYS", "", "STREAMS", "GET", "9", "1",
        ];
        // Every argument list of up to 5 words drawn from `words`.
        for len in 0..=5u32 {
            for mut code in 0..(words.len() as u32).pow(len) {
                let mut args = Vec::new();
                for _ in 0..len {
                    args.push(Bytes::from_static(words[(code % 9) as usize].as_bytes()));
                    code /= 9;
                }
                for proc_ in procs {
                    let mut out = KeyList::new();
                    proc_.find_keys(&args, &mut out);
                    assert!(
                        out.iter().all(|k| k.index < args.len()),
                        "{proc_:?} {args:?}"
                    );
                }
            }
        }
    }
}
