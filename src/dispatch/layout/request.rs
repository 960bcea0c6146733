//! The forward rewrite: a request's legacy key names to cluster names, noting the
//! index-backed records the command writes.

use bytes::Bytes;
use smallvec::SmallVec;

use crate::command::{CommandSpec, KeyList, KeyPos};
use crate::protocol::encode::encode_request;
use crate::protocol::Request;
use crate::reply;
use crate::rewrite::Forward;
use crate::route::key_slot;

use super::reply::names_keys;
use super::{is_script_call, ActiveLayout, IndexedKey, RewrittenRequest};

/// A request the client session may batch like a plain forward although the layout
/// concerns it (see [`ActiveLayout::direct_rewrite`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectRewrite {
    /// The slot of its keys' cluster names.
    pub slot: u16,
    /// The frame to send; `None` when no key is renamed (the request's own).
    pub frame: Option<Bytes>,
}

impl ActiveLayout {
    /// The slot and frame of a request (of a command the planner forwards as is) that the
    /// layout needs nothing more of than renaming its keys: no key refused under `strict`,
    /// no record of an index-backed family written, no key name in the reply, and the
    /// renamed keys in one slot. Such a request joins the client's batch for its master as
    /// a plain one does, instead of running as a future of its own; `None` sends it down
    /// the layout path, which answers every other case. Counts what
    /// [`ActiveLayout::rewrite_request`] would.
    pub fn direct_rewrite(
        &self,
        spec: &CommandSpec,
        args: &[Bytes],
        keys: &[KeyPos],
    ) -> Option<DirectRewrite> {
        if keys.is_empty() || is_script_call(spec) || names_keys(&spec.name) {
            return None;
        }
        let mut renamed: SmallVec<[(usize, Bytes, u16); 4]> = SmallVec::new();
        let mut unmatched: SmallVec<[usize; 2]> = SmallVec::new();
        let mut slot = None;
        for key in keys {
            let name = &args[key.index];
            let cluster_name = match self.layout.forward_shared(name) {
                Forward::Outside => None,
                Forward::Unmatched { .. } if self.strict => return None,
                Forward::Unmatched { prefix } => {
                    unmatched.push(prefix);
                    None
                }
                Forward::Rewritten(rewritten) => {
                    if rewritten.index.is_some() && key.flags.writes() {
                        return None;
                    }
                    (rewritten.key != *name).then_some((rewritten.key, rewritten.family.0))
                }
            };
            let this = key_slot(
                cluster_name
                    .as_ref()
                    .map_or(name, |(cluster_key, _)| cluster_key),
            );
            if *slot.get_or_insert(this) != this {
                return None;
            }
            if let Some((cluster_key, family)) = cluster_name {
                renamed.push((key.index, cluster_key, family));
            }
        }
        for prefix in unmatched {
            if let Some(counter) = self.unmatched_counters.get(prefix) {
                counter.increment(1);
            }
        }
        let frame = (!renamed.is_empty()).then(|| {
            for (_, _, family) in &renamed {
                if let Some(counter) = self.rewrite_counters.get(usize::from(*family)) {
                    counter.increment(1);
                }
            }
            let refs: SmallVec<[&[u8]; 8]> = args
                .iter()
                .enumerate()
                .map(|(at, arg)| {
                    renamed
                        .iter()
                        .find(|(index, _, _)| *index == at)
                        .map_or(&arg[..], |(_, key, _)| &key[..])
                })
                .collect();
            encode_request(&refs)
        });
        Some(DirectRewrite { slot: slot?, frame })
    }

    /// Rewrites every key of `request` (a `spec` command) to its cluster name; `Err` is the
    /// reply to give instead (a key matching no rule under `strict`).
    pub fn rewrite_request(
        &self,
        spec: &CommandSpec,
        request: Request,
    ) -> Result<RewrittenRequest, Bytes> {
        let mut keys: KeyList = SmallVec::new();
        spec.keys(&request.args, &mut keys);
        // Scripts declare keys they may write whatever the key spec flags say.
        let script = is_script_call(spec);
        let mut replaced: SmallVec<[(usize, Bytes); 4]> = SmallVec::new();
        let mut indexed: SmallVec<[IndexedKey; 2]> = SmallVec::new();
        for key in &keys {
            let name = &request.args[key.index];
            match self.layout.forward_shared(name) {
                Forward::Outside => {}
                Forward::Unmatched { prefix } => {
                    if let Some(counter) = self.unmatched_counters.get(prefix) {
                        counter.increment(1);
                    }
                    if self.strict {
                        let prefix_name = &self.layout.prefixes()[prefix];
                        return Err(reply::error(&format!(
                            "ERR key '{}' is under layout prefix '{prefix_name}' but matches no layout rule (layout.strict is on)",
                            name.escape_ascii()
                        )));
                    }
                }
                Forward::Rewritten(rewritten) => {
                    if rewritten.key != *name {
                        if let Some(counter) =
                            self.rewrite_counters.get(usize::from(rewritten.family.0))
                        {
                            counter.increment(1);
                        }
                    }
                    if let Some(entry) = rewritten.index {
                        if script || key.flags.writes() {
                            indexed.push(IndexedKey {
                                arg: key.index,
                                record: rewritten.key.clone(),
                                entry,
                            });
                        }
                    }
                    if rewritten.key != *name {
                        replaced.push((key.index, rewritten.key));
                    }
                }
            }
        }
        let request = if replaced.is_empty() {
            request
        } else {
            let mut args = request.args;
            for (at, key) in replaced {
                args[at] = key;
            }
            let refs: SmallVec<[&[u8]; 8]> = args.iter().map(|arg| &arg[..]).collect();
            let raw = encode_request(&refs);
            drop(refs);
            Request { raw, args }
        };
        Ok(RewrittenRequest {
            request,
            keys,
            indexed,
        })
    }
}
