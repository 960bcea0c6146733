//! Key positions from Redis 7 key specs.
//!
//! [`find_keys`] is a port of Redis's `getKeysFromCommandWithSpecs` (src/db.c): key specs
//! first, and the command's own key-finding routine ([`GetKeysProc`]) when a spec is
//! incomplete, unknown, has variable flags or does not fit the arguments. Invariants:
//! every returned index is `< args.len()`; no input (short, malformed or hostile argument
//! lists, odd tables) panics or loops forever; arithmetic on indexes is done in `i64`.

use bytes::Bytes;
use smallvec::SmallVec;

use super::getkeys::GetKeysProc;

/// What a command does with a key (from the key spec flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyFlags(pub u16);

impl KeyFlags {
    /// Read-only access to the value.
    pub const RO: u16 = 1 << 0;
    /// Read and write (modify) access.
    pub const RW: u16 = 1 << 1;
    /// Overwrites the value without reading it.
    pub const OW: u16 = 1 << 2;
    /// Deletes the key.
    pub const RM: u16 = 1 << 3;
    /// Returns, copies or uses the user data of the value.
    pub const ACCESS: u16 = 1 << 4;
    /// Updates the value (modifies existing data).
    pub const UPDATE: u16 = 1 << 5;
    /// Adds data to the value without modifying existing data.
    pub const INSERT: u16 = 1 << 6;
    /// Deletes some content of the value.
    pub const DELETE: u16 = 1 << 7;
    /// The argument is a (shard) channel name, not a key. Never set from a Redis 7.0
    /// reply (it says `not_key`); kept for callers that tag channels themselves.
    pub const CHANNEL: u16 = 1 << 8;
    /// The spec names arguments that are not keys (e.g. SSUBSCRIBE's shard channels).
    pub const NOT_KEY: u16 = 1 << 9;
    /// The spec may not find every key (the command's own routine must be used).
    pub const INCOMPLETE: u16 = 1 << 10;
    /// The real flags depend on other arguments (e.g. SET ... GET).
    pub const VARIABLE_FLAGS: u16 = 1 << 11;

    /// Whether `flag` (one of the constants) is set.
    pub fn has(self, flag: u16) -> bool {
        self.0 & flag != 0
    }

    /// Whether the command may create, change or delete the key.
    pub fn writes(self) -> bool {
        self.0 & (Self::RW | Self::OW | Self::RM | Self::INSERT | Self::DELETE | Self::UPDATE) != 0
    }

    /// The bit for a key spec flag as `COMMAND` spells it (`RW`, `access`, `not_key`...),
    /// case-insensitive; `None` for flags this version does not know.
    pub fn from_name(name: &[u8]) -> Option<u16> {
        const NAMES: [(&[u8], u16); 12] = [
            (b"ro", KeyFlags::RO),
            (b"rw", KeyFlags::RW),
            (b"ow", KeyFlags::OW),
            (b"rm", KeyFlags::RM),
            (b"access", KeyFlags::ACCESS),
            (b"update", KeyFlags::UPDATE),
            (b"insert", KeyFlags::INSERT),
            (b"delete", KeyFlags::DELETE),
            (b"channel", KeyFlags::CHANNEL),
            (b"not_key", KeyFlags::NOT_KEY),
            (b"incomplete", KeyFlags::INCOMPLETE),
            (b"variable_flags", KeyFlags::VARIABLE_FLAGS),
        ];
        NAMES
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(name))
            .map(|&(_, bit)| bit)
    }
}

/// A request's keys, in argument order. Inline room for 16: MSET/MGET/DEL of up to 16 keys,
/// whose keys are listed several times per request (route, plan, split), need no heap.
pub type KeyList = SmallVec<[KeyPos; 16]>;

/// One key of a request: its argument index and what the command does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPos {
    /// Index into the request's arguments (0 is the command name).
    pub index: usize,
    /// What the command does with this key.
    pub flags: KeyFlags,
}

