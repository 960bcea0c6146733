//! The upkeep script's calls as frames: one call running a command with the index entries
//! of the records it writes, and what a command queued inside MULTI becomes under a layout
//! (the command wrapped in the call, or followed by a refresh-only call in the same EXEC).

use bytes::Bytes;
use smallvec::SmallVec;

use crate::command::CommandSpec;
use crate::protocol::encode::encode_request;
use crate::protocol::Proto;

use super::{ActiveLayout, IndexedKey, RewrittenRequest, UPKEEP_SCRIPT};

/// One upkeep script call (`verb` EVAL or EVALSHA, `script` its body or SHA) running
/// `command` (empty: refresh only) with the index entries of `indexed`.
pub(super) fn upkeep_frame(
    verb: &[u8],
    script: &[u8],
    indexed: &[IndexedKey],
    other_keys: &[Bytes],
    command: &[Bytes],
    proto: Proto,
) -> Bytes {
    let mut keys: Vec<&[u8]> = Vec::with_capacity(indexed.len() * 2 + other_keys.len());
    for key in indexed {
        keys.push(&key.entry.key);
        keys.push(&key.record);
    }
    keys.extend(other_keys.iter().map(|key| &key[..]));
    let pairs = indexed.len().to_string();
    let numkeys = keys.len().to_string();
    let resp: &[u8] = if proto == Proto::Resp3 { b"3" } else { b"2" };
    let mut args: Vec<&[u8]> = Vec::with_capacity(keys.len() + command.len() + 8);
    args.push(verb);
    args.push(script);
    args.push(numkeys.as_bytes());
    args.extend(keys.iter().copied());
    args.push(pairs.as_bytes());
    args.push(resp);
    args.extend(indexed.iter().map(|key| &key.entry.member[..]));
    args.extend(command.iter().map(|arg| &arg[..]));
    encode_request(&args)
}

/// What a command queued inside MULTI becomes under a layout (see
/// [`ActiveLayout::queued_requests`]).
#[derive(Debug, Clone)]
pub struct QueuedUnderLayout {
    /// The requests to queue on the backend, in order; only the first one's reply is the
    /// command's, the others are index refreshes whose replies are dropped.
    pub requests: SmallVec<[Bytes; 2]>,
    /// Whether a request is an EVALSHA of the upkeep script: the node must have it
    /// loaded before the block runs (see [`ActiveLayout::script_load_request`]).
    pub needs_script: bool,
}

impl ActiveLayout {
    /// The backend requests for `rewritten` (a `spec` command) inside a transaction: the
    /// command itself, wrapped in the upkeep script when it writes an index-backed key,
    /// or followed by a refresh-only call when it cannot run inside a script. Inside
    /// MULTI the refresh runs in the same EXEC, so it is atomic with the command.
    pub fn queued_requests(
        &self,
        spec: &CommandSpec,
        rewritten: &RewrittenRequest,
        proto: Proto,
    ) -> QueuedUnderLayout {
        let mut requests: SmallVec<[Bytes; 2]> = SmallVec::new();
        if rewritten.indexed.is_empty() {
            requests.push(rewritten.request.raw.clone());
            return QueuedUnderLayout {
                requests,
                needs_script: false,
            };
        }
        let (verb, script): (&[u8], &[u8]) = match self.sha() {
            Some(sha) => (b"EVALSHA", sha),
            // SCRIPT LOAD failed at start-up: the body itself always works.
            None => (b"EVAL", UPKEEP_SCRIPT.as_bytes()),
        };
        let args = &rewritten.request.args;
        let in_script = super::upkeep_in_script(spec, args);
        if in_script {
            let keys: SmallVec<[Bytes; 4]> = rewritten
                .keys
                .iter()
                .map(|key| args[key.index].clone())
                .collect();
            requests.push(upkeep_frame(
                verb,
                script,
                &rewritten.indexed,
                &keys,
                args,
                proto,
            ));
        } else {
            requests.push(rewritten.request.raw.clone());
            requests.push(upkeep_frame(
                verb,
                script,
                &rewritten.indexed,
                &[],
                &[],
                proto,
            ));
        }
        QueuedUnderLayout {
            requests,
            needs_script: self.sha().is_some(),
        }
    }

    /// `SCRIPT LOAD` of the upkeep script: sent before a MULTI block whose EVALSHA calls
    /// need it, on the same connection, because a node that lost its script cache would
    /// fail those calls inside EXEC, where there is no falling back to EVAL.
    pub fn script_load_request() -> Bytes {
        encode_request(&[b"SCRIPT", b"LOAD", UPKEEP_SCRIPT.as_bytes()])
    }
}
