//! One key's move against two live deployments (the source and the target, each a single
//! node or a cluster), driving the [`KeyMove`] machine with the scripts of [`super::claim`].
//!
//! Invariants: every script names the key and its record, which share a slot, so it runs
//! on the key's master; every step may be sent again or abandoned at any point (a dropped
//! future, a killed process) without harm, because the claim lapses at its deadline and
//! the seal writes the target at most once. A mover's token is fresh for every move, so
//! two moves of one key in one process exclude each other as two processes do.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::claim::{
    read_claim, read_finish, read_seal, BadReply, Claim, Element, Finish, KeyMove, Outcome, Phase,
    Seal, Value, CLAIM_SCRIPT, COMPACT_SCRIPT, FINISH_SCRIPT, SEAL_SCRIPT,
};
use super::names::{claim_key, fence_key, slot_fence, EVERY_KEY_MOVED};
use super::verify::DIGEST_SCRIPT;
use crate::migrate::plan::{CopyStep, Kind};
use crate::migrate::source::{Endpoint, Reply};
use crate::migrate::MigrateError;
use crate::rewrite::IndexEntry;

/// How long a claim lasts unless told otherwise: far above one move's few round trips, and
/// short enough that a write waiting on a dead proxy's claim waits no longer than this.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(2);

/// The sleeps between two claims while another mover holds the key: the first short (the
/// holder is usually a few round trips from its finish, and a client's command waits on
/// it), doubling up to the longest, so a finished move is noticed this soon, not only at
/// the holder's deadline.
const FIRST_BUSY_POLL: Duration = Duration::from_micros(500);
const BUSY_POLL: Duration = Duration::from_millis(10);

/// A move gives up waiting on other movers after this many leases (each lapsed claim is
/// taken over, so only a steady stream of new holders can keep it waiting that long).
const MAX_LEASES_WAITED: u32 = 4;

/// Why a move stopped before it was done. Every variant is safe to retry from the start:
/// the claim lapses on its own and the seal writes the target at most once.
#[derive(Debug, Clone, thiserror::Error)]
pub enum MoveError {
    /// A call to the source failed, or the source refused a script.
    #[error("source: {0}")]
    Source(String),
    /// A call to the target failed, or the target refused a script.
    #[error("target: {0}")]
    Target(String),
    /// A script answered in a shape it never sends.
    #[error(transparent)]
    Reply(#[from] BadReply),
    /// Other movers held the key the whole time this move was willing to wait.
    #[error("key {key} still claimed by other movers after {waited:?}")]
    Contended {
        /// The source key, printed.
        key: String,
        /// How long this move waited.
        waited: Duration,
    },
}

/// What to move: one source key and where it goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveSpec {
    /// Its name on the source.
    pub from: Bytes,
    /// Its name on the target.
    pub to: Bytes,
    /// The index entry kept beside it on the target (records of the layout).
    pub index: Option<IndexEntry>,
    /// A number that only rises (lock fence, leadership term): set if greater.
    pub counter: bool,
}

impl MoveSpec {
    /// A key moved under the same name, with no index.
    pub fn same_name(key: Bytes) -> MoveSpec {
        MoveSpec {
            from: key.clone(),
            to: key,
            index: None,
            counter: false,
        }
    }

    /// The move of what the offline planner would copy. (The planner skips ephemeral turn
    /// counters, which offline are dead state; while bots run they are live, so a live
    /// caller moves them too, as plain keys under their target names.)
    pub fn from_copy_step(step: &CopyStep) -> MoveSpec {
        MoveSpec {
            from: step.from.clone(),
            to: step.to.clone(),
            index: step.index.clone(),
            counter: step.kind == Kind::Counter,
        }
    }
}

/// Scripts loaded on one side: their SHA1s, sent with EVALSHA.
#[derive(Debug, Clone)]
pub(super) struct Loaded {
    claim: Bytes,
    finish: Bytes,
    seal: Bytes,
    compact: Bytes,
    /// The value check's script, loaded on both sides (one text, so one SHA).
    pub(super) digest: Bytes,
}

