//! The client's subscription sets and the confirmations it is sent: SUBSCRIBE & co on
//! the regular link, the same once keyspace subscriptions are involved (confirmations
//! written here from the client's sets), and the shard commands: as on one Redis, one
//! SSUBSCRIBE or SUNSUBSCRIBE may name channels of several slots; each slot's channels go
//! to its master in one command, all at once, and the confirmations are written here in
//! the client's order.
//!
//! Invariants: a subscription whose connection cannot be had changes no set; the counts
//! in confirmations are the ones Redis would report after each name; a set that becomes
//! empty releases its links (reply futures keep theirs until their confirmations are in).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;

use super::keyspace::{self, PatternClass, Upstream};
use super::restore::{command_bytes, shard_call};
use super::{classify, frames, lock, Family, Inner, Linked, Step};
use crate::dispatch::layout::ActiveLayout;
use crate::protocol::{Proto, Request};
use crate::reply;
use crate::route::key_slot;
use crate::upstream::subscription::Link;

impl Linked {
    /// A subscription command of `family` (already arity-checked).
    pub(super) fn subscription(
        &mut self,
        request: &Request,
        proto: Proto,
        family: Family,
        subscribe: bool,
    ) -> Step {
        let names: Vec<Bytes> = request.args[1..].to_vec();
        let mut inner = lock(&self.inner);
        if family == Family::Shard {
            return inner.shard_command(&self.inner, request.raw.clone(), names, proto, subscribe);
        }
        let touches_keyspace = !inner.keyspace.is_empty()
            || names
                .iter()
                .any(|name| classify(family, name) != PatternClass::Ordinary);
        if touches_keyspace {
            return inner.keyspace_command(names, proto, family, subscribe);
        }
        let kind: &'static [u8] = match (family, subscribe) {
            (Family::Patterns, true) => b"psubscribe",
            (Family::Patterns, false) => b"punsubscribe",
            (_, true) => b"subscribe",
            (_, false) => b"unsubscribe",
        };
        let link = if subscribe {
            match inner.regular_link(proto) {
                Some(link) => link,
                None => return Step::Reply(reply::error(reply::text::SLOT_UNSERVED)),
            }
        } else {
            match inner.regular.clone() {
                Some(link) => link,
                None => {
                    // Nothing subscribed on the regular connection: answer as Redis does.
                    let count = inner.channels.len() + inner.patterns.len();
                    return Step::Reply(local_confirmations(proto, kind, &names, count));
                }
            }
        };
        let set = match family {
            Family::Patterns => &mut inner.patterns,
            _ => &mut inner.channels,
        };
        let expected = if names.is_empty() {
            set.len().max(1)
        } else {
            names.len()
        };
        if subscribe {
            set.extend(names.iter().cloned());
        } else if names.is_empty() {
            set.clear();
        } else {
            for name in &names {
                set.remove(name);
            }
        }
        if inner.channels.is_empty() && inner.patterns.is_empty() {
            // The reply future keeps the link until its confirmations are in.
            inner.regular = None;
        }
        let raw = request.raw.clone();
        Step::Pending(
            async move {
                match link.call(raw, kind, expected).await {
                    Ok(frames) => frames,
                    Err(reason) => reply::error(&reply::refusals::proxy_failure(reason)),
                }
            }
            .boxed(),
        )
    }
}

