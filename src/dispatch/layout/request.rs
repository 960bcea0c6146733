//! The forward rewrite: a request's legacy key names to cluster names, noting the
//! index-backed records the command writes.

use bytes::Bytes;
use smallvec::SmallVec;

use crate::command::{CommandSpec, KeyList};
use crate::protocol::encode::encode_request;
use crate::protocol::Request;
use crate::reply;
use crate::rewrite::Forward;

use super::{is_script_call, ActiveLayout, IndexedKey, RewrittenRequest};

impl ActiveLayout {
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
            match self.layout.forward(name) {
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
