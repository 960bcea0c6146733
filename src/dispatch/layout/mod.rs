//! Applying the key layout (see [`crate::rewrite`]) to requests and replies: legacy key
//! names in, cluster:v1 names to the cluster, legacy names back out.
//!
//! One job: make a legacy client see its legacy keyspace while the data lives under the
//! cluster:v1 names. The pieces, in the order a request meets them:
//!
//! - **The layout stage** ([`ActiveLayout::stage`]), once per request, before the plan:
//!   every key position the command table knows (`spec.keys()`) goes through
//!   [`Layout::forward`]. Pure: it returns the request in cluster names with what the rest
//!   of the way needs (the index-backed records written, what the reply needs rewritten
//!   back, what to count), and the one `plan()` then sees the same request shape with or
//!   without a layout; a plain forward of it is batched by the client session like any
//!   other. A new frame is built only when some key changes; a request whose keys are all
//!   outside every prefix costs a prefix check per key and is left alone. A key under a
//!   prefix that no rule matches passes through (counted per prefix) or, with `strict`,
//!   the command is refused.
//! - **Index upkeep**: a command that writes (`KeyFlags::writes`) a key of an index-backed
//!   family runs inside `lua/index_upkeep.lua` (EVALSHA, EVAL on NOSCRIPT): the command,
//!   then the index entry (score = PEXPIRETIME, `+inf` when persistent; removed when the
//!   key is gone), atomically, in the record's slot. Multi-key DEL/UNLINK/MSET spanning
//!   slots are split per slot here, each part with its own upkeep. Commands that cannot
//!   run in a script (`noscript`: EVAL, EVALSHA, FCALL...) run in one MULTI/EXEC with a
//!   refresh-only call of the same script on their index-backed keys, written as one piece
//!   on the slot's shared connection: atomic together. Blocking commands (which would not
//!   block inside MULTI), and what the block cannot take (keys in several slots, a
//!   refusal at queue time), run as they are, followed by the refresh: atomic on its own,
//!   not together with the command.
//! - **Reverse rewrite** of replies that carry key names (RANDOMKEY, the list/zset pops,
//!   XREAD/XREADGROUP), as the stage recorded; KEYS and SCAN are planned as listings
//!   through the layout (the `listing` module).
//!
//! Replies of wrapped commands pass through Lua. Under RESP2 every reply a write command
//! gives (status, integer, bulk, null, array, error) survives byte for byte. Under RESP3
//! the script switches to RESP3 (`redis.setresp(3)`), so nulls, maps and doubles come
//! back typed; a double is re-printed by Lua (`%.17g`), so its digits may differ from the
//! server's own shortest form (e.g. `ZINCRBY` on an indexed key; records are strings and
//! hashes in practice).

mod queued;
mod reply;
mod request;
mod startup;
mod upkeep;

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use smallvec::SmallVec;

use crate::command::{CommandSpec, KeyList, KeyPos};
use crate::protocol::Request;
use crate::rewrite::{Forward, IndexEntry, Layout, Reverse};

pub use queued::QueuedUnderLayout;
pub use reply::{rename_reply_keys, ReplyKeys};
pub use request::{framed, upkeep_as_eval, Listing, Refused, ReplyNames, Rewrite, RewriteCounts};
pub use startup::{start, LEGACY_CHECK_LIMIT};
pub(in crate::dispatch) use upkeep::{upkeep_plan, Upkeep};

#[cfg(test)]
use crate::protocol::encode::encode_request;

/// The index upkeep script (see its header for KEYS and ARGV).
pub const UPKEEP_SCRIPT: &str = include_str!("../../../lua/index_upkeep.lua");

/// A layout in force: the rules plus the run-time policy around them.
#[derive(Debug)]
pub struct ActiveLayout {
    /// The compiled rules.
    pub layout: Layout,
    /// Refuse keys under a prefix that match no rule.
    pub strict: bool,
    /// Start even over legacy data without a marker.
    pub allow_legacy_data: bool,
    /// SHA1 of [`UPKEEP_SCRIPT`] as the server reported it at SCRIPT LOAD.
    script_sha: OnceLock<Bytes>,
    /// `slotbridge_layout_rewrites_total` per family, by family id: built once, so counting
    /// a rewrite allocates nothing.
    rewrite_counters: Vec<metrics::Counter>,
    /// `slotbridge_layout_unmatched_keys_total` per prefix, by prefix index.
    unmatched_counters: Vec<metrics::Counter>,
}