impl Inner {
    /// SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE or PUNSUBSCRIBE once keyspace subscriptions are
    /// involved: ordinary names go to the regular link, keyspace ones (as upstream names)
    /// to every master's keyspace link, and the confirmations are written here from the
    /// client's sets, as Redis counts them (channels plus patterns after each name).
    fn keyspace_command(
        &mut self,
        names: Vec<Bytes>,
        proto: Proto,
        family: Family,
        subscribe: bool,
    ) -> Step {
        let (command, kind): (&str, &'static [u8]) = match (family, subscribe) {
            (Family::Patterns, true) => ("PSUBSCRIBE", b"psubscribe"),
            (Family::Patterns, false) => ("PUNSUBSCRIBE", b"punsubscribe"),
            (_, true) => ("SUBSCRIBE", b"subscribe"),
            (_, false) => ("UNSUBSCRIBE", b"unsubscribe"),
        };
        let targets: Vec<Bytes> = if names.is_empty() && !subscribe {
            let set = match family {
                Family::Patterns => &self.patterns,
                _ => &self.channels,
            };
            set.iter().cloned().collect()
        } else {
            names
        };
        let classes: Vec<PatternClass> = targets.iter().map(|n| classify(family, n)).collect();
        // Links first: a subscription that cannot be made changes nothing.
        let Some((regular, keyspace_links)) = self.links_for(&classes, proto, subscribe) else {
            return Step::Reply(reply::error(reply::text::SLOT_UNSERVED));
        };
        let layout = self.proxy.layout.clone();
        let mut confirmations = BytesMut::new();
        let mut regular_names: Vec<Bytes> = Vec::new();
        let mut upstream_names: Vec<Bytes> = Vec::new();
        for (name, class) in targets.iter().zip(&classes) {
            let set = match family {
                Family::Patterns => &mut self.patterns,
                _ => &mut self.channels,
            };
            let changed = if subscribe {
                set.insert(name.clone())
            } else {
                set.remove(name)
            };
            if changed && *class != PatternClass::Keyspace {
                regular_names.push(name.clone());
            }
            if changed && *class != PatternClass::Ordinary {
                let upstream = self.keyspace_change(family, subscribe, layout.as_deref(), name);
                if let Some(upstream) = upstream.filter(|up| !upstream_names.contains(up)) {
                    upstream_names.push(upstream);
                }
            }
            let count = self.channels.len() + self.patterns.len();
            let kind = std::str::from_utf8(kind).unwrap_or_default();
            confirmations.extend_from_slice(&frames::confirmation(proto, kind, Some(name), count));
        }
        if targets.is_empty() {
            let count = self.channels.len() + self.patterns.len();
            let kind = std::str::from_utf8(kind).unwrap_or_default();
            confirmations.extend_from_slice(&frames::confirmation(proto, kind, None, count));
        }
        let mut calls = Vec::new();
        if let (false, Some(link)) = (regular_names.is_empty(), &regular) {
            let raw = command_bytes(command, &regular_names);
            calls.push(link.call(raw, kind, regular_names.len()).boxed());
        }
        if !upstream_names.is_empty() {
            let raw = command_bytes(command, &upstream_names);
            for link in &keyspace_links {
                calls.push(link.call(raw.clone(), kind, upstream_names.len()).boxed());
            }
        }
        // The reply futures keep the links they use until their confirmations are in.
        let (channels, patterns) = self.regular_names();
        if channels.is_empty() && patterns.is_empty() {
            self.regular = None;
        }
        if self.keyspace.is_empty() {
            self.keyspace_links.clear();
        }
        confirmed_after(calls, confirmations.freeze())
    }

    /// The regular link and the keyspace links a command on names of `classes` uses; for a
    /// subscription, opened if needed (`None` when one cannot be had).
    fn links_for(
        &mut self,
        classes: &[PatternClass],
        proto: Proto,
        subscribe: bool,
    ) -> Option<(Option<Link>, Vec<Link>)> {
        let mut regular = self.regular.clone();
        let mut keyspace_links: Vec<Link> = self.keyspace_links.values().cloned().collect();
        if subscribe {
            if classes.iter().any(|c| *c != PatternClass::Keyspace) {
                regular = Some(self.regular_link(proto)?);
            }
            if classes.iter().any(|c| *c != PatternClass::Ordinary) {
                keyspace_links = self.keyspace_links(proto);
                if keyspace_links.is_empty() {
                    return None;
                }
            }
        }
        Some((regular, keyspace_links))
    }

    /// Adds `name` (a keyspace channel or pattern of `family`) to the keyspace
    /// subscriptions, or removes it; the upstream name to subscribe or unsubscribe on every
    /// keyspace link when that changed.
    fn keyspace_change(
        &mut self,
        family: Family,
        subscribe: bool,
        layout: Option<&ActiveLayout>,
        name: &Bytes,
    ) -> Option<Bytes> {
        let (upstream, fresh_or_gone) = if family == Family::Patterns {
            let up = keyspace::upstream_pattern(layout, self.proxy.keyspace_databases(), name);
            let moved = if subscribe {
                self.keyspace.add_pattern(up.clone(), name.clone())
            } else {
                self.keyspace.remove_pattern(&up, name)
            };
            (up, moved)
        } else {
            let up = keyspace::upstream_channel(layout, self.proxy.keyspace_databases(), name);
            let moved = if subscribe {
                self.keyspace.add_channel(up.clone(), name.clone())
            } else {
                self.keyspace.remove_channel(&up, name)
            };
            (up, moved)
        };
        fresh_or_gone.then_some(upstream)
    }

    /// How many subscriptions of every kind the client has.
    pub(super) fn total(&self) -> usize {
        self.channels.len() + self.patterns.len() + self.shard.len()
    }

    /// Ends every subscription; dropping the links closes their connections.
    pub(super) fn clear(&mut self) {
        self.channels.clear();
        self.patterns.clear();
        self.shard.clear();
        self.regular = None;
        self.shard_links.clear();
        self.keyspace = Upstream::default();
        self.keyspace_links.clear();
    }

    /// The channels and patterns the regular link carries (keyspace ones live elsewhere).
    pub(super) fn regular_names(&self) -> (Vec<Bytes>, Vec<Bytes>) {
        let channels = self
            .channels
            .iter()
            .filter(|name| classify(Family::Channels, name) == PatternClass::Ordinary)
            .cloned()
            .collect();
        let patterns = self
            .patterns
            .iter()
            .filter(|name| classify(Family::Patterns, name) != PatternClass::Keyspace)
            .cloned()
            .collect();
        (channels, patterns)
    }