/// Where the search for a spec's keys starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BeginSearch {
    /// Keys start at this argument index.
    Index(i32),
    /// Keys start after `keyword`, searched from `startfrom` (negative: from the end,
    /// backwards).
    Keyword {
        /// The keyword as the server spells it (compared case-insensitively).
        keyword: Bytes,
        /// First index looked at; negative counts from the end.
        startfrom: i32,
    },
    /// The server could not describe it; the command's own routine must find the keys.
    Unknown,
}

/// How many keys follow the start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FindKeys {
    /// Keys from the start to `lastkey` (relative; negative counts from the end) every
    /// `step`; with `limit` > 0 and `lastkey` -1, only the first 1/`limit` of the rest.
    Range {
        /// Last key, relative to the start (or to the end when negative).
        lastkey: i32,
        /// Distance between keys.
        step: i32,
        /// Divides the remaining arguments (XREAD's keys then IDs); 0 means none.
        limit: i32,
    },
    /// The number of keys is an argument at `keynumidx` (relative to the start); keys
    /// begin `firstkey` after the start, every `step`.
    Keynum {
        /// Index of the count, relative to the start.
        keynumidx: i32,
        /// Index of the first key, relative to the start.
        firstkey: i32,
        /// Distance between keys.
        step: i32,
    },
    /// The server could not describe it; the command's own routine must find the keys.
    Unknown,
}

/// One key spec of a command (Redis 7 `COMMAND` reply, element 9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySpec {
    /// Flags of the keys this spec finds (and NOT_KEY / INCOMPLETE / VARIABLE_FLAGS).
    pub flags: KeyFlags,
    /// Where the search starts.
    pub begin_search: BeginSearch,
    /// Which arguments from the start are keys.
    pub find_keys: FindKeys,
}

/// Why a strict walk over the key specs gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SpecFailure {
    /// The arguments do not fit the spec: Redis reports no keys (the command will fail).
    Syntax,
    /// The spec is incomplete or unknown: only the command's own routine knows.
    Incomplete,
}

/// The legacy (first, last, step) triple, for servers older than Redis 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LegacyRange {
    pub first: i32,
    pub last: i32,
    pub step: i32,
}

/// How a command's keys are found, decided once from its specs when the command table is
/// built, so that a routed request takes its command's way at once (one match) instead of
/// asking the specs again each time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyRule {
    /// One spec names one argument at a fixed index, with flags that do not vary (GET,
    /// INCR, HSET, LPUSH...: most of what clients send).
    Lone {
        /// The key's argument index.
        index: usize,
        /// What the command does with it.
        flags: KeyFlags,
    },
    /// The specs defer to the command's own routine: their flags vary with the arguments
    /// (SET, whose GET option makes it read), or it has no specs.
    Routine(GetKeysProc),
    /// Anything else: Redis's walk over the specs.
    Walk,
}

impl KeyRule {
    /// The rule [`find_keys`] follows for a command with these `specs` and routine.
    pub(crate) fn of(specs: &[KeySpec], proc_: Option<GetKeysProc>) -> KeyRule {
        if let Some((index, flags)) = lone_key(specs) {
            return KeyRule::Lone { index, flags };
        }
        let has_keyspec = specs.iter().any(|s| !s.flags.has(KeyFlags::NOT_KEY));
        let has_varflags = specs.iter().any(|s| s.flags.has(KeyFlags::VARIABLE_FLAGS));
        match proc_ {
            Some(proc_) if !has_keyspec || has_varflags => KeyRule::Routine(proc_),
            _ => KeyRule::Walk,
        }
    }
}

/// Key positions of one invocation, as Redis's `getKeysFromCommandWithSpecs` finds them,
/// into `out` (cleared first). `rule` is [`KeyRule::of`] the `specs` and `proc_`.
pub(crate) fn find_keys(
    rule: KeyRule,
    specs: &[KeySpec],
    proc_: Option<GetKeysProc>,
    legacy: LegacyRange,
    args: &[Bytes],
    out: &mut KeyList,
) {
    out.clear();
    match rule {
        KeyRule::Lone { index, flags } if index < args.len() => out.push(KeyPos { index, flags }),
        KeyRule::Routine(proc_) => proc_.find_keys(args, out),
        _ => find_keys_by_walk(specs, proc_, legacy, args, out),
    }
}

