//! The command table: specs by name, and the per-request lookup.
//!
//! Invariants: names are stored lower-case, subcommands as `container|sub`; a lookup
//! folds case into a stack buffer and never allocates; the table is immutable once
//! built and cheap to clone (one `Arc`).

use super::name_hash::{NameMap, PackedMap, PackedName};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use super::getkeys::GetKeysProc;
use super::keys::{self, KeyList, KeyRule, KeySpec, LegacyRange};
use super::parse::parse_command_reply;
use super::shape::{CrossSlot, Shape};

/// Longest name a lookup can resolve, `container|sub` included. Redis 7's longest is
/// `cluster|count-failure-reports` (29); longer names are unknown to lookups.
pub const MAX_NAME_LEN: usize = 64;

/// A Redis 7.0 `COMMAND` reply (RESP2), captured by `scripts/capture-command-table.sh`.
const BUILTIN_COMMAND_REPLY: &[u8] = include_bytes!("redis7_command.resp");

/// Command flags from `COMMAND` (the subset the proxy acts on).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandFlags(pub u32);

impl CommandFlags {
    /// May modify data.
    pub const WRITE: u32 = 1 << 0;
    /// Never modifies keys.
    pub const READONLY: u32 = 1 << 1;
    /// Administrative command.
    pub const ADMIN: u32 = 1 << 2;
    /// Pub/Sub command.
    pub const PUBSUB: u32 = 1 << 3;
    /// Not allowed in scripts.
    pub const NOSCRIPT: u32 = 1 << 4;
    /// May block the client.
    pub const BLOCKING: u32 = 1 << 5;
    /// Key positions depend on the arguments.
    pub const MOVABLEKEYS: u32 = 1 << 6;
    /// May grow memory use (refused when out of memory).
    pub const DENYOOM: u32 = 1 << 7;
    /// Allowed while the server loads data.
    pub const LOADING: u32 = 1 << 8;
    /// Allowed on a replica with stale data.
    pub const STALE: u32 = 1 << 9;
    /// O(1) or O(log N).
    pub const FAST: u32 = 1 << 10;
    /// Not allowed inside MULTI.
    pub const NO_MULTI: u32 = 1 << 11;
    /// Not shown to MONITOR.
    pub const SKIP_MONITOR: u32 = 1 << 12;
    /// Not logged to the slow log.
    pub const SKIP_SLOWLOG: u32 = 1 << 13;
    /// Allowed on an importing slot after ASKING.
    pub const ASKING: u32 = 1 << 14;
    /// Allowed before authentication.
    pub const NO_AUTH: u32 = 1 << 15;
    /// May replicate even when read-only.
    pub const MAY_REPLICATE: u32 = 1 << 16;
    /// May be called with no keys at all (EVAL with numkeys 0).
    pub const NO_MANDATORY_KEYS: u32 = 1 << 17;
    /// Refused while the replica loads asynchronously.
    pub const NO_ASYNC_LOADING: u32 = 1 << 18;
    /// Allowed while a script is busy.
    pub const ALLOW_BUSY: u32 = 1 << 19;
    /// Provided by a module.
    pub const MODULE: u32 = 1 << 20;

    /// Whether `flag` (one of the constants) is set.
    pub fn has(self, flag: u32) -> bool {
        self.0 & flag != 0
    }