    fn shard_command(
        &mut self,
        shared: &Arc<Mutex<Inner>>,
        raw: Bytes,
        names: Vec<Bytes>,
        proto: Proto,
        subscribe: bool,
    ) -> Step {
        let kind = if subscribe {
            "ssubscribe"
        } else {
            "sunsubscribe"
        };
        if names.is_empty() {
            // Every shard subscription ends: closing the connections ends them upstream.
            let channels: Vec<Bytes> = self.shard.drain().map(|(name, _)| name).collect();
            self.shard_links.clear();
            let mut out = BytesMut::new();
            for (i, name) in channels.iter().enumerate() {
                let left = channels.len() - i - 1;
                out.extend_from_slice(&frames::confirmation(proto, kind, Some(name), left));
            }
            if channels.is_empty() {
                out.extend_from_slice(&frames::confirmation(proto, kind, None, 0));
            }
            return Step::Reply(out.freeze());
        }
        // Counts as Redis reports them: shard subscriptions after each channel, in the
        // order the client gave them, whichever master each lives on.
        let mut confirmations = BytesMut::new();
        for name in &names {
            if subscribe {
                self.shard.insert(name.clone(), key_slot(name));
            } else {
                self.shard.remove(name);
            }
            let count = self.shard.len();
            confirmations.extend_from_slice(&frames::confirmation(proto, kind, Some(name), count));
        }
        let confirmations = confirmations.freeze();
        let groups = by_slot(&names);
        let one_slot = groups.len() == 1;
        let command = if subscribe {
            "SSUBSCRIBE"
        } else {
            "SUNSUBSCRIBE"
        };
        let kind: &'static [u8] = kind.as_bytes();
        let calls = groups.into_iter().map(|(slot, names)| {
            let shared = shared.clone();
            // One slot (the common case, and a cluster node's only one): as the client sent it.
            let raw = match one_slot {
                true => raw.clone(),
                false => command_bytes(command, &names),
            };
            async move { shard_call(&shared, slot, raw, kind, names.len(), proto).await }
        });
        let calls = futures_util::future::join_all(calls);
        let shared = shared.clone();
        Step::Pending(
            async move {
                let answers = calls.await;
                if !subscribe {
                    lock(&shared).prune_shard_links();
                }
                for answer in answers {
                    match answer {
                        Ok(frame) if frame.first() == Some(&b'-') => return frame,
                        Ok(_) => {}
                        Err(reason) => {
                            return reply::error(&reply::refusals::proxy_failure(reason))
                        }
                    }
                }
                confirmations
            }
            .boxed(),
        )
    }
}

/// `names` grouped by their slot, the groups in the order of their first channel, each
/// keeping the client's order: one shard command per slot's master.
fn by_slot(names: &[Bytes]) -> Vec<(u16, Vec<Bytes>)> {
    let mut groups: Vec<(u16, Vec<Bytes>)> = Vec::new();
    let mut at: HashMap<u16, usize> = HashMap::new();
    for name in names {
        let slot = key_slot(name);
        let n = *at.entry(slot).or_insert_with(|| {
            groups.push((slot, Vec::new()));
            groups.len() - 1
        });
        groups[n].1.push(name.clone());
    }
    groups
}

/// Confirmations for an unsubscribe from nothing, as Redis answers it: one per name, or
/// one with a null name when none was given.
fn local_confirmations(proto: Proto, kind: &[u8], names: &[Bytes], count: usize) -> Bytes {
    let kind = std::str::from_utf8(kind).unwrap_or_default();
    if names.is_empty() {
        return frames::confirmation(proto, kind, None, count);
    }
    let mut out = BytesMut::new();
    for name in names {
        out.extend_from_slice(&frames::confirmation(proto, kind, Some(name), count));
    }
    out.freeze()
}

/// The answer to a subscription command: `confirmations` once every node call in `calls`
/// confirmed, else the first error.
fn confirmed_after(
    calls: Vec<futures_util::future::BoxFuture<'static, Result<Bytes, String>>>,
    confirmations: Bytes,
) -> Step {
    Step::Pending(
        async move {
            for answer in futures_util::future::join_all(calls).await {
                match answer {
                    Ok(frame) if frame.first() == Some(&b'-') => return frame,
                    Ok(_) => {}
                    Err(reason) => return reply::error(&format!("ERR proxy: {reason}")),
                }
            }
            confirmations
        }
        .boxed(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_channels_are_grouped_by_slot_in_the_clients_order() {
        let names: Vec<Bytes> = ["{a}1", "{b}1", "{a}2", "{b}2", "{a}1", "{c}"]
            .into_iter()
            .map(Bytes::from)
            .collect();
        let groups = by_slot(&names);
        let slots: Vec<u16> = groups.iter().map(|(slot, _)| *slot).collect();
        assert_eq!(slots, [key_slot(b"a"), key_slot(b"b"), key_slot(b"c")]);
        let names = |n: usize| -> Vec<&[u8]> { groups[n].1.iter().map(|b| &b[..]).collect() };
        // A repeated channel stays: the node confirms it twice, as one Redis does.
        assert_eq!(names(0), [&b"{a}1"[..], b"{a}2", b"{a}1"]);
        assert_eq!(names(1), [&b"{b}1"[..], b"{b}2"]);
        assert_eq!(names(2), [&b"{c}"[..]]);
    }
}
