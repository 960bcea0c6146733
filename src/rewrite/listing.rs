//! Listings (KEYS, SCAN MATCH) of legacy names over a cluster:v1 keyspace.
//!
//! A [`ListingPlan`] says, for one glob on legacy names, which indices to read (families
//! with an index the glob can reach) and whether a fan-out SCAN is still needed. The scan,
//! when needed, uses one broad cluster-side pattern (the glob itself when every key it can
//! match keeps its name; else `<prefix>:*` when the glob pins a prefix; else `*`). Each
//! scanned key goes through [`ListingPlan::legacy_from_scanned`], which drops internal keys
//! and keys of the families already read from their indices, maps the rest back to legacy
//! names and applies the glob; so nothing is listed twice and nothing is missed.

use bytes::Bytes;

use super::automaton::{search, Goal, Search};
use super::glob::{escape_glob, literal_prefix, matches_tokens, parse, to_nfa, GlobToken};
use super::layout::ReverseMatch;
use super::template::Values;
use super::{FamilyId, Layout};

/// The indices of one family to read for a listing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexRead {
    /// The prefix id.
    pub prefix: usize,
    /// The family whose records the indices list.
    pub family: FamilyId,
    /// The sorted-set keys to read (and prune).
    pub index_keys: Vec<Bytes>,
}

/// How to answer KEYS or SCAN MATCH for one glob on legacy names.
#[derive(Clone, Debug)]
pub struct ListingPlan {
    /// Indices to read; each member maps back with [`ListingPlan::legacy_from_index`].
    pub index_reads: Vec<IndexRead>,
    /// True when the glob can only match keys listed by `index_reads`: no scan is needed.
    pub indexed_only: bool,
    /// Cluster-side MATCH patterns for the fan-out scan; empty when `indexed_only`.
    pub scan_patterns: Vec<Bytes>,
    tokens: Vec<GlobToken>,
    /// (prefix, rule) pairs read from indices, so the scan drops their keys.
    served: Vec<(usize, usize)>,
}

impl ListingPlan {
    /// True when the legacy name `key` matches the listing's glob.
    pub fn matches(&self, key: &[u8]) -> bool {
        matches_tokens(&self.tokens, key)
    }

    /// The legacy name to list for an entry of one of `index_reads`, if it matches the glob.
    pub fn legacy_from_index(
        &self,
        layout: &Layout,
        index_key: &[u8],
        member: &[u8],
    ) -> Option<Bytes> {
        layout
            .legacy_from_index_entry(index_key, member)
            .filter(|legacy| self.matches(legacy))
    }

    /// The legacy name to list for a key found by the fan-out scan, or `None` when it is
    /// internal, already listed from an index, or does not match the glob.
    pub fn legacy_from_scanned(&self, layout: &Layout, cluster_key: &[u8]) -> Option<Bytes> {
        let legacy = match layout.reverse_match(cluster_key) {
            ReverseMatch::Internal => return None,
            ReverseMatch::Legacy { key, prefix, rule } => {
                if self.served.contains(&(prefix, rule)) {
                    return None;
                }
                key
            }
            ReverseMatch::Outside => Bytes::copy_from_slice(cluster_key),
        };
        self.matches(&legacy).then_some(legacy)
    }
}