/// The key index and flags of a command whose one spec names one argument at a fixed index
/// (GET, INCR, HSET, LPUSH...; not SET, whose key flags vary with its arguments): what the
/// walk below finds for it whenever the arguments reach that index.
fn lone_key(specs: &[KeySpec]) -> Option<(usize, KeyFlags)> {
    let [spec] = specs else { return None };
    let odd = KeyFlags::NOT_KEY | KeyFlags::INCOMPLETE | KeyFlags::VARIABLE_FLAGS;
    match (&spec.begin_search, &spec.find_keys) {
        (
            BeginSearch::Index(at),
            FindKeys::Range {
                lastkey: 0, step, ..
            },
        ) if *step >= 1 && spec.flags.0 & odd == 0 => {
            Some((usize::try_from(*at).ok()?, spec.flags))
        }
        _ => None,
    }
}

fn find_keys_by_walk(
    specs: &[KeySpec],
    proc_: Option<GetKeysProc>,
    legacy: LegacyRange,
    args: &[Bytes],
    out: &mut KeyList,
) {
    let has_keyspec = specs.iter().any(|s| !s.flags.has(KeyFlags::NOT_KEY));
    let has_varflags = specs.iter().any(|s| s.flags.has(KeyFlags::VARIABLE_FLAGS));

    // Redis trusts specs unless their flags vary; a command we have no routine for
    // (a module's) is better served by its specs than by nothing.
    let mut failure = None;
    if has_keyspec && (!has_varflags || proc_.is_none()) {
        match walk_specs(specs, args, false, out) {
            Ok(()) => return,
            Err(why) => failure = Some(why),
        }
        out.clear();
    }
    if let Some(proc_) = proc_ {
        proc_.find_keys(args, out);
        return;
    }
    if specs.is_empty() {
        legacy_range(legacy, args, out);
    } else if failure == Some(SpecFailure::Incomplete) {
        // No routine to finish the job: return the keys the specs can see.
        let _ = walk_specs(specs, args, true, out);
    }
}

/// Redis's `getKeysUsingKeySpecs`; with `partial`, failing specs are skipped
/// (`GET_KEYSPEC_RETURN_PARTIAL`) instead of failing the whole walk.
fn walk_specs(
    specs: &[KeySpec],
    args: &[Bytes],
    partial: bool,
    out: &mut KeyList,
) -> Result<(), SpecFailure> {
    for spec in specs {
        if spec.flags.has(KeyFlags::NOT_KEY) {
            continue;
        }
        match walk_one_spec(spec, args, out) {
            Ok(()) => {}
            Err(_) if partial => {}
            Err(why) => return Err(why),
        }
    }
    Ok(())
}

fn walk_one_spec(spec: &KeySpec, args: &[Bytes], out: &mut KeyList) -> Result<(), SpecFailure> {
    let argc = args.len() as i64;
    let first = match &spec.begin_search {
        BeginSearch::Index(pos) => i64::from(*pos),
        BeginSearch::Keyword { keyword, startfrom } => {
            match find_keyword(args, keyword, i64::from(*startfrom)) {
                Some(after_keyword) => after_keyword,
                // A missing optional keyword just means no keys from this spec.
                None => return Ok(()),
            }
        }
        BeginSearch::Unknown => return Err(SpecFailure::Incomplete),
    };

    let (first, last, step) = match spec.find_keys {
        FindKeys::Range {
            lastkey,
            step,
            limit,
        } => {
            let lastkey = i64::from(lastkey);
            let last = if lastkey >= 0 {
                first + lastkey
            } else if limit == 0 {
                argc + lastkey
            } else {
                first + ((argc - first) / i64::from(limit) + lastkey)
            };
            (first, last, i64::from(step))
        }
        FindKeys::Keynum {
            keynumidx,
            firstkey,
            step,
        } => {
            let count_at = first + i64::from(keynumidx);
            let count_arg = usize::try_from(count_at)
                .ok()
                .and_then(|i| args.get(i))
                .ok_or(SpecFailure::Syntax)?;
            let numkeys = parse_strict_i64(count_arg).ok_or(SpecFailure::Syntax)?;
            if numkeys < 0 {
                return Err(SpecFailure::Syntax);
            }
            // Redis narrows the count to a C int; a count that wraps lands where it does.
            let numkeys = i64::from(numkeys as i32);
            let first = first + i64::from(firstkey);
            (first, first + numkeys - 1, i64::from(step))
        }
        FindKeys::Unknown => return Err(SpecFailure::Incomplete),
    };

    if last >= argc || last < first || first >= argc || first < 0 || step < 1 {
        return Err(SpecFailure::Syntax);
    }
    let mut index = first;
    while index <= last {
        // In range by the check above: 0 <= first <= index <= last < argc.
        out.push(KeyPos {
            index: index as usize,
            flags: spec.flags,
        });
        index += step;
    }
    if spec.flags.has(KeyFlags::INCOMPLETE) {
        return Err(SpecFailure::Incomplete);
    }
    Ok(())
}

