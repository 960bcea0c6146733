//! What to do with each key a walk finds: pure decisions, no IO.
//!
//! The layout's family names decide how a key is copied (see [`Kind`]); the rest of a key's
//! fate (its target name, its index entry) comes from [`Layout::forward`] and
//! [`Layout::reverse`]. Invariants: a step never writes a key under the name it was read
//! from unless source and target are different servers; message items are never planned
//! from their own names, only from the log that lists them ([`MessageRules`]).

use std::collections::BTreeSet;

use bytes::Bytes;

use crate::rewrite::{FamilyId, Forward, IndexEntry, Layout, Reverse};
use crate::route::key_slot;

/// The family that names message logs (a sorted set whose members name the items).
pub const LOG_FAMILY: &str = "msgs";
/// The family of message items.
pub const ITEM_FAMILY: &str = "msg";
/// Families holding a number that only ever rises (lock fences, leadership terms).
pub const COUNTER_FAMILIES: &[&str] = &["fence", "leader_term"];
/// Families that are ephemeral coordination state and never copied (turn counters).
pub const EPHEMERAL_FAMILIES: &[&str] = &["turn"];

/// How a family's keys are copied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A message log: copied, then walked to copy the items it lists.
    Log,
    /// A message item: copied only through its chat's log.
    Item,
    /// A record with an index entry (written with the record's expiry as score).
    Record,
    /// A number raised with "set if greater", never lowered.
    Counter,
    /// Not copied at all.
    Ephemeral,
    /// A key whose name the layout keeps.
    Unchanged,
    /// Any other key: copied with its TTL.
    Plain,
}

/// The kind of a key of family `name` that `rewritten` was made from `key`.
pub fn kind_of(name: &str, source_key: &[u8], target_key: &[u8], indexed: bool) -> Kind {
    if source_key == target_key {
        Kind::Unchanged
    } else if name == LOG_FAMILY {
        Kind::Log
    } else if name == ITEM_FAMILY {
        Kind::Item
    } else if COUNTER_FAMILIES.contains(&name) {
        Kind::Counter
    } else if EPHEMERAL_FAMILIES.contains(&name) {
        Kind::Ephemeral
    } else if indexed {
        Kind::Record
    } else {
        Kind::Plain
    }
}

/// Why a key is left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkipReason {
    /// Ephemeral state (turn counters).
    Ephemeral,
    /// The name does not change and the target is the source itself.
    SameName,
    /// Its family is not among `--include`.
    NotIncluded,
}

/// One planned copy of one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyStep {
    /// The family, for the report.
    pub family: FamilyId,
    /// How it is copied.
    pub kind: Kind,
    /// Name on the source.
    pub from: Bytes,
    /// Name on the target.
    pub to: Bytes,
    /// The index entry to keep on the target, for indexed records.
    pub index: Option<IndexEntry>,
}

/// What to do with one key found on the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Copy it (DUMP/RESTORE, or set-if-greater for counters).
    Copy(CopyStep),
    /// A message log: copy it, then its items.
    Log(CopyStep),
    /// A message item found by the walk: copied through its log, or an orphan.
    Item {
        /// Its family.
        family: FamilyId,
        /// Its name on the source.
        key: Bytes,
    },
    /// Left alone, counted as skipped.
    Skip {
        /// Its family.
        family: FamilyId,
        /// Why.
        reason: SkipReason,
    },
    /// Under the prefix but no rule matches: counted, never copied.
    Unmatched,
    /// A key of the other layout (or an index, or the marker): not part of this direction.
    Other,
}

/// Families selected with `--include`, or all.
#[derive(Debug, Clone, Default)]
pub struct FamilyFilter {
    names: BTreeSet<String>,
}

impl FamilyFilter {
    /// A filter of `names`; empty means every family. Including the log or the item
    /// family includes both (items are only reachable through logs).
    pub fn new(names: &[String]) -> FamilyFilter {
        let mut names: BTreeSet<String> = names.iter().cloned().collect();
        if names.contains(LOG_FAMILY) || names.contains(ITEM_FAMILY) {
            names.insert(LOG_FAMILY.to_owned());
            names.insert(ITEM_FAMILY.to_owned());
        }
        FamilyFilter { names }
    }