impl Layout {
    /// Plans a listing of the legacy names matching the Redis glob `glob`.
    pub fn listing_plan(&self, glob: &[u8]) -> ListingPlan {
        let tokens = parse(glob);
        let glob_nfa = to_nfa(&tokens);
        let literal = literal_prefix(&tokens);
        let mut index_reads: Vec<IndexRead> = Vec::new();
        let mut served = Vec::new();
        let mut served_nfas = Vec::new();
        let mut every_reachable_rule_served = true;
        let mut reaches_renamed = false;
        for (prefix, name) in self.prefixes().iter().enumerate() {
            let lead = format!("{name}:");
            let lead = lead.as_bytes();
            // The glob's fixed start must agree with `prefix:` or nothing under it matches.
            let shared = literal.len().min(lead.len());
            if literal[..shared] != lead[..shared] {
                continue;
            }
            for rule_at in 0..self.rule_count() {
                let rule = self.rule(rule_at);
                let nfa = rule.legacy.nfa(lead);
                if search(&[&glob_nfa, &nfa], Goal::AllAccept) == Search::None {
                    continue;
                }
                reaches_renamed |= rule.cluster.is_some();
                match self.pinned_index_keys(prefix, rule_at, &literal) {
                    Some(index_keys) => {
                        let read = IndexRead {
                            prefix,
                            family: FamilyId(rule.family),
                            index_keys,
                        };
                        add_index_read(&mut index_reads, read);
                        served.push((prefix, rule_at));
                        served_nfas.push(nfa);
                    }
                    None => every_reachable_rule_served = false,
                }
            }
        }
        let indexed_only = every_reachable_rule_served && !served.is_empty() && {
            let mut automata = vec![&glob_nfa];
            automata.extend(served_nfas.iter());
            search(&automata, Goal::FirstOnly) == Search::None
        };
        let scan_patterns = if indexed_only {
            Vec::new()
        } else if !reaches_renamed {
            // Every key the glob can match keeps its name, so the glob finds them as is.
            vec![Bytes::copy_from_slice(glob)]
        } else {
            let pinned_prefix = self.prefixes().iter().find(|name| {
                literal.starts_with(name.as_bytes()) && literal.get(name.len()) == Some(&b':')
            });
            vec![match pinned_prefix {
                Some(name) => {
                    let mut pattern = escape_glob(name.as_bytes());
                    pattern.extend_from_slice(b":*");
                    Bytes::from(pattern)
                }
                None => Bytes::from_static(b"*"),
            }]
        };
        ListingPlan {
            index_reads,
            indexed_only,
            scan_patterns,
            tokens,
            served,
        }
    }

    /// The index keys that list every key of rule `rule_at` matching a glob whose keys all
    /// start with `literal`; `None` when the rule has no index or its index key needs a
    /// capture the glob leaves open.
    fn pinned_index_keys(
        &self,
        prefix: usize,
        rule_at: usize,
        literal: &[u8],
    ) -> Option<Vec<Bytes>> {
        let rule = self.rule(rule_at);
        let index = rule.index.as_ref()?;
        let lead_len = self.prefixes()[prefix].len() + 1;
        let body_literal = literal.get(lead_len..).unwrap_or_default();
        let pinned = rule.legacy.pinned_by_start(body_literal);
        let mut values: Values = Default::default();
        for slot in index.key.capture_slots() {
            let (start, end) = pinned[usize::from(slot)]?;
            values[usize::from(slot)] = Some(body_literal[start..end].to_vec());
        }
        if !index.key.uses_bucket() {
            return Some(vec![self.render_index_key(prefix, rule, &values, 0)]);
        }
        let pinned_bucket = rule
            .bucket_of
            .and_then(|slot| pinned.get(usize::from(slot)).copied().flatten())
            .map(|(start, end)| super::encoding::bucket(&body_literal[start..end]));
        Some(match pinned_bucket {
            Some(bucket) => vec![self.render_index_key(prefix, rule, &values, bucket)],
            None => (0..super::encoding::BUCKET_COUNT)
                .map(|bucket| self.render_index_key(prefix, rule, &values, bucket as u8))
                .collect(),
        })
    }
}

/// Adds `read` to `reads`: merged into the read of the same prefix and family, each index
/// key once, so one listing reads an index once however many rules share it.
fn add_index_read(reads: &mut Vec<IndexRead>, read: IndexRead) {
    match reads
        .iter_mut()
        .find(|known| known.prefix == read.prefix && known.family == read.family)
    {
        Some(known) => {
            for key in read.index_keys {
                if !known.index_keys.contains(&key) {
                    known.index_keys.push(key);
                }
            }
        }
        None => reads.push(read),
    }
}