/// Moves keys from `source` to `target`, one key per [`Mover::run`]; any number of movers,
/// in any number of processes, may move the same keyspace at once.
#[derive(Debug)]
pub struct Mover {
    pub(super) source: Arc<Endpoint>,
    pub(super) target: Arc<Endpoint>,
    lease: Duration,
    pub(super) scripts: Loaded,
}

impl Mover {
    /// Loads the scripts on every master of both sides.
    pub async fn new(
        source: Arc<Endpoint>,
        target: Arc<Endpoint>,
        lease: Duration,
    ) -> Result<Mover, MoveError> {
        let on_source = |e: MigrateError| MoveError::Source(e.to_string());
        let on_target = |e: MigrateError| MoveError::Target(e.to_string());
        let scripts = Loaded {
            claim: source.load_script(CLAIM_SCRIPT).await.map_err(on_source)?,
            finish: source.load_script(FINISH_SCRIPT).await.map_err(on_source)?,
            seal: target.load_script(SEAL_SCRIPT).await.map_err(on_target)?,
            compact: target
                .load_script(COMPACT_SCRIPT)
                .await
                .map_err(on_target)?,
            digest: source.load_script(DIGEST_SCRIPT).await.map_err(on_source)?,
        };
        target.load_script(DIGEST_SCRIPT).await.map_err(on_target)?;
        Ok(Mover {
            source,
            target,
            lease,
            scripts,
        })
    }

    /// How long a claim lasts.
    pub fn lease(&self) -> Duration {
        self.lease
    }

    /// A token no other move holds, for one move.
    pub fn token() -> Bytes {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        // Process id, clock and counter make it unique on one host; the randomly keyed
        // hash, across hosts.
        let random = RandomState::new().hash_one(n);
        Bytes::from(format!(
            "{:x}-{nanos:x}-{n:x}-{random:016x}",
            std::process::id()
        ))
    }

    /// Moves one key; when it returns, the source holds neither the key nor a claim on it
    /// and the target is authoritative for it.
    pub async fn run(&self, spec: &MoveSpec) -> Result<Outcome, MoveError> {
        let done = self
            .drive(spec, &Mover::token(), KeyMove::new(), |_| false)
            .await?;
        match done.phase() {
            Phase::Done(outcome) => Ok(*outcome),
            other => unreachable!("drive stops only when done or asked: {other:?}"),
        }
    }