    /// The bit for a flag as `COMMAND` spells it (case-insensitive); `None` for flags
    /// the proxy does not track.
    pub fn from_name(name: &[u8]) -> Option<u32> {
        const NAMES: [(&[u8], u32); 21] = [
            (b"write", CommandFlags::WRITE),
            (b"readonly", CommandFlags::READONLY),
            (b"admin", CommandFlags::ADMIN),
            (b"pubsub", CommandFlags::PUBSUB),
            (b"noscript", CommandFlags::NOSCRIPT),
            (b"blocking", CommandFlags::BLOCKING),
            (b"movablekeys", CommandFlags::MOVABLEKEYS),
            (b"denyoom", CommandFlags::DENYOOM),
            (b"loading", CommandFlags::LOADING),
            (b"stale", CommandFlags::STALE),
            (b"fast", CommandFlags::FAST),
            (b"no_multi", CommandFlags::NO_MULTI),
            (b"skip_monitor", CommandFlags::SKIP_MONITOR),
            (b"skip_slowlog", CommandFlags::SKIP_SLOWLOG),
            (b"asking", CommandFlags::ASKING),
            (b"no_auth", CommandFlags::NO_AUTH),
            (b"may_replicate", CommandFlags::MAY_REPLICATE),
            (b"no_mandatory_keys", CommandFlags::NO_MANDATORY_KEYS),
            (b"no_async_loading", CommandFlags::NO_ASYNC_LOADING),
            (b"allow_busy", CommandFlags::ALLOW_BUSY),
            (b"module", CommandFlags::MODULE),
        ];
        NAMES
            .iter()
            .find(|(known, _)| known.eq_ignore_ascii_case(name))
            .map(|&(_, bit)| bit)
    }
}

/// ACL category names (without `@`); bit `i` of [`CommandSpec::acl_categories`] is
/// `ACL_CATEGORIES[i]`.
pub const ACL_CATEGORIES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// The bit of an ACL category (`@read` or `read`, case-insensitive), if known.
pub fn acl_category_bit(name: &[u8]) -> Option<u64> {
    let name = name.strip_prefix(b"@").unwrap_or(name);
    ACL_CATEGORIES
        .iter()
        .position(|known| known.as_bytes().eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// Commands Redis flags `may_replicate`, a flag COMMAND INFO hides on purpose.
const MAY_REPLICATE: &[&str] = &["eval", "evalsha", "fcall", "publish", "spublish", "pfcount"];

/// One command (or subcommand) of the table.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// Lower-case name; subcommands as `object|encoding`, as Redis names them.
    pub name: String,
    /// Redis arity: N exact, -N at least N (command name included).
    pub arity: i32,
    /// Command flags.
    pub flags: CommandFlags,
    /// Legacy first key index (0: no keys).
    pub first_key: i32,
    /// Legacy last key index (negative: from the end).
    pub last_key: i32,
    /// Legacy key step.
    pub step: i32,
    /// ACL categories as a bitset over [`ACL_CATEGORIES`].
    pub acl_categories: u64,
    /// Redis 7 key specs, in server order.
    pub key_specs: Vec<KeySpec>,
    /// The command's own key routine, for when its specs cannot find the keys.
    pub getkeys: Option<GetKeysProc>,
    /// How its keys are found: [`KeyRule::of`] `key_specs` and `getkeys`.
    pub key_rule: KeyRule,
    /// Whether this is a container (OBJECT, CONFIG...) whose subcommands have specs.
    pub has_subcommands: bool,
    /// How the proxy carries the command out, from its name and flags.
    pub shape: Shape,
    /// What the proxy does when the command's keys span slots (`None`: `-CROSSSLOT`).
    pub cross_slot: Option<CrossSlot>,
}

impl CommandSpec {
    /// Whether `argc` arguments (command name included) fit the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let needed = self.arity.unsigned_abs() as usize;
        if self.arity < 0 {
            argc >= needed
        } else {
            argc == needed
        }
    }

    /// Key positions for this invocation (`args[0]` is the command name), in the order
    /// Redis's `COMMAND GETKEYS` reports them. `out` is cleared first. Arguments that do
    /// not fit give the keys Redis would find (often none); arity is checked separately.
    pub fn keys(&self, args: &[Bytes], out: &mut KeyList) {
        let legacy = LegacyRange {
            first: self.first_key,
            last: self.last_key,
            step: self.step,
        };
        keys::find_keys(
            self.key_rule,
            &self.key_specs,
            self.getkeys,
            legacy,
            args,
            out,
        );
    }

    /// The name for metrics labels (lower-case, `container|sub` for subcommands).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether the command may modify data.
    pub fn is_write(&self) -> bool {
        self.flags.has(CommandFlags::WRITE)
    }

    /// Whether CLIENT PAUSE WRITE holds the command: it writes, or may replicate (EVAL,
    /// FCALL, PUBLISH, PFCOUNT...).
    pub fn is_write_or_may_replicate(&self) -> bool {
        self.flags.has(CommandFlags::WRITE)
            || self.flags.has(CommandFlags::MAY_REPLICATE)
            || MAY_REPLICATE.contains(&self.name.as_str())
    }

    /// Whether the command is flagged `blocking` (it may block, depending on arguments).
    pub fn is_blocking(&self) -> bool {
        self.flags.has(CommandFlags::BLOCKING)
    }

    /// Whether this is a Pub/Sub command (SUBSCRIBE, PUBLISH, SSUBSCRIBE...).
    pub fn is_pubsub(&self) -> bool {
        self.flags.has(CommandFlags::PUBSUB)
    }

    /// Whether the command is in the ACL category `name` (`read`, `@dangerous`...).
    pub fn has_acl_category(&self, name: &str) -> bool {
        acl_category_bit(name.as_bytes()).is_some_and(|bit| self.acl_categories & bit != 0)
    }

    /// Whether the client session's own checks act on this command before routing (see
    /// [`Shape::checked_by_session`]): by its shape, or, for the few whose shape says how
    /// routing carries them out, because the session answers some invocations itself
    /// (see `shape::answered_by_session_too`).
    pub fn checked_by_session(&self) -> bool {
        self.shape.checked_by_session() || super::shape::answered_by_session_too(&self.name)
    }

    /// Whether some arguments make this command block (see [`CommandSpec::blocks`]).
    pub fn may_block(&self) -> bool {
        self.shape.may_block()
    }

    /// Whether this invocation may hold its connection while waiting (see
    /// [`Shape::blocks`]).
    pub fn blocks(&self, args: &[Bytes]) -> bool {
        self.shape.blocks(args)
    }
}