/// The index after `keyword`, searched as Redis does: forwards from `startfrom` up to
/// (not including) the last argument, or backwards from `argc + startfrom` down to (not
/// including) index 1.
fn find_keyword(args: &[Bytes], keyword: &[u8], startfrom: i64) -> Option<i64> {
    let argc = args.len() as i64;
    let (start, end) = if startfrom > 0 {
        (startfrom, argc - 1)
    } else {
        (argc + startfrom, 1)
    };
    let forward = start <= end;
    let mut index = start;
    while index != end {
        if index >= argc || index < 1 {
            break;
        }
        // In range by the check above.
        if args[index as usize].eq_ignore_ascii_case(keyword) {
            return Some(index + 1);
        }
        index = if forward { index + 1 } else { index - 1 };
    }
    None
}

/// The legacy (first, last, step) walk of Redis 6, for tables without key specs.
fn legacy_range(legacy: LegacyRange, args: &[Bytes], out: &mut KeyList) {
    let argc = args.len() as i64;
    let first = i64::from(legacy.first);
    let step = i64::from(legacy.step);
    if first < 1 || step < 1 {
        return;
    }
    let last = match i64::from(legacy.last) {
        last if last < 0 => argc + last,
        last => last,
    };
    let mut index = first;
    while index <= last {
        if index >= argc {
            // Too few arguments: Redis finds no keys and lets the command fail.
            out.clear();
            return;
        }
        out.push(KeyPos {
            index: index as usize,
            flags: KeyFlags::default(),
        });
        index += step;
    }
}

