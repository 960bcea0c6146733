//! The layout stage: a request's legacy key names to cluster names, once, before the
//! plan. Pure: [`ActiveLayout::stage`] reads the rules and the request and says what the
//! rest of the way needs (the renamed request, the index-backed records it writes, what
//! the reply needs rewritten back, what to count); callers count and send.

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use crate::command::{CommandSpec, KeyList, KeyPos};
use crate::protocol::encode::encode_request;
use crate::protocol::{Limits, Request, RequestDecoder};
use crate::reply;
use crate::rewrite::Forward;

use super::reply::ReplyKeys;
use super::{ActiveLayout, IndexedKey, RewrittenRequest, UPKEEP_SCRIPT};

/// An upkeep EVALSHA `frame` (see [`crate::dispatch::DirectKind::Upkeep`]) as the same
/// call by the script's body, for a node that answered `-NOSCRIPT` (a restart, a failover,
/// a SCRIPT FLUSH). `None` when `frame` is not a request of at least two arguments.
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

/// How the key names in a request's reply reach the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyNames {
    /// The reply names no key: it goes back as the node gave it.
    Unchanged,
    /// The reply names keys (RANDOMKEY, the list/zset pops, XREAD): cluster names back to
    /// legacy ones, internal keys hidden.
    Rewritten(ReplyKeys),
    /// The request lists key names (KEYS, SCAN): it is answered by listing through the
    /// layout (index reads, SCAN by pattern), not by forwarding it.
    Listed(Listing),
}

/// A request that lists key names under a layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listing {
    /// KEYS `pattern`.
    Keys,
    /// SCAN `cursor` with its options.
    Scan,
}

/// What the layout stage makes of a request it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rewrite {
    /// The request in cluster names; `None` when no key is renamed (the client's own
    /// request, frame included, is the cluster's). Left unframed (an empty `raw`) when it
    /// has `indexed` keys: its plan is the index upkeep, whose script call is framed from
    /// the arguments, and [`framed`] frames it for the paths that send it as is.
    pub renamed: Option<Request>,
    /// Record keys of index-backed families the command may create, change or delete: the
    /// plan runs it with their index upkeep.
    pub indexed: SmallVec<[IndexedKey; 2]>,
    /// What the reply needs rewritten back.
    pub reply: ReplyNames,
    /// What the metrics count once the request is sent.
    pub counts: RewriteCounts,
}

/// A request the strict layout refuses: a key under a prefix that no rule matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The error to answer.
    pub reply: Bytes,
    /// What the metrics count (the unmatched prefix, the keys renamed before it).
    pub counts: RewriteCounts,
}

/// The layout metrics one request adds: the family of each renamed key
/// (`slotbridge_layout_rewrites_total`) and the prefix of each key no rule matched
/// (`slotbridge_layout_unmatched_keys_total`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RewriteCounts {
    pub(super) families: SmallVec<[u16; 4]>,
    pub(super) prefixes: SmallVec<[usize; 2]>,
}

impl Rewrite {
    /// The request to plan and send: the renamed one, or `original` when no key changed.
    pub fn request<'r>(&'r self, original: &'r Request) -> &'r Request {
        self.renamed.as_ref().unwrap_or(original)
    }
}