#[derive(Debug, Default)]
struct TableData {
    specs: Vec<CommandSpec>,
    by_name: NameMap<Box<[u8]>, usize>,
    /// The names that pack (every one Redis 7 has at the top level), for the per-request
    /// lookup; `by_name` serves the rest.
    by_packed: PackedMap<usize>,
}

/// Some of a [`CommandTable`]'s commands, by index (see [`CommandTable::lookup_index`]):
/// a per-request question about a command answered by one load, not by names.
#[derive(Debug, Clone, Default)]
pub struct CommandSet(Box<[bool]>);

impl CommandSet {
    /// Whether the command at `index` is in the set.
    pub fn contains(&self, index: usize) -> bool {
        self.0.get(index).copied().unwrap_or(false)
    }
}

/// All commands the proxy knows.
#[derive(Debug, Clone, Default)]
pub struct CommandTable {
    data: Arc<TableData>,
}

impl CommandTable {
    /// The built-in table (a Redis 7 `COMMAND` reply shipped with the proxy), parsed
    /// once per process and shared by every clone.
    pub fn builtin() -> Self {
        static BUILTIN: OnceLock<CommandTable> = OnceLock::new();
        BUILTIN
            .get_or_init(|| {
                // The shipped reply is tested to parse; an empty table is the fallback
                // rather than a panic.
                Self::from_command_reply(BUILTIN_COMMAND_REPLY).unwrap_or_default()
            })
            .clone()
    }

    /// Parses a `COMMAND` reply (one RESP2 or RESP3 frame, raw bytes).
    pub fn from_command_reply(frame: &[u8]) -> Result<Self, String> {
        let specs = parse_command_reply(frame)?;
        let mut by_name = NameMap::with_capacity_and_hasher(specs.len(), Default::default());
        let mut by_packed = PackedMap::with_capacity_and_hasher(specs.len(), Default::default());
        for (i, spec) in specs.iter().enumerate() {
            by_name.insert(spec.name.as_bytes().into(), i);
            // A subcommand's own name (`config|get`) is no command a client can send, as
            // in Redis: the first argument never finds it.
            let packed = PackedName::of(spec.name.as_bytes()).filter(|_| !spec.name.contains('|'));
            if let Some(packed) = packed {
                by_packed.insert(packed, i);
            }
        }
        Ok(Self {
            data: Arc::new(TableData {
                specs,
                by_name,
                by_packed,
            }),
        })
    }