    /// Whether every family passes.
    pub fn is_all(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether family `name` passes.
    pub fn allows(&self, name: &str) -> bool {
        self.is_all() || self.names.contains(name)
    }
}

/// Plans a legacy key for the legacy -> cluster:v1 direction. `distinct_target`: the
/// target is another server, so unchanged names are copied too.
pub fn plan_forward(
    layout: &Layout,
    key: &Bytes,
    distinct_target: bool,
    filter: &FamilyFilter,
) -> Step {
    // A key this layout produces (a cluster:v1 record, an index, the marker) is not a
    // legacy key, even where a legacy pattern would also accept its name.
    match layout.reverse(key) {
        Reverse::Internal => return Step::Other,
        Reverse::Legacy(legacy) if legacy != *key => return Step::Other,
        _ => {}
    }
    let rewritten = match layout.forward(key) {
        Forward::Rewritten(rewritten) => rewritten,
        Forward::Unmatched { .. } => return Step::Unmatched,
        Forward::Outside => return Step::Other,
    };
    let name = layout.family_name(rewritten.family);
    let kind = kind_of(name, key, &rewritten.key, rewritten.index.is_some());
    step_for(
        CopyStep {
            family: rewritten.family,
            kind,
            from: key.clone(),
            to: rewritten.key,
            index: rewritten.index,
        },
        name,
        distinct_target,
        filter,
    )
}

/// Plans a cluster:v1 key for the cluster:v1 -> legacy direction.
pub fn plan_reverse(
    layout: &Layout,
    key: &Bytes,
    distinct_target: bool,
    filter: &FamilyFilter,
) -> Step {
    let legacy = match layout.reverse(key) {
        Reverse::Legacy(legacy) => legacy,
        Reverse::Internal => return Step::Other,
        Reverse::Outside => {
            return match layout.forward(key) {
                Forward::Unmatched { .. } => Step::Unmatched,
                _ => Step::Other,
            }
        }
    };
    let Forward::Rewritten(rewritten) = layout.forward(&legacy) else {
        return Step::Other;
    };
    let name = layout.family_name(rewritten.family);
    let mut kind = kind_of(name, key, &legacy, false);
    // The way back copies logs and items as plain keys: both names are exact there.
    if matches!(kind, Kind::Log | Kind::Item) {
        kind = Kind::Plain;
    }
    step_for(
        CopyStep {
            family: rewritten.family,
            kind,
            from: key.clone(),
            to: legacy,
            index: None,
        },
        name,
        distinct_target,
        filter,
    )
}

fn step_for(copy: CopyStep, name: &str, distinct_target: bool, filter: &FamilyFilter) -> Step {
    let family = copy.family;
    if !filter.allows(name) {
        return Step::Skip {
            family,
            reason: SkipReason::NotIncluded,
        };
    }
    match copy.kind {
        Kind::Ephemeral => Step::Skip {
            family,
            reason: SkipReason::Ephemeral,
        },
        Kind::Unchanged if !distinct_target => Step::Skip {
            family,
            reason: SkipReason::SameName,
        },
        Kind::Log => Step::Log(copy),
        Kind::Item => Step::Item {
            family,
            key: copy.from,
        },
        _ => Step::Copy(copy),
    }
}

/// The legacy name patterns of message logs and items, to name a log's items from its
/// members (the only way items are found).
#[derive(Debug, Clone)]
pub struct MessageRules {
    /// The log pattern split around its capture: text before and after the chat id.
    log_before: String,
    log_after: String,
    /// The item pattern as literal text and the two capture positions.
    item: Vec<Piece>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Chat,
    Member,
}

impl MessageRules {
    /// Reads the log and item rules of `layout` for `prefix`; `None` when the layout has
    /// no message families or their patterns do not have the expected shape (one capture
    /// in the log pattern, the same capture plus one more in the item pattern).
    pub fn new(layout: &Layout, prefix: &str) -> Option<MessageRules> {
        let pattern = |family: &str| {
            layout
                .rules()
                .iter()
                .find(|rule| rule.family == family)
                .map(|rule| rule.legacy.replace("<p>", prefix))
        };
        let log = pattern(LOG_FAMILY)?;
        let item = pattern(ITEM_FAMILY)?;
        let open = log.find('<')?;
        let close = open + log[open..].find('>')?;
        let chat_name = &log[open..=close];
        if log[close + 1..].contains('<') {
            return None;
        }
        let mut pieces = Vec::new();
        let mut rest = item.as_str();
        let mut members = 0;
        while let Some(start) = rest.find('<') {
            let end = start + rest[start..].find('>')?;
            if start > 0 {
                pieces.push(Piece::Text(rest[..start].to_owned()));
            }
            if &rest[start..=end] == chat_name {
                pieces.push(Piece::Chat);
            } else {
                members += 1;
                pieces.push(Piece::Member);
            }
            rest = &rest[end + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_owned()));
        }
        if members != 1 || !pieces.contains(&Piece::Chat) {
            return None;
        }
        Some(MessageRules {
            log_before: log[..open].to_owned(),
            log_after: log[close + 1..].to_owned(),
            item: pieces,
        })
    }