    /// Drives `mv` until it is done, or until `pause_before` says to stop before a phase;
    /// returns the machine where it stopped (to resume with the same token, or to drop as
    /// a process killed there would). A machine resumed about to seal reads the key again
    /// first: how old its claim is, this call cannot know.
    pub async fn drive(
        &self,
        spec: &MoveSpec,
        token: &Bytes,
        mut mv: KeyMove,
        pause_before: impl Fn(&Phase) -> bool,
    ) -> Result<KeyMove, MoveError> {
        let started = Instant::now();
        let mut claimed_at: Option<Instant> = None;
        let mut poll = FIRST_BUSY_POLL;
        loop {
            if pause_before(mv.phase()) {
                return Ok(mv);
            }
            match mv.phase().clone() {
                Phase::Claim => {
                    claimed_at = Some(Instant::now());
                    mv.on_claim(self.claim(spec, token).await?);
                }
                Phase::Wait { ms } => {
                    let waited = started.elapsed();
                    if waited > self.lease * MAX_LEASES_WAITED {
                        return Err(MoveError::Contended {
                            key: String::from_utf8_lossy(&spec.from).into_owned(),
                            waited,
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(ms).min(poll)).await;
                    poll = (poll * 2).min(BUSY_POLL);
                    mv.on_waited();
                }
                Phase::Seal(_) if claimed_at.is_none_or(|at| at.elapsed() >= self.lease) => {
                    mv.on_lease_lapsed()
                }
                Phase::Seal(value) => mv.on_seal(self.seal(spec, value.as_ref()).await?),
                Phase::Finish => mv.on_finish(self.finish(spec, token).await?),
                Phase::Done(_) => return Ok(mv),
            }
        }
    }

    /// Sends the claim script for `spec` with `token`.
    pub async fn claim(&self, spec: &MoveSpec, token: &Bytes) -> Result<Claim, MoveError> {
        let mut claims = self.claim_many(std::slice::from_ref(spec), token).await?;
        claims.pop().ok_or_else(|| no_answer("claim"))
    }

    /// Claims every one of `specs` with `token` in one call of the claim script, each as if
    /// claimed alone: one answer per spec, in order. Their source keys must share a node
    /// (a single-node source) or, on a cluster, a slot: the script runs where the first is.
    pub async fn claim_many(
        &self,
        specs: &[MoveSpec],
        token: &Bytes,
    ) -> Result<Vec<Claim>, MoveError> {
        let lease_ms = self.lease.as_millis().to_string();
        let mut args: Vec<&[u8]> = vec![token, lease_ms.as_bytes()];
        args.extend(specs.iter().map(|spec| -> &[u8] {
            match spec.counter {
                true => b"get",
                false => b"dump",
            }
        }));
        let script = (&self.scripts.claim, CLAIM_SCRIPT);
        let answers = self.on_source_keys("claim", script, specs, &args).await?;
        answers.into_iter().map(claim_answer).collect()
    }

    /// Sends the seal script for `spec`: `value` as read by the claim, or `None` when the
    /// source key had expired.
    pub async fn seal(&self, spec: &MoveSpec, value: Option<&Value>) -> Result<Seal, MoveError> {
        let fence = fence_key(&spec.to);
        let (kind, ttl, payload): (&[u8], String, &[u8]) = match (value, spec.counter) {
            (Some(v), false) => (b"restore", v.ttl_ms.to_string(), &v.payload),
            (Some(v), true) => (b"raise", v.ttl_ms.to_string(), &v.payload),
            (None, false) => (b"absent", "0".to_owned(), b""),
            (None, true) => (b"leave", "0".to_owned(), b""),
        };
        let mut keys: Vec<&[u8]> = vec![&fence, &spec.to];
        let mut args: Vec<&[u8]> = vec![kind, ttl.as_bytes(), payload];
        if let Some(index) = &spec.index {
            keys.push(&index.key);
            args.push(&index.member);
        }
        let reply = eval(
            &self.target,
            &spec.to,
            (&self.scripts.seal, SEAL_SCRIPT),
            &keys,
            &args,
        )
        .await
        .map_err(MoveError::Target)?;
        Ok(read_seal(int_reply("seal", reply)?)?)
    }

    /// Compacts the moved-fence of target slot `slot` (`compact.lua`): only once a whole pass
    /// found the source empty. `true` when the slot had a fence.
    pub async fn compact_fence(&self, slot: u16) -> Result<bool, MoveError> {
        let fence = slot_fence(slot);
        let script = (&self.scripts.compact, COMPACT_SCRIPT);
        let reply = eval(&self.target, &fence, script, &[&fence], &[])
            .await
            .map_err(MoveError::Target)?;
        Ok(int_reply("compact", reply)? == 1)
    }

    /// Sends the finish script for `spec` with `token`.
    pub async fn finish(&self, spec: &MoveSpec, token: &Bytes) -> Result<Finish, MoveError> {
        let mut finishes = self.finish_many(std::slice::from_ref(spec), token).await?;
        finishes.pop().ok_or_else(|| no_answer("finish"))
    }

    /// Finishes every one of `specs` with `token` in one call of the finish script, each as
    /// if alone; the same placement rule as [`Mover::claim_many`].
    pub async fn finish_many(
        &self,
        specs: &[MoveSpec],
        token: &Bytes,
    ) -> Result<Vec<Finish>, MoveError> {
        let script = (&self.scripts.finish, FINISH_SCRIPT);
        let answers = self
            .on_source_keys("finish", script, specs, &[token])
            .await?;
        answers
            .into_iter()
            .map(|answer| Ok(read_finish(int_reply("finish", answer)?)?))
            .collect()
    }
}

impl Mover {
    /// Runs the source script `name` once over every one of `specs` (its keys: each source
    /// key and its claim record), where the first spec's key is; one answer per spec.
    async fn on_source_keys(
        &self,
        name: &'static str,
        script: (&Bytes, &str),
        specs: &[MoveSpec],
        args: &[&[u8]],
    ) -> Result<Vec<Reply>, MoveError> {
        let Some(first) = specs.first() else {
            return Ok(Vec::new());
        };
        let records = claim_records(specs);
        let keys = key_pairs(specs, &records);
        let reply = eval(&self.source, &first.from, script, &keys, args)
            .await
            .map_err(MoveError::Source)?;
        Ok(list_reply(name, reply, specs.len())?)
    }
}

/// The claim records of `specs`' source keys, in order.
fn claim_records(specs: &[MoveSpec]) -> Vec<Bytes> {
    specs.iter().map(|spec| claim_key(&spec.from)).collect()
}

/// The claim and finish scripts' keys: each source key followed by its claim record.
fn key_pairs<'a>(specs: &'a [MoveSpec], records: &'a [Bytes]) -> Vec<&'a [u8]> {
    specs
        .iter()
        .zip(records)
        .flat_map(|(spec, record)| [&spec.from[..], &record[..]])
        .collect()
}

/// A script's reply that must be a list of `count` answers.
fn list_reply(script: &'static str, reply: Reply, count: usize) -> Result<Vec<Reply>, BadReply> {
    match reply {
        Reply::List(items) if items.len() == count => Ok(items),
        other => Err(BadReply {
            script,
            reply: format!("{other:?}"),
        }),
    }
}

/// One key's answer of the claim script.
fn claim_answer(answer: Reply) -> Result<Claim, MoveError> {
    let bad = |reply: &dyn std::fmt::Debug| BadReply {
        script: "claim",
        reply: format!("{reply:?}"),
    };
    let Reply::List(items) = answer else {
        return Err(bad(&answer).into());
    };
    let items: Vec<Element> = items
        .into_iter()
        .map(|item| match item {
            Reply::Int(n) => Ok(Element::Int(n)),
            Reply::Data(data) => Ok(Element::Data(data)),
            other => Err(bad(&other)),
        })
        .collect::<Result<_, _>>()?;
    Ok(read_claim(&items)?)
}

fn no_answer(script: &'static str) -> MoveError {
    BadReply {
        script,
        reply: "no answer".to_owned(),
    }
    .into()
}

fn int_reply(script: &'static str, reply: Reply) -> Result<i64, BadReply> {
    reply.int().ok_or_else(|| BadReply {
        script,
        reply: format!("{reply:?}"),
    })
}

/// Whether `target` records the move of its key `to`: its own field in its slot's fence, or
/// the slot's compacted field.
pub async fn move_recorded(target: &Endpoint, to: &[u8]) -> Result<bool, MigrateError> {
    let fence = fence_key(to);
    let reply = target
        .call_key(to, &[b"HMGET", &fence, to, EVERY_KEY_MOVED])
        .await?;
    match reply {
        Reply::List(fields) => Ok(fields.iter().any(|f| !matches!(f, Reply::Nil))),
        other => Err(MigrateError::Redis(format!("HMGET answered {other:?}"))),
    }
}

/// Runs a script on the master of `key` by its SHA1, and by its text when the server has
/// lost it (restarted, or `SCRIPT FLUSH`). An error reply comes back as `Err`.
pub(super) async fn eval(
    side: &Endpoint,
    key: &[u8],
    (sha, text): (&Bytes, &str),
    keys: &[&[u8]],
    args: &[&[u8]],
) -> Result<Reply, String> {
    let count = keys.len().to_string();
    let mut call: Vec<&[u8]> = vec![b"EVALSHA", sha, count.as_bytes()];
    call.extend_from_slice(keys);
    call.extend_from_slice(args);
    let mut reply = side.call_key(key, &call).await.map_err(|e| e.to_string())?;
    if reply.error().is_some_and(|e| e.starts_with("NOSCRIPT")) {
        call[0] = b"EVAL";
        call[1] = text.as_bytes();
        reply = side.call_key(key, &call).await.map_err(|e| e.to_string())?;
    }
    match reply {
        Reply::Error(e) => Err(e),
        reply => Ok(reply),
    }
}
