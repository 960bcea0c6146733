//! The forward rewrite: a request's legacy key names to cluster names, noting the
//! index-backed records the command writes.

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use crate::command::{CommandFlags, CommandSpec, KeyList, KeyPos};
use crate::protocol::encode::encode_request;
use crate::protocol::{Limits, Proto, Request, RequestDecoder};
use crate::reply;
use crate::rewrite::Forward;
use crate::route::key_slot;

use super::reply::names_keys;
use super::upkeep::upkeep_frame;
use super::{is_script_call, ActiveLayout, IndexedKey, RewrittenRequest, UPKEEP_SCRIPT};

/// An upkeep EVALSHA `frame` (see [`DirectRewrite::upkeep`]) as the same call by the
/// script's body, for a node that answered `-NOSCRIPT` (a restart, a failover, a SCRIPT
/// FLUSH). `None` when `frame` is not a request of at least two arguments.
pub fn upkeep_as_eval(frame: &[u8]) -> Option<Bytes> {
    let request = RequestDecoder::new(Limits::default())
        .decode(&mut BytesMut::from(frame))
        .ok()??;
    if request.args.len() < 2 {
        return None;
    }
    let mut args: SmallVec<[&[u8]; 8]> = request.args.iter().map(|arg| &arg[..]).collect();
    args[0] = b"EVAL";
    args[1] = UPKEEP_SCRIPT.as_bytes();
    Some(encode_request(&args))
}

/// A request the client session may batch like a plain forward although the layout
/// concerns it (see [`ActiveLayout::direct_rewrite`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirectRewrite {
    /// The slot of its keys' cluster names.
    pub slot: u16,
    /// The frame to send; `None` when no key is renamed (the request's own).
    pub frame: Option<Bytes>,
    /// The frame is the command inside an EVALSHA of the upkeep script: a `-NOSCRIPT`
    /// answer means "send it again as EVAL" (see [`upkeep_as_eval`]).
    pub upkeep: bool,
    /// The families of the renamed keys and the prefixes of keys no rule matched, counted
    /// by [`ActiveLayout::count_direct`] once the request is sent this way.
    renamed_families: SmallVec<[u16; 4]>,
    unmatched_prefixes: SmallVec<[usize; 2]>,
}

impl ActiveLayout {
    /// The slot and frame of a request (of a command the planner forwards as is, or a
    /// client's script) that the layout needs no more for than its keys renamed and, when
    /// it writes a record of an index-backed family, wrapped in the upkeep script: no key
    /// refused under `strict`, no key name in the reply, the renamed keys (and their index
    /// keys) in one slot, the upkeep script loaded, and no script on an index-backed
    /// record. Such a request joins the client's batch for its master as a plain one does,
    /// instead of running as a future of its own; `None` sends it down the layout path,
    /// which answers every other case the same way. Counts nothing: a request that leaves
    /// this way is counted by [`ActiveLayout::count_direct`], one that takes the layout path
    /// after all (its slot has no master) is counted there.
    pub fn direct_rewrite(
        &self,
        spec: &CommandSpec,
        args: &[Bytes],
        keys: &[KeyPos],
        proto: Proto,
    ) -> Option<DirectRewrite> {
        if keys.is_empty() || names_keys(&spec.name) {
            return None;
        }
        // Scripts declare keys they may write whatever the key spec flags say; one on an
        // index-backed record runs with the refresh of its entries (the layout path).
        let script = is_script_call(spec);
        let mut renamed: SmallVec<[(usize, Bytes, u16); 4]> = SmallVec::new();
        let mut indexed: SmallVec<[IndexedKey; 2]> = SmallVec::new();
        let mut unmatched: SmallVec<[usize; 2]> = SmallVec::new();
        let mut slot = None;
        let mut same_slot = |key: &[u8]| {
            let this = key_slot(key);
            *slot.get_or_insert(this) == this
        };
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
                    if let Some(entry) = rewritten.index.filter(|_| script || key.flags.writes()) {
                        if script || !same_slot(&entry.key) {
                            return None;
                        }
                        indexed.push(IndexedKey {
                            arg: key.index,
                            record: rewritten.key.clone(),
                            entry,
                        });
                    }
                    (rewritten.key != *name).then_some((rewritten.key, rewritten.family.0))
                }
            };
            if !same_slot(
                cluster_name
                    .as_ref()
                    .map_or(name, |(cluster_key, _)| cluster_key),
            ) {
                return None;
            }
            if let Some((cluster_key, family)) = cluster_name {
                renamed.push((key.index, cluster_key, family));
            }
        }
        let slot = slot?;
        let upkeep = !indexed.is_empty();
        // A `noscript` command cannot run inside the upkeep script.
        let sha = if !upkeep {
            None
        } else if spec.flags.has(CommandFlags::NOSCRIPT) {
            return None;
        } else {
            Some(self.sha()?)
        };
        let cluster_args = || {
            args.iter().enumerate().map(|(at, arg)| {
                renamed
                    .iter()
                    .find(|(index, _, _)| *index == at)
                    .map_or(arg, |(_, key, _)| key)
            })
        };
        let frame = match sha {
            Some(sha) => {
                let command: SmallVec<[Bytes; 8]> = cluster_args().cloned().collect();
                let key_names: SmallVec<[Bytes; 4]> =
                    keys.iter().map(|key| command[key.index].clone()).collect();
                Some(upkeep_frame(
                    b"EVALSHA", sha, &indexed, &key_names, &command, proto,
                ))
            }
            None if renamed.is_empty() => None,
            None => {
                let refs: SmallVec<[&[u8]; 8]> = cluster_args().map(|arg| &arg[..]).collect();
                Some(encode_request(&refs))
            }
        };
        Some(DirectRewrite {
            slot,
            frame,
            upkeep,
            renamed_families: renamed.iter().map(|(_, _, family)| *family).collect(),
            unmatched_prefixes: unmatched,
        })
    }

    /// Counts what [`ActiveLayout::rewrite_request`] and the upkeep would have counted for
    /// a request sent as `rewrite` says.
    pub fn count_direct(&self, rewrite: &DirectRewrite) {
        for prefix in &rewrite.unmatched_prefixes {
            if let Some(counter) = self.unmatched_counters.get(*prefix) {
                counter.increment(1);
            }
        }
        for family in &rewrite.renamed_families {
            if let Some(counter) = self.rewrite_counters.get(usize::from(*family)) {
                counter.increment(1);
            }
        }
        if rewrite.upkeep {
            crate::metrics::index_upkeep();
        }
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
                        return Err(reply::error(&reply::refusals::layout_unmatched(
                            name.escape_ascii(),
                            prefix_name,
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
                        if super::upkeeps(spec, key) {
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