    /// The spec for a request's arguments (resolving container commands such as
    /// `OBJECT ENCODING` to their subcommand). Case-insensitive, no allocation.
    pub fn lookup(&self, args: &[Bytes]) -> Option<&CommandSpec> {
        self.lookup_index(args).and_then(|index| self.spec(index))
    }

    /// Like [`CommandTable::lookup`], as the spec's position in this table: a handle a
    /// caller can keep across an `await` without borrowing the table, and that indexes
    /// per-command data built from [`CommandTable::iter`] (same order).
    pub fn lookup_index(&self, args: &[Bytes]) -> Option<usize> {
        let first = args.first()?;
        let index = match PackedName::of(first) {
            // Every name that packs is in `by_packed`: a miss there is a miss.
            Some(packed) => *self.data.by_packed.get(&packed)?,
            None => self.index_by_name(first)?,
        };
        if !self.data.specs.get(index)?.has_subcommands {
            return Some(index);
        }
        let mut buf = [0u8; MAX_NAME_LEN];
        let name_len = fold_into(&mut buf, 0, first)?;
        let sub = args.get(1).and_then(|sub| {
            let bar = buf.get_mut(name_len)?;
            *bar = b'|';
            let full_len = fold_into(&mut buf, name_len + 1, sub)?;
            self.data.by_name.get(&buf[..full_len]).copied()
        });
        Some(sub.unwrap_or(index))
    }

    /// The index of the command named `name`, in any case, by the byte-slice map (never
    /// a subcommand's `container|sub` name).
    fn index_by_name(&self, name: &[u8]) -> Option<usize> {
        if name.contains(&b'|') {
            return None;
        }
        let mut buf = [0u8; MAX_NAME_LEN];
        let name_len = fold_into(&mut buf, 0, name)?;
        self.data.by_name.get(&buf[..name_len]).copied()
    }

    /// The spec at `index` (from [`CommandTable::lookup_index`]).
    pub fn spec(&self, index: usize) -> Option<&CommandSpec> {
        self.data.specs.get(index)
    }

    /// The spec with this exact lower-case name (`get`, `object|encoding`).
    pub fn get(&self, name: &str) -> Option<&CommandSpec> {
        self.get_bytes(name.as_bytes())
    }

    fn get_bytes(&self, name: &[u8]) -> Option<&CommandSpec> {
        let index = *self.data.by_name.get(name)?;
        self.data.specs.get(index)
    }

    /// Every spec, top-level commands each followed by their subcommands.
    pub fn iter(&self) -> impl Iterator<Item = &CommandSpec> {
        self.data.specs.iter()
    }

    /// The commands of this table that `keep` selects, as a set of their indexes.
    pub fn select(&self, keep: impl FnMut(&CommandSpec) -> bool) -> CommandSet {
        CommandSet(self.iter().map(keep).collect())
    }

    /// Number of specs (subcommands included).
    pub fn len(&self) -> usize {
        self.data.specs.len()
    }

    /// Whether the table has no command at all.
    pub fn is_empty(&self) -> bool {
        self.data.specs.is_empty()
    }
}

/// Lower-cases `word` into `buf` at `at`; the end offset, or `None` when it won't fit.
fn fold_into(buf: &mut [u8; MAX_NAME_LEN], at: usize, word: &[u8]) -> Option<usize> {
    let end = at.checked_add(word.len())?;
    let dest = buf.get_mut(at..end)?;
    for (d, s) in dest.iter_mut().zip(word) {
        *d = s.to_ascii_lowercase();
    }
    Some(end)
}
