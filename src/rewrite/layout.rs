//! [`Layout`]: the compiled rules for a set of prefixes, and both directions of the
//! translation. Built once at start-up and shared read-only.
//!
//! Cost model of [`Layout::forward`]: a key whose first byte starts no prefix is rejected by
//! one table lookup; otherwise each prefix sharing that first byte costs one `starts_with`.
//! Keys outside every prefix never allocate. A key under a prefix is tried against the
//! rules from most to least specific; each try is a few literal comparisons and `:` scans,
//! with no allocation until the rewritten key is built.
//!
//! Reading index entries back to legacy keys lives in `index`; the layout's account of
//! itself and of one key (conflicting rules, `explain`) in `diagnose`.

use std::cell::RefCell;
use std::path::Path;

use bytes::Bytes;

use super::automaton::ByteSet;
use super::encoding::bucket;
use super::rules::{check_prefixes, compile_rule, parse_file, read_file, LayoutError, Rule};
use super::template::{Spans, Values};
use super::{FamilyId, Forward, IndexEntry, Reverse, Rewritten, RuleInfo};

mod diagnose;
mod index;

/// The body (after `<p>:`) of the layout marker key.
const MARKER_BODY: &[u8] = b"{meta}:layout";

/// Compiled rules for a set of prefixes.
#[derive(Debug)]
pub struct Layout {
    source_name: String,
    layout_name: Option<String>,
    prefixes: Vec<String>,
    prefix_first_bytes: ByteSet,
    families: Vec<String>,
    rules: Vec<Rule>,
    infos: Vec<RuleInfo>,
    /// Rule positions, most specific first; ties keep file order.
    by_precedence: Vec<usize>,
}

/// Which rule a legacy key falls under, before anything is built.
enum Found {
    Outside,
    Unmatched(usize),
    Rule {
        prefix: usize,
        rule: usize,
        spans: Spans,
    },
}

/// [`Layout::reverse`] with the rule that produced the key, for listings.
pub(crate) enum ReverseMatch {
    Outside,
    Internal,
    Legacy {
        key: Bytes,
        prefix: usize,
        rule: usize,
    },
}

impl Layout {
    /// Reads the rule file at `path` for `prefixes` (when empty, the file's `prefixes:`).
    pub fn load(path: impl AsRef<Path>, prefixes: &[String]) -> Result<Layout, LayoutError> {
        let path = path.as_ref();
        let text = read_file(path)?;
        Self::from_yaml_str(&text, &path.display().to_string(), prefixes)
    }

    /// Parses rule-file text; `source_name` names it in errors. Prefixes as in [`Layout::load`].
    pub fn from_yaml_str(
        text: &str,
        source_name: &str,
        prefixes: &[String],
    ) -> Result<Layout, LayoutError> {
        let file = parse_file(text, source_name)?;
        let prefixes = if prefixes.is_empty() {
            file.prefixes.clone()
        } else {
            prefixes.to_vec()
        };
        check_prefixes(&prefixes, source_name)?;
        let mut families: Vec<String> = Vec::new();
        let mut rules = Vec::with_capacity(file.rules.len());
        let mut infos = Vec::with_capacity(file.rules.len());
        for (at, entry) in file.rules.iter().enumerate() {
            let family = match families.iter().position(|known| *known == entry.family()) {
                Some(id) => id,
                None => {
                    families.push(entry.family().to_owned());
                    families.len() - 1
                }
            };
            let rule = u16::try_from(family)
                .map_err(|_| "too many families".to_owned())
                .and_then(|family| compile_rule(entry, family))
                .map_err(|reason| LayoutError::Rule {
                    source_name: source_name.to_owned(),
                    number: at + 1,
                    family: entry.family().to_owned(),
                    reason,
                })?;
            infos.push(entry.info(at + 1, rule.cluster.is_none()));
            rules.push(rule);
        }
        let mut by_precedence: Vec<usize> = (0..rules.len()).collect();
        by_precedence.sort_by_key(|&at| std::cmp::Reverse(rules[at].legacy.literal_len()));
        let mut prefix_first_bytes = ByteSet::default();
        for prefix in &prefixes {
            if let Some(&first) = prefix.as_bytes().first() {
                prefix_first_bytes.insert(first);
            }
        }
        Ok(Layout {
            source_name: source_name.to_owned(),
            layout_name: file.layout,
            prefixes,
            prefix_first_bytes,
            families,
            rules,
            infos,
            by_precedence,
        })
    }

