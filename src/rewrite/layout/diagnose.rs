//! What the layout says about itself and about one key, for people: rules that can match
//! the same key with equal specificity, the rule a key falls under, and an account of how
//! a key translates.

use bytes::Bytes;

use super::{Found, Layout};
use crate::rewrite::automaton::{search, Goal, Search};
use crate::rewrite::{RuleConflict, RuleInfo};
use crate::route::key_slot;

impl Layout {
    /// Pairs of rules that can match one key with equal specificity: the file order, not
    /// the data, decides between them, which is almost always a mistake in the file.
    pub fn conflicts(&self) -> Vec<RuleConflict> {
        let lead = self
            .prefixes
            .first()
            .map(|prefix| format!("{prefix}:"))
            .unwrap_or_default();
        let nfas: Vec<_> = self
            .rules
            .iter()
            .map(|rule| rule.legacy.nfa(lead.as_bytes()))
            .collect();
        let mut conflicts = Vec::new();
        for first in 0..self.rules.len() {
            for second in first + 1..self.rules.len() {
                if self.rules[first].legacy.literal_len() != self.rules[second].legacy.literal_len()
                {
                    continue;
                }
                let example = match search(&[&nfas[first], &nfas[second]], Goal::AllAccept) {
                    Search::None => continue,
                    Search::Found(example) => Some(Bytes::from(example)),
                    Search::Unknown => None,
                };
                conflicts.push(RuleConflict {
                    first: first + 1,
                    second: second + 1,
                    example,
                });
            }
        }
        conflicts
    }

    /// The rule `key` falls under (the one [`Layout::forward`] applies), `None` when the
    /// key is outside every prefix or no rule under its prefix matches.
    pub fn rule_of(&self, key: &[u8]) -> Option<&RuleInfo> {
        match self.find(key) {
            Found::Rule { rule, .. } => self.infos.get(rule),
            Found::Outside | Found::Unmatched(_) => None,
        }
    }

    /// A human-readable account of how `key` translates: prefix, rule, cluster key, hash
    /// slot, index entry.
    pub fn explain(&self, key: &[u8]) -> String {
        let shown = |bytes: &[u8]| bytes.escape_ascii().to_string();
        let mut text = format!("key: {}\n", shown(key));
        match self.find(key) {
            Found::Outside => {
                text.push_str(
                    "prefix: none (outside every layout prefix; passed through untouched)\n",
                );
                text.push_str(&format!("hash slot: {}\n", key_slot(key)));
            }
            Found::Unmatched(prefix) => {
                text.push_str(&format!("prefix: {}\n", self.prefixes[prefix]));
                text.push_str(
                    "rule: none matches (passed through unchanged; refused when strict)\n",
                );
                text.push_str(&format!("hash slot: {}\n", key_slot(key)));
            }
            Found::Rule {
                prefix,
                rule,
                spans,
            } => {
                let info = &self.infos[rule];
                let rewritten =
                    self.build(prefix, rule, key, &spans, || Bytes::copy_from_slice(key));
                text.push_str(&format!("prefix: {}\n", self.prefixes[prefix]));
                text.push_str(&format!(
                    "rule: {} (family {}): {} -> {}\n",
                    info.number,
                    info.family,
                    info.legacy,
                    info.cluster.as_deref().unwrap_or("(unchanged)")
                ));
                text.push_str(&format!("cluster key: {}\n", shown(&rewritten.key)));
                text.push_str(&format!("hash slot: {}\n", key_slot(&rewritten.key)));
                if let Some(index) = &rewritten.index {
                    text.push_str(&format!(
                        "index: {} member {} (slot {})\n",
                        shown(&index.key),
                        shown(&index.member),
                        key_slot(&index.key)
                    ));
                }
            }
        }
        text
    }
}