impl ActiveLayout {
    /// The layout stage of `request` (a `spec` command with a valid arity, its key
    /// positions `keys`): `Ok(None)` when the layout leaves the request and its reply
    /// alone (every key outside every prefix: a prefix check per key, nothing built);
    /// otherwise the request in cluster names with what the plan and the reply need, or
    /// the strict layout's refusal. Keyless requests always concern the layout (KEYS,
    /// SCAN and RANDOMKEY list names it must translate or hide). Counts nothing: see
    /// [`ActiveLayout::count`].
    pub fn stage(
        &self,
        spec: &CommandSpec,
        request: &Request,
        keys: &[KeyPos],
    ) -> Result<Option<Rewrite>, Refused> {
        let args = &request.args;
        if !self.concerns_keys(args, keys) {
            return Ok(None);
        }
        let mut counts = RewriteCounts::default();
        let mut renamed: SmallVec<[(usize, Bytes); 4]> = SmallVec::new();
        let mut indexed: SmallVec<[IndexedKey; 2]> = SmallVec::new();
        for key in keys {
            let name = &args[key.index];
            match self.layout.forward_shared(name) {
                Forward::Outside => {}
                Forward::Unmatched { prefix } => {
                    counts.prefixes.push(prefix);
                    if self.strict {
                        let prefix_name = &self.layout.prefixes()[prefix];
                        let reply = reply::error(&reply::refusals::layout_unmatched(
                            name.escape_ascii(),
                            prefix_name,
                        ));
                        return Err(Refused { reply, counts });
                    }
                }
                Forward::Rewritten(rewritten) => {
                    if let Some(entry) = rewritten.index.filter(|_| super::upkeeps(spec, key)) {
                        indexed.push(IndexedKey {
                            arg: key.index,
                            record: rewritten.key.clone(),
                            entry,
                        });
                    }
                    if rewritten.key != *name {
                        counts.families.push(rewritten.family.0);
                        renamed.push((key.index, rewritten.key));
                    }
                }
            }
        }
        Ok(Some(Rewrite {
            renamed: (!renamed.is_empty())
                .then(|| renamed_request(args, renamed, indexed.is_empty())),
            indexed,
            reply: reply_names(spec),
            counts,
        }))
    }

    /// Counts what a request's layout stage found, once it is sure to be sent (or refused).
    pub fn count(&self, counts: &RewriteCounts) {
        for prefix in &counts.prefixes {
            if let Some(counter) = self.unmatched_counters.get(*prefix) {
                counter.increment(1);
            }
        }
        for family in &counts.families {
            if let Some(counter) = self.rewrite_counters.get(usize::from(*family)) {
                counter.increment(1);
            }
        }
    }

    /// The layout stage of `request` (a `spec` command), counted, for a transaction's
    /// queue; `Err` is the reply to give instead (a key matching no rule under `strict`).
    pub fn rewrite_request(
        &self,
        spec: &CommandSpec,
        request: Request,
    ) -> Result<RewrittenRequest, Bytes> {
        let mut keys: KeyList = SmallVec::new();
        spec.keys(&request.args, &mut keys);
        let (request, indexed) = match self.stage(spec, &request, &keys) {
            Ok(None) => (request, SmallVec::new()),
            Ok(Some(rewrite)) => {
                self.count(&rewrite.counts);
                (rewrite.renamed.map_or(request, framed), rewrite.indexed)
            }
            Err(refused) => {
                self.count(&refused.counts);
                return Err(refused.reply);
            }
        };
        Ok(RewrittenRequest {
            request,
            keys,
            indexed,
        })
    }
}

/// `args` with the `renamed` positions replaced, and its frame when `frame` (else an
/// empty one, see [`Rewrite::renamed`]). The cluster names are moved in, not cloned: a
/// clone would give each its shared handle, an allocation.
fn renamed_request(args: &[Bytes], renamed: SmallVec<[(usize, Bytes); 4]>, frame: bool) -> Request {
    let mut args: SmallVec<[Bytes; 4]> = args.iter().cloned().collect();
    for (at, key) in renamed {
        args[at] = key;
    }
    let request = Request {
        raw: Bytes::new(),
        args,
    };
    match frame {
        true => framed(request),
        false => request,
    }
}

/// `request` with its frame: a renamed request the layout stage left unframed (see
/// [`Rewrite::renamed`]) is framed from its arguments; any other is returned as it is (a
/// request always has a frame of at least its argument count).
pub fn framed(mut request: Request) -> Request {
    if request.raw.is_empty() {
        let refs: SmallVec<[&[u8]; 8]> = request.args.iter().map(|arg| &arg[..]).collect();
        request.raw = encode_request(&refs);
    }
    request
}

/// What the reply of a `spec` request needs from the layout.
fn reply_names(spec: &CommandSpec) -> ReplyNames {
    match spec.name.as_str() {
        "keys" => ReplyNames::Listed(Listing::Keys),
        "scan" => ReplyNames::Listed(Listing::Scan),
        name => ReplyKeys::of(name).map_or(ReplyNames::Unchanged, ReplyNames::Rewritten),
    }
}