    /// Where the rules came from (a path, or the name given to [`Layout::from_yaml_str`]).
    pub fn source_name(&self) -> &str {
        &self.source_name
    }

    /// The layout the file declares (`layout:`), the value of the marker key; e.g. `cluster:v1`.
    pub fn layout_name(&self) -> Option<&str> {
        self.layout_name.as_deref()
    }

    /// The prefixes; a prefix id is a position in this list.
    pub fn prefixes(&self) -> &[String] {
        &self.prefixes
    }

    /// Family names; a [`FamilyId`] is a position in this list.
    pub fn families(&self) -> &[String] {
        &self.families
    }

    /// The name of `family` (a metric label value); empty for an unknown id.
    pub fn family_name(&self, family: FamilyId) -> &str {
        self.families
            .get(usize::from(family.0))
            .map_or("", String::as_str)
    }

    /// The family called `name`.
    pub fn family_id(&self, name: &str) -> Option<FamilyId> {
        let at = self.families.iter().position(|known| known == name)?;
        u16::try_from(at).ok().map(FamilyId)
    }

    /// The rules as written, in file order.
    pub fn rules(&self) -> &[RuleInfo] {
        &self.infos
    }

    /// The marker key of prefix `prefix` (a prefix id); `None` for an unknown id.
    pub fn marker_key(&self, prefix: usize) -> Option<Bytes> {
        self.prefixes
            .get(prefix)
            .map(|name| super::marker_key(name))
    }

    /// The id of the prefix `key` lives under (`<prefix>:...`). Never allocates.
    pub fn prefix_of(&self, key: &[u8]) -> Option<usize> {
        let &first = key.first()?;
        if !self.prefix_first_bytes.contains(first) {
            return None;
        }
        self.prefixes.iter().position(|prefix| {
            key.len() > prefix.len()
                && key.starts_with(prefix.as_bytes())
                && key[prefix.len()] == b':'
        })
    }