/// Redis's `string2ll`: optional `-`, decimal digits, no leading zeros, no spaces or `+`.
pub(crate) fn parse_strict_i64(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let leading_zero = digits.len() > 1 && digits[0] == b'0';
    if digits.is_empty() || leading_zero || (negative && digits == b"0") {
        return None;
    }
    let mut value: i64 = 0;
    for &byte in digits {
        if !byte.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(byte - b'0');
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strict_integers_follow_string2ll() {
        assert_eq!(parse_strict_i64(b"0"), Some(0));
        assert_eq!(parse_strict_i64(b"42"), Some(42));
        assert_eq!(parse_strict_i64(b"-7"), Some(-7));
        assert_eq!(parse_strict_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_strict_i64(b"-9223372036854775808"), Some(i64::MIN));
        for bad in [
            &b""[..],
            b"-",
            b"+1",
            b" 1",
            b"1 ",
            b"01",
            b"-0",
            b"1x",
            b"9223372036854775808",
        ] {
            assert_eq!(parse_strict_i64(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn key_flag_names_match_command_spelling() {
        assert_eq!(KeyFlags::from_name(b"RW"), Some(KeyFlags::RW));
        assert_eq!(KeyFlags::from_name(b"access"), Some(KeyFlags::ACCESS));
        assert_eq!(KeyFlags::from_name(b"not_key"), Some(KeyFlags::NOT_KEY));
        assert_eq!(KeyFlags::from_name(b"sometimes"), None);
        assert!(KeyFlags(KeyFlags::OW | KeyFlags::UPDATE).writes());
        assert!(!KeyFlags(KeyFlags::RO | KeyFlags::ACCESS).writes());
    }

    fn args(words: &[&str]) -> Vec<Bytes> {
        words
            .iter()
            .map(|w| Bytes::copy_from_slice(w.as_bytes()))
            .collect()
    }

    #[test]
    fn hostile_specs_do_not_panic_or_loop() {
        let specs = [
            KeySpec {
                flags: KeyFlags(KeyFlags::RO),
                begin_search: BeginSearch::Index(-5),
                find_keys: FindKeys::Range {
                    lastkey: -1,
                    step: 0,
                    limit: -1,
                },
            },
            KeySpec {
                flags: KeyFlags(KeyFlags::RO),
                begin_search: BeginSearch::Keyword {
                    keyword: Bytes::from_static(b"K"),
                    startfrom: i32::MIN,
                },
                find_keys: FindKeys::Keynum {
                    keynumidx: i32::MAX,
                    firstkey: i32::MIN,
                    step: i32::MAX,
                },
            },
        ];
        let legacy = LegacyRange {
            first: i32::MAX,
            last: i32::MIN,
            step: 0,
        };
        let mut out = SmallVec::new();
        for argv in [args(&[]), args(&["x"]), args(&["x", "K", "2", "a", "b"])] {
            find_keys(
                KeyRule::of(&specs, None),
                &specs,
                None,
                legacy,
                &argv,
                &mut out,
            );
            assert!(out.iter().all(|k| k.index < argv.len()));
            find_keys(KeyRule::Walk, &[], None, legacy, &argv, &mut out);
            assert!(out.is_empty());
        }
    }

    proptest::proptest! {
        /// Each command's key rule finds what the general walk finds, for every command
        /// of the shipped table and argument lists of any length.
        #[test]
        fn every_key_rule_reads_as_the_walk(
            command in 0usize..400,
            argc in 0usize..7,
        ) {
            let table = crate::command::CommandTable::builtin();
            let spec = table.iter().nth(command % table.len()).unwrap();
            let mut argv = vec![Bytes::copy_from_slice(spec.name().as_bytes())];
            argv.extend((1..argc).map(|i| Bytes::from(i.to_string())));
            argv.truncate(argc);
            let legacy = LegacyRange { first: spec.first_key, last: spec.last_key, step: spec.step };
            let mut walked = SmallVec::new();
            find_keys_by_walk(&spec.key_specs, spec.getkeys, legacy, &argv, &mut walked);
            let mut found = SmallVec::new();
            find_keys(spec.key_rule, &spec.key_specs, spec.getkeys, legacy, &argv, &mut found);
            proptest::prop_assert_eq!(found, walked);
        }
    }

    #[test]
    fn the_common_commands_take_the_short_ways() {
        let table = crate::command::CommandTable::builtin();
        for name in ["get", "incr", "hset", "lpush", "zadd", "expire", "hget"] {
            let spec = table.get(name).unwrap();
            assert!(
                matches!(spec.key_rule, KeyRule::Lone { index: 1, .. }),
                "{name}: {:?}",
                spec.key_rule
            );
        }
        for name in ["set", "bitfield"] {
            let spec = table.get(name).unwrap();
            assert!(
                matches!(spec.key_rule, KeyRule::Routine(_)),
                "{name}: {:?}",
                spec.key_rule
            );
        }
        for name in ["mset", "del", "sort", "eval"] {
            let spec = table.get(name).unwrap();
            assert_eq!(spec.key_rule, KeyRule::Walk, "{name}");
        }
    }

    #[test]
    fn legacy_triple_serves_tables_without_specs() {
        // MSET in Redis 6: first 1, last -1, step 2.
        let legacy = LegacyRange {
            first: 1,
            last: -1,
            step: 2,
        };
        let mut out = SmallVec::new();
        find_keys(
            KeyRule::Walk,
            &[],
            None,
            legacy,
            &args(&["MSET", "a", "1", "b", "2"]),
            &mut out,
        );
        let found: Vec<usize> = out.iter().map(|k| k.index).collect();
        assert_eq!(found, [1, 3]);
    }
}