    /// The chat id of legacy log key `log`.
    pub fn chat_of<'k>(&self, log: &'k [u8]) -> Option<&'k [u8]> {
        let inner = log.strip_prefix(self.log_before.as_bytes())?;
        inner.strip_suffix(self.log_after.as_bytes())
    }

    /// The legacy log key of chat `chat`.
    pub fn log_key(&self, chat: &[u8]) -> Bytes {
        let mut out = Vec::with_capacity(self.log_before.len() + chat.len() + self.log_after.len());
        out.extend_from_slice(self.log_before.as_bytes());
        out.extend_from_slice(chat);
        out.extend_from_slice(self.log_after.as_bytes());
        Bytes::from(out)
    }

    /// Every way `key` reads as an item name: its (chat, member) pairs, each non-empty. A
    /// chat id may hold the separator, so a name may read more than one way.
    pub fn item_parts<'k>(&self, key: &'k [u8]) -> Vec<(&'k [u8], &'k [u8])> {
        let mut out = Vec::new();
        self.parts_from(0, key, 0, (None, None), &mut out);
        out
    }

    fn parts_from<'k>(
        &self,
        piece: usize,
        key: &'k [u8],
        at: usize,
        (chat, member): (Option<&'k [u8]>, Option<&'k [u8]>),
        out: &mut Vec<(&'k [u8], &'k [u8])>,
    ) {
        match self.item.get(piece) {
            None => {
                if let (true, Some(chat), Some(member)) = (at == key.len(), chat, member) {
                    out.push((chat, member));
                }
            }
            Some(Piece::Text(text)) => {
                if key[at..].starts_with(text.as_bytes()) {
                    let next = at + text.len();
                    self.parts_from(piece + 1, key, next, (chat, member), out);
                }
            }
            Some(capture) => {
                for end in at + 1..=key.len() {
                    let taken = Some(&key[at..end]);
                    let parts = match capture {
                        Piece::Chat => (taken, member),
                        _ => (chat, taken),
                    };
                    self.parts_from(piece + 1, key, end, parts, out);
                }
            }
        }
    }

    /// The legacy item key of `member` in chat `chat`.
    pub fn item_key(&self, chat: &[u8], member: &[u8]) -> Bytes {
        let mut out = Vec::new();
        for piece in &self.item {
            match piece {
                Piece::Text(text) => out.extend_from_slice(text.as_bytes()),
                Piece::Chat => out.extend_from_slice(chat),
                Piece::Member => out.extend_from_slice(member),
            }
        }
        Bytes::from(out)
    }
}

/// The copy of item `item_key` listed by the log `log` (already planned), or `None` when
/// the item does not belong to that chat (its name parses as another chat's item, so it
/// would land in another slot than the log).
pub fn plan_item(layout: &Layout, log: &CopyStep, item_key: &Bytes) -> Option<CopyStep> {
    let Forward::Rewritten(rewritten) = layout.forward(item_key) else {
        return None;
    };
    if layout.family_name(rewritten.family) != ITEM_FAMILY
        || key_slot(&rewritten.key) != key_slot(&log.to)
        || hash_tag(&rewritten.key) != hash_tag(&log.to)
    {
        return None;
    }
    Some(CopyStep {
        family: rewritten.family,
        kind: Kind::Item,
        from: item_key.clone(),
        to: rewritten.key,
        index: rewritten.index,
    })
}

