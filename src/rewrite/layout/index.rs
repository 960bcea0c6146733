//! The layout's index entries read backwards: which legacy key an index entry or member
//! stands for, and the fixed index keys of a family (the bucket indices), each checked by
//! translating the legacy key forward again.

use bytes::Bytes;

use super::Layout;
use crate::rewrite::encoding::BUCKET_COUNT;
use crate::rewrite::rules::Rule;
use crate::rewrite::template::Values;
use crate::rewrite::{FamilyId, Rewritten};

impl Layout {
    /// The legacy key an index entry (index key and member) stands for, if it is ours.
    pub fn legacy_from_index_entry(&self, index_key: &[u8], member: &[u8]) -> Option<Bytes> {
        let prefix = self.prefix_of(index_key)?;
        let body = self.body(prefix, index_key);
        for &rule_at in &self.by_precedence {
            let rule = &self.rules[rule_at];
            let Some(index) = &rule.index else { continue };
            let mut values = Values::default();
            if index.key.read(body, &mut values).is_none()
                || index.member.read(member, &mut values).is_none()
            {
                continue;
            }
            let Some(legacy) = self.legacy_key(prefix, rule, &values) else {
                continue;
            };
            let same_entry = |rw: &Rewritten| {
                rw.index
                    .as_ref()
                    .is_some_and(|entry| entry.key == index_key && entry.member == member)
            };
            if self.forwards_to(&legacy, rule_at, same_entry) {
                return Some(legacy);
            }
        }
        None
    }

    /// The legacy key an index member of `family` under `prefix` stands for, for families
    /// whose index key holds no capture (the bucket-indexed ones). For others (an index per
    /// user, say) use [`Layout::legacy_from_index_entry`].
    pub fn legacy_from_index_member(
        &self,
        prefix: usize,
        family: FamilyId,
        member: &[u8],
    ) -> Option<Bytes> {
        self.prefixes.get(prefix)?;
        for &rule_at in &self.by_precedence {
            let rule = &self.rules[rule_at];
            let Some(index) = rule.index.as_ref().filter(|_| rule.family == family.0) else {
                continue;
            };
            if index.key.capture_slots().next().is_some() {
                continue;
            }
            let mut values = Values::default();
            if index.member.read(member, &mut values).is_none() {
                continue;
            }
            let Some(legacy) = self.legacy_key(prefix, rule, &values) else {
                continue;
            };
            let same_member = |rw: &Rewritten| {
                rw.index
                    .as_ref()
                    .is_some_and(|entry| entry.member == member)
            };
            if self.forwards_to(&legacy, rule_at, same_member) {
                return Some(legacy);
            }
        }
        None
    }

    /// Every index key of `family` under `prefix` whose name holds no capture: the 32
    /// bucket indices of a bucket-indexed family (`p:{ch:0}:idx` .. `p:{ch:31}:idx`).
    /// Empty for families indexed per capture (user data), whose index keys come from
    /// [`Layout::listing_plan`] when a glob pins the capture.
    pub fn index_keys(&self, prefix: usize, family: FamilyId) -> Vec<Bytes> {
        let mut keys: Vec<Bytes> = Vec::new();
        if prefix >= self.prefixes.len() {
            return keys;
        }
        for rule in self.rules.iter().filter(|rule| rule.family == family.0) {
            let Some(index) = &rule.index else { continue };
            if index.key.capture_slots().next().is_some() {
                continue;
            }
            let buckets = if index.key.uses_bucket() {
                BUCKET_COUNT
            } else {
                1
            };
            for bucket in 0..buckets {
                let key = self.render_index_key(prefix, rule, &Values::default(), bucket as u8);
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        keys
    }

    /// Renders the index key of `rule` from raw capture values (missing ones render empty).
    pub(crate) fn render_index_key(
        &self,
        prefix: usize,
        rule: &Rule,
        values: &Values,
        bucket: u8,
    ) -> Bytes {
        let prefix_name = self.prefixes[prefix].as_bytes();
        let mut out = Vec::with_capacity(prefix_name.len() + 24);
        out.extend_from_slice(prefix_name);
        out.push(b':');
        if let Some(index) = &rule.index {
            index.key.render(
                |slot| values[usize::from(slot)].as_deref().unwrap_or_default(),
                bucket,
                &mut out,
            );
        }
        Bytes::from(out)
    }
}