/// A record key written by a command, with the index entry that lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexedKey {
    /// The argument position of the (rewritten) key in the request.
    pub arg: usize,
    /// The cluster key of the record.
    pub record: Bytes,
    /// Its index entry.
    pub entry: IndexEntry,
}

/// A request after the layout stage, for a transaction's queue.
#[derive(Debug, Clone)]
pub struct RewrittenRequest {
    /// The request to send: the original when no key changed.
    pub request: Request,
    /// Every key position of the request.
    pub keys: KeyList,
    /// Record keys of index-backed families the command may create, change or delete.
    pub indexed: SmallVec<[IndexedKey; 2]>,
}

impl ActiveLayout {
    /// A layout in force with this policy.
    pub fn new(layout: Layout, strict: bool, allow_legacy_data: bool) -> ActiveLayout {
        let rewrite_counters = layout
            .families()
            .iter()
            .map(|f| crate::metrics::rewrite(f))
            .collect();
        let unmatched_counters = layout
            .prefixes()
            .iter()
            .map(|p| crate::metrics::unmatched(p))
            .collect();
        ActiveLayout {
            layout,
            strict,
            allow_legacy_data,
            script_sha: OnceLock::new(),
            rewrite_counters,
            unmatched_counters,
        }
    }

    /// The layout `config` puts in force (its rule file loaded, with its policy), `None`
    /// when no rule file is configured. Startup and hot reload both build it here.
    pub fn from_config(
        config: &crate::config::LayoutConfig,
    ) -> Result<Option<Arc<ActiveLayout>>, crate::config::ConfigError> {
        let layout = config.load()?;
        Ok(layout.map(|layout| {
            Arc::new(ActiveLayout::new(
                layout,
                config.strict,
                config.allow_legacy_data,
            ))
        }))
    }

    /// Whether the layout concerns a request with these key positions: a key under one of
    /// its prefixes, or no key at all (KEYS, SCAN, RANDOMKEY and the like list names the
    /// layout must translate or hide). Requests whose keys are all outside every prefix
    /// are left alone: a prefix check per key, no rewrite, no allocation.
    pub fn concerns_keys(&self, args: &[Bytes], keys: &[KeyPos]) -> bool {
        keys.is_empty()
            || keys
                .iter()
                .any(|key| self.layout.prefix_of(&args[key.index]).is_some())
    }

    /// The cluster name of a legacy key (a key a SORT pattern forms): its rule's name, or
    /// the name itself when no rule applies.
    pub fn cluster_name(&self, legacy: Vec<u8>) -> Vec<u8> {
        match self.layout.forward(&legacy) {
            Forward::Rewritten(rewritten) => rewritten.key.to_vec(),
            Forward::Outside | Forward::Unmatched { .. } => legacy,
        }
    }

    /// The legacy name to show for a cluster key, `None` for an internal key.
    pub fn legacy_name(&self, cluster_key: &[u8]) -> Option<Bytes> {
        match self.layout.reverse(cluster_key) {
            Reverse::Outside => Some(Bytes::copy_from_slice(cluster_key)),
            Reverse::Internal => None,
            Reverse::Legacy(key) => Some(key),
        }
    }

    fn sha(&self) -> Option<&Bytes> {
        self.script_sha.get()
    }
}

/// Whether `spec` writing `key` (of an index-backed family) triggers index upkeep. Scripts
/// declare keys they may write whatever the key spec flags say.
pub(in crate::dispatch) fn upkeeps(spec: &CommandSpec, key: &KeyPos) -> bool {
    is_script_call(spec) || key.flags.writes()
}

/// Whether the index upkeep of a `spec` request runs inside the upkeep script together
/// with the command (otherwise: MULTI/EXEC with a refresh, or the command then a refresh).
pub(in crate::dispatch) fn upkeep_in_script(spec: &CommandSpec, args: &[Bytes]) -> bool {
    !is_script_call(spec)
        && !spec.blocks(args)
        && !spec.flags.has(crate::command::CommandFlags::NOSCRIPT)
}

fn is_script_call(spec: &CommandSpec) -> bool {
    matches!(spec.name.as_str(), "eval" | "evalsha" | "fcall")
}

#[cfg(test)]
mod tests;