/// The hash tag of `key` (the text between the first `{` and the next `}`), if any.
pub fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let len = key[open + 1..].iter().position(|&b| b == b'}')?;
    (len > 0).then(|| &key[open + 1..open + 1 + len])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout() -> Layout {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config/botmesh-cluster-v1.yaml"
        );
        Layout::load(path, &["mybot".to_owned()]).expect("shipped profile")
    }

    fn copy(step: Step) -> CopyStep {
        match step {
            Step::Copy(copy) | Step::Log(copy) => copy,
            other => panic!("not a copy: {other:?}"),
        }
    }

    #[test]
    fn forward_steps_follow_the_layout_table() {
        let layout = layout();
        let all = FamilyFilter::default();
        let b = |s: &str| Bytes::from(s.to_owned());
        let chat = copy(plan_forward(&layout, &b("mybot:chat:chat-1"), false, &all));
        assert_eq!(chat.to, b("mybot:{ch:25}:r:chat-1"));
        assert_eq!(chat.kind, Kind::Record);
        let index = chat.index.expect("indexed");
        assert_eq!(
            (index.key, index.member),
            (b("mybot:{ch:25}:idx"), b("chat-1"))
        );
        let fence = copy(plan_forward(
            &layout,
            &b("mybot:fence:team:ops"),
            false,
            &all,
        ));
        assert_eq!(
            (fence.kind, fence.to),
            (Kind::Counter, b("mybot:{lk:team%3Aops}:f"))
        );
        let term = copy(plan_forward(
            &layout,
            &b("mybot:co:leader:s:term"),
            false,
            &all,
        ));
        assert_eq!(
            (term.kind, term.to),
            (Kind::Counter, b("mybot:co:{ld:s}:term"))
        );
        let log = plan_forward(&layout, &b("mybot:msgs:chat-1"), false, &all);
        assert!(matches!(log, Step::Log(ref c) if c.to == b("mybot:{m:chat-1}:z")));
        assert!(matches!(
            plan_forward(&layout, &b("mybot:msg:chat-1:m1"), false, &all),
            Step::Item { .. }
        ));
        assert!(matches!(
            plan_forward(&layout, &b("mybot:co:turn:c:seq"), true, &all),
            Step::Skip {
                reason: SkipReason::Ephemeral,
                ..
            }
        ));
        assert!(matches!(
            plan_forward(&layout, &b("mybot:conv:42"), false, &all),
            Step::Skip {
                reason: SkipReason::SameName,
                ..
            }
        ));
        let conv = copy(plan_forward(&layout, &b("mybot:conv:42"), true, &all));
        assert_eq!((conv.kind, conv.to), (Kind::Unchanged, b("mybot:conv:42")));
        assert_eq!(
            plan_forward(&layout, &b("mybot:what:1"), false, &all),
            Step::Unmatched
        );
        // Keys of the cluster layout found in place are not legacy keys.
        for key in [
            "mybot:{ch:25}:r:chat-1",
            "mybot:{ch:25}:idx",
            "mybot:{meta}:layout",
        ] {
            assert_eq!(
                plan_forward(&layout, &b(key), false, &all),
                Step::Other,
                "{key}"
            );
        }
        let only_chats = FamilyFilter::new(&["chat".to_owned()]);
        assert!(matches!(
            plan_forward(&layout, &b("mybot:contact:x"), false, &only_chats),
            Step::Skip {
                reason: SkipReason::NotIncluded,
                ..
            }
        ));
    }

    #[test]
    fn reverse_steps_name_the_legacy_keys() {
        let layout = layout();
        let all = FamilyFilter::default();
        let b = |s: &str| Bytes::from(s.to_owned());
        let chat = copy(plan_reverse(
            &layout,
            &b("mybot:{ch:1}:r:a%3Ab%7Bc%7D"),
            false,
            &all,
        ));
        assert_eq!(chat.to, b("mybot:chat:a:b{c}"));
        let item = copy(plan_reverse(
            &layout,
            &b("mybot:{m:chat-1}:i:m1"),
            false,
            &all,
        ));
        assert_eq!(
            (item.kind, item.to),
            (Kind::Plain, b("mybot:msg:chat-1:m1"))
        );
        let fence = copy(plan_reverse(&layout, &b("mybot:{lk:x}:f"), false, &all));
        assert_eq!((fence.kind, fence.to), (Kind::Counter, b("mybot:fence:x")));
        assert_eq!(
            plan_reverse(&layout, &b("mybot:{ch:1}:idx"), false, &all),
            Step::Other
        );
        assert_eq!(
            plan_reverse(&layout, &b("mybot:chat:x"), false, &all),
            Step::Other
        );
    }

    #[test]
    fn items_are_named_from_logs_and_must_stay_in_their_chat() {
        let layout = layout();
        let rules = MessageRules::new(&layout, "mybot").expect("message rules");
        assert_eq!(rules.chat_of(b"mybot:msgs:a:b"), Some(&b"a:b"[..]));
        assert_eq!(
            rules.item_key(b"a:b", b"m1"),
            Bytes::from_static(b"mybot:msg:a:b:m1")
        );
        let log = copy(plan_forward(
            &layout,
            &Bytes::from_static(b"mybot:msgs:c1"),
            false,
            &FamilyFilter::default(),
        ));
        assert_eq!(rules.log_key(b"a:b").as_ref(), b"mybot:msgs:a:b");
        let parts = rules.item_parts(b"mybot:msg:a:b:m1");
        assert_eq!(
            parts,
            [(&b"a"[..], &b"b:m1"[..]), (&b"a:b"[..], &b"m1"[..])]
        );
        assert!(rules.item_parts(b"mybot:msg:a").is_empty());
        assert!(rules.item_parts(b"mybot:msgs:a:m").is_empty());
        let item = plan_item(&layout, &log, &rules.item_key(b"c1", b"m1")).expect("belongs");
        assert_eq!(item.to, Bytes::from_static(b"mybot:{m:c1}:i:m1"));
        // A member with `:` names an item of chat `c1:x`, not of `c1`.
        assert!(plan_item(&layout, &log, &rules.item_key(b"c1", b"x:m2")).is_none());
    }
}