    fn body<'k>(&self, prefix: usize, key: &'k [u8]) -> &'k [u8] {
        &key[self.prefixes[prefix].len() + 1..]
    }

    fn find(&self, key: &[u8]) -> Found {
        let Some(prefix) = self.prefix_of(key) else {
            return Found::Outside;
        };
        let body = self.body(prefix, key);
        for &rule in &self.by_precedence {
            if let Some(spans) = self.rules[rule].legacy.matches(body) {
                return Found::Rule {
                    prefix,
                    rule,
                    spans,
                };
            }
        }
        Found::Unmatched(prefix)
    }

    /// The rewrite of `key` by rule `rule_at`; a name the rule keeps is `kept()`.
    fn build(
        &self,
        prefix: usize,
        rule_at: usize,
        key: &[u8],
        spans: &Spans,
        kept: impl FnOnce() -> Bytes,
    ) -> Rewritten {
        let rule = &self.rules[rule_at];
        let family = FamilyId(rule.family);
        let Some(cluster) = &rule.cluster else {
            return Rewritten {
                key: kept(),
                family,
                index: None,
            };
        };
        let body = self.body(prefix, key);
        let value = |slot: u8| {
            let (start, end) = spans[usize::from(slot)];
            &body[start..end]
        };
        let record_bucket = rule.bucket_of.map_or(0, |slot| bucket(value(slot)));
        let render_key = |template: &super::template::ClusterTemplate| {
            rendered(|out| {
                out.extend_from_slice(self.prefixes[prefix].as_bytes());
                out.push(b':');
                template.render(value, record_bucket, out);
            })
        };
        let index = rule.index.as_ref().map(|index| IndexEntry {
            key: render_key(&index.key),
            member: rendered(|out| index.member.render(value, record_bucket, out)),
        });
        Rewritten {
            key: render_key(cluster),
            family,
            index,
        }
    }

    /// Translates a legacy key name to its cluster:v1 name.
    pub fn forward(&self, key: &[u8]) -> Forward {
        self.forward_keeping(key, || Bytes::copy_from_slice(key))
    }

    /// [`Layout::forward`] of a name held as `Bytes`: a name the rules keep is shared, not
    /// copied (requests carry their names so; this keeps them allocation-free).
    pub fn forward_shared(&self, key: &Bytes) -> Forward {
        self.forward_keeping(key, || key.clone())
    }

    fn forward_keeping(&self, key: &[u8], kept: impl FnOnce() -> Bytes) -> Forward {
        match self.find(key) {
            Found::Outside => Forward::Outside,
            Found::Unmatched(prefix) => Forward::Unmatched { prefix },
            Found::Rule {
                prefix,
                rule,
                spans,
            } => Forward::Rewritten(self.build(prefix, rule, key, &spans, kept)),
        }
    }

    /// The legacy key for decoded captures, or `None` when one is missing.
    fn legacy_key(&self, prefix: usize, rule: &Rule, values: &Values) -> Option<Bytes> {
        let names = rule.legacy.names().len();
        if values[..names].iter().any(Option::is_none) {
            return None;
        }
        Some(rendered(|out| {
            out.extend_from_slice(self.prefixes[prefix].as_bytes());
            out.push(b':');
            rule.legacy.render(
                |slot| values[usize::from(slot)].as_deref().unwrap_or_default(),
                out,
            );
        }))
    }

    /// True when `legacy` goes forward through rule `rule` to exactly `expect`; this keeps
    /// the two directions a bijection (no second spelling, no key stolen by a more
    /// specific rule).
    fn forwards_to(&self, legacy: &[u8], rule: usize, expect: impl Fn(&Rewritten) -> bool) -> bool {
        match self.find(legacy) {
            Found::Rule {
                prefix,
                rule: found,
                spans,
            } if found == rule => expect(&self.build(prefix, rule, legacy, &spans, || {
                Bytes::copy_from_slice(legacy)
            })),
            _ => false,
        }
    }

    /// [`Layout::reverse`], also naming the rule.
    pub(crate) fn reverse_match(&self, cluster_key: &[u8]) -> ReverseMatch {
        let Some(prefix) = self.prefix_of(cluster_key) else {
            return ReverseMatch::Outside;
        };
        let body = self.body(prefix, cluster_key);
        if body == MARKER_BODY {
            return ReverseMatch::Internal;
        }
        for &rule_at in &self.by_precedence {
            let rule = &self.rules[rule_at];
            let legacy = match &rule.cluster {
                None => rule
                    .legacy
                    .matches(body)
                    .map(|_| Bytes::copy_from_slice(cluster_key)),
                Some(template) => {
                    let mut values = Values::default();
                    template
                        .read(body, &mut values)
                        .and_then(|_| self.legacy_key(prefix, rule, &values))
                }
            };
            if let Some(legacy) = legacy {
                if self.forwards_to(&legacy, rule_at, |rw| rw.key == cluster_key) {
                    return ReverseMatch::Legacy {
                        key: legacy,
                        prefix,
                        rule: rule_at,
                    };
                }
            }
            if let Some(index) = &rule.index {
                if index.key.read(body, &mut Values::default()).is_some() {
                    return ReverseMatch::Internal;
                }
            }
        }
        ReverseMatch::Outside
    }

    /// Translates a cluster key back to the legacy name a client should see.
    pub fn reverse(&self, cluster_key: &[u8]) -> Reverse {
        match self.reverse_match(cluster_key) {
            ReverseMatch::Outside => Reverse::Outside,
            ReverseMatch::Internal => Reverse::Internal,
            ReverseMatch::Legacy { key, .. } => Reverse::Legacy(key),
        }
    }

    pub(crate) fn rule(&self, at: usize) -> &Rule {
        &self.rules[at]
    }

    pub(crate) fn rule_count(&self) -> usize {
        self.rules.len()
    }
}

/// A name rendered into this thread's scratch buffer and copied out at its exact size:
/// one allocation, where a `Vec` with room to spare turned into `Bytes` costs two (the
/// buffer and a shared handle).
fn rendered(render: impl FnOnce(&mut Vec<u8>)) -> Bytes {
    thread_local! {
        static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }
    SCRATCH.with_borrow_mut(|out| {
        out.clear();
        render(out);
        let name = Bytes::copy_from_slice(out);
        // A huge key name must not keep a buffer of its size for the thread's life.
        if out.capacity() > SCRATCH_KEPT {
            *out = Vec::new();
        }
        name
    })
}

/// The largest scratch buffer [`rendered`] keeps between names.
const SCRATCH_KEPT: usize = 4096;
