//! The key layout rules engine: legacy key names <-> cluster:v1 key names, both directions,
//! from rules that are data. Pure: no IO besides reading the rule file.
//!
//! # Rule file
//!
//! ```yaml
//! layout: cluster:v1          # optional: the value of the marker key `<p>:{meta}:layout`
//! prefixes: [mybot]           # optional: used when the caller (`--prefix`) gives none
//! rules:
//!   - family: chat            # metric label value; rules may share a family
//!     legacy: "<p>:chat:<id...>"
//!     cluster: "<p>:{ch:<b>}:r:<id>"
//!     index: { key: "<p>:{ch:<b>}:idx", member: "<id>" }
//!     bucket_of: id           # optional when the legacy pattern has one capture
//!   - family: unchanged
//!     legacy: "<p>:conv:<rest...>"
//!     unchanged: true         # or `cluster:` equal to `legacy:`
//! ```
//!
//! Placeholders: `<p>` the prefix (every key template starts with `<p>:`), `<b>` the bucket
//! (32-bit FNV-1a of the raw `bucket_of` capture, mod 32; cluster side only), `<x>` one
//! segment (no `:`), `<x...>` one or more segments (at most one per pattern). Patterns are
//! anchored at both ends. `<` and `>` cannot appear as literal text. Captures are
//! percent-encoded into cluster keys and index members (see [`encoding`]) and decoded on
//! the way back, so a cluster template may write `<id>` for a legacy `<id...>`.
//!
//! # Invariants
//!
//! - Precedence: the matching rule with the most literal characters in its legacy pattern
//!   wins; ties go to the earlier rule and are reported by [`Layout::conflicts`].
//! - [`Layout::reverse`] is the exact inverse of [`Layout::forward`]: it accepts a cluster
//!   key only if forwarding the legacy name it yields gives that same cluster key back.
//! - Index keys and the marker are [`Reverse::Internal`] and never reach legacy clients.
//! - Load-time checks guarantee each index key shares the record's hash tag (one slot).
//! - A key outside every prefix costs one table lookup (plus a `starts_with` per prefix
//!   sharing its first byte) and never allocates.

mod automaton;
pub mod database;
pub mod encoding;
pub mod glob;
mod layout;
mod listing;
mod rules;
mod template;

#[cfg(test)]
mod glob_against_redis;
#[cfg(test)]
mod tests;

use bytes::Bytes;

pub use layout::Layout;
pub use listing::{IndexRead, ListingPlan};
pub use rules::LayoutError;

/// The marker value of the cluster:v1 layout.
pub const CLUSTER_V1: &str = "cluster:v1";

/// The layout marker key of `prefix`: `<prefix>:{meta}:layout`.
pub fn marker_key(prefix: &str) -> Bytes {
    Bytes::from(format!("{prefix}:{{meta}}:layout"))
}

/// A family of keys (one or more rules), named in the rule file; a metric label value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FamilyId(pub u16);

/// What [`Layout::forward`] makes of a legacy key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forward {
    /// Under no layout prefix: pass it through untouched.
    Outside,
    /// Under prefix `prefix` (an index into [`Layout::prefixes`]) but no rule matches.
    Unmatched {
        /// The prefix id.
        prefix: usize,
    },
    /// A rule matched (an unchanged-name rule gives back the same bytes).
    Rewritten(Rewritten),
}

/// A legacy key translated by a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rewritten {
    /// The cluster:v1 key.
    pub key: Bytes,
    /// The rule's family.
    pub family: FamilyId,
    /// The index entry to keep for this key, for index-backed families.
    pub index: Option<IndexEntry>,
}

/// The entry that lists one record in its family's index (a sorted set, same slot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexEntry {
    /// The sorted-set key.
    pub key: Bytes,
    /// The member naming the record.
    pub member: Bytes,
}

/// What [`Layout::reverse`] makes of a cluster key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reverse {
    /// Not a key this layout produces: show it as it is.
    Outside,
    /// An index or the marker: never show it to a legacy client.
    Internal,
    /// The legacy name of the key.
    Legacy(Bytes),
}

/// A rule as written in the file, for `check-config` and `explain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleInfo {
    /// 1-based position in the file.
    pub number: usize,
    /// The family name.
    pub family: String,
    /// The legacy pattern.
    pub legacy: String,
    /// The cluster template; `None` for an unchanged-name rule.
    pub cluster: Option<String>,
    /// The index key and member templates.
    pub index: Option<(String, String)>,
}

/// Two rules that can match the same key with equal specificity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleConflict {
    /// 1-based number of the rule that wins (the earlier one).
    pub first: usize,
    /// 1-based number of the rule that loses.
    pub second: usize,
    /// A shortest key (under the first prefix) both match; `None` when the search gave up.
    pub example: Option<Bytes>,
}
