//! Lua scripts across masters. Each master has its own script cache, so a script loaded
//! through the proxy must exist wherever its keys live, also after a reshard or failover
//! brings them to a master that never saw it.
//!
//! The proxy remembers every script body it sees (EVAL, EVAL_RO, SCRIPT LOAD) by its SHA1,
//! in a bounded LRU ([`ScriptCache`]). SCRIPT LOAD and SCRIPT FLUSH go to every master.
//! EVALSHA/EVALSHA_RO route by key as usual; on `-NOSCRIPT` with a remembered body the
//! proxy loads the body on every master and retries once (loading is idempotent, and the
//! master that answered may have been reached through a redirect).
//!
//! A client's script runs on a connection of its own, never on the shared connection to
//! its master (see `Upstream::run_script_alone`): a node reads nothing more from the
//! connection of a script that runs, so a long one would hold every other client's
//! requests there, where a single Redis answers them `-BUSY`.
//!
//! SCRIPT EXISTS answers, per SHA, 1 when the proxy remembers the body (EVALSHA will work
//! wherever it lands) or every master has it; 0 otherwise.
//!
//! A script that touches a key outside the slot of its declared keys works on one Redis but
//! fails on a cluster with a node error that names neither the key nor the remedy; the proxy
//! keeps the node's text and appends a hint ([`SCRIPT_KEY_HINT`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};

use crate::command::{ScriptAdmin, ScriptRun};
use crate::protocol::{encode, Proto, ReplyView, Request};
use crate::reply::{self, merge};

use super::{Proxy, Target};

/// Most script bodies remembered.
pub const MAX_SCRIPTS: usize = 10_000;
/// Most bytes of script bodies remembered.
pub const MAX_SCRIPT_BYTES: usize = 64 * 1024 * 1024;
/// How much of the cache a new node connection loads before its first request: enough for
/// the scripts bots use, small enough to stay well within the connect timeout.
const PRELOAD_SCRIPTS: usize = 100;
const PRELOAD_BYTES: usize = 1024 * 1024;

/// A script's SHA1 as 40 lower-case hex digits, the form Redis uses.
pub type Sha = [u8; 40];

/// Script bodies by SHA1, least recently used forgotten first beyond `MAX_SCRIPTS` or
/// `MAX_SCRIPT_BYTES`. A body larger than the byte bound is not remembered.
pub struct ScriptCache {
    inner: Mutex<CacheInner>,
    max_scripts: usize,
    max_bytes: usize,
}

#[derive(Default)]
struct CacheInner {
    bodies: HashMap<Sha, (Bytes, u64)>,
    by_use: BTreeMap<u64, Sha>,
    bytes: usize,
    clock: u64,
}

impl Default for ScriptCache {
    fn default() -> Self {
        ScriptCache::with_limits(MAX_SCRIPTS, MAX_SCRIPT_BYTES)
    }
}

impl ScriptCache {
    /// A cache holding at most `max_scripts` bodies and `max_bytes` bytes of them.
    pub fn with_limits(max_scripts: usize, max_bytes: usize) -> ScriptCache {
        ScriptCache {
            inner: Mutex::new(CacheInner::default()),
            max_scripts,
            max_bytes,
        }
    }

    /// Remembers `body` and returns its SHA1.
    pub fn remember(&self, body: &Bytes) -> Sha {
        let sha = sha_of(body);
        if body.len() > self.max_bytes || self.max_scripts == 0 {
            return sha;
        }
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        if let Some((_, used)) = inner.bodies.get_mut(&sha) {
            let old = std::mem::replace(used, now);
            inner.by_use.remove(&old);
            inner.by_use.insert(now, sha);
            return sha;
        }
        while inner.bodies.len() >= self.max_scripts || inner.bytes + body.len() > self.max_bytes {
            let Some((_, oldest)) = inner.by_use.pop_first() else {
                break;
            };
            if let Some((gone, _)) = inner.bodies.remove(&oldest) {
                inner.bytes -= gone.len();
            }
        }
        inner.bytes += body.len();
        inner.bodies.insert(sha, (body.clone(), now));
        inner.by_use.insert(now, sha);
        sha
    }

    /// The body of `sha` (any case), if remembered; counts as a use.
    pub fn get(&self, sha: &[u8]) -> Option<Bytes> {
        let key = normalize(sha)?;
        let mut inner = self.lock();
        inner.clock += 1;
        let now = inner.clock;
        let (body, used) = inner.bodies.get_mut(&key)?;
        let body = body.clone();
        let old = std::mem::replace(used, now);
        inner.by_use.remove(&old);
        inner.by_use.insert(now, key);
        Some(body)
    }

    /// `SCRIPT LOAD` requests for the most recently used bodies, at most `max_scripts` of
    /// them and `max_bytes` of bodies, for a node connection's prelude.
    pub fn recent_loads(&self, max_scripts: usize, max_bytes: usize) -> Vec<Bytes> {
        let inner = self.lock();
        let mut bytes = 0;
        inner
            .by_use
            .values()
            .rev()
            .filter_map(|sha| inner.bodies.get(sha))
            .take(max_scripts)
            .take_while(|(body, _)| {
                bytes += body.len();
                bytes <= max_bytes
            })
            .map(|(body, _)| encode::encode_request(&[b"SCRIPT", b"LOAD", body]))
            .collect()
    }

    /// A prelude that loads the [`PRELOAD_SCRIPTS`] most recently used bodies (up to
    /// [`PRELOAD_BYTES`]) on every new shared node connection: a node that restarted or
    /// just became master has them before any EVALSHA, so none answers NOSCRIPT and has to
    /// be sent again after the requests behind it.
    pub fn preload(self: &Arc<Self>) -> crate::backend::Prelude {
        let cache = self.clone();
        Arc::new(move || cache.recent_loads(PRELOAD_SCRIPTS, PRELOAD_BYTES))
    }

    /// Whether `sha` (any case) is remembered.
    pub fn contains(&self, sha: &[u8]) -> bool {
        normalize(sha).is_some_and(|key| self.lock().bodies.contains_key(&key))
    }

    /// Forgets every body.
    pub fn clear(&self) {
        *self.lock() = CacheInner::default();
    }

    /// Number of bodies remembered.
    pub fn len(&self) -> usize {
        self.lock().bodies.len()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// SHA1 of `body` as Redis writes it.
pub fn sha_of(body: &[u8]) -> Sha {
    let digest = sha1_smol::Sha1::from(body).digest().bytes();
    let mut out = [0u8; 40];
    for (i, byte) in digest.iter().enumerate() {
        out[2 * i] = HEX[usize::from(byte >> 4)];
        out[2 * i + 1] = HEX[usize::from(byte & 0xf)];
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// A 40-character SHA in lower case, as Redis compares them.
fn normalize(sha: &[u8]) -> Option<Sha> {
    let mut key = [0u8; 40];
    if sha.len() != key.len() {
        return None;
    }
    for (dst, src) in key.iter_mut().zip(sha) {
        *dst = src.to_ascii_lowercase();
    }
    Some(key)
}

impl Proxy {
    pub(super) async fn script_admin(
        &self,
        admin: ScriptAdmin,
        request: &Request,
        proto: Proto,
    ) -> Bytes {
        let args = &request.args;
        match admin {
            ScriptAdmin::Load => {
                let Some(body) = args.get(2) else {
                    return reply::wrong_arity("script|load");
                };
                self.scripts.remember(body);
                self.broadcast_all_same(request.raw.clone(), proto).await
            }
            ScriptAdmin::Flush => {
                self.scripts.clear();
                let flushed = self.broadcast_all_ok(request.raw.clone(), proto).await;
                if self.layout.is_some() {
                    // The layout's own script stays: remembered for new connections, and
                    // loaded again at once, so its batched calls do not meet NOSCRIPT.
                    let upkeep = Bytes::from_static(super::layout::UPKEEP_SCRIPT.as_bytes());
                    self.scripts.remember(&upkeep);
                    let _ = self
                        .broadcast(super::layout::ActiveLayout::script_load_request(), proto)
                        .await;
                }
                flushed
            }
            ScriptAdmin::Exists => {
                let replies = match self.broadcast(request.raw.clone(), proto).await {
                    Ok(replies) => replies,
                    Err(error) => return error,
                };
                if let Some(error) = merge::first_error(&replies) {
                    return error.clone();
                }
                let shas = &args[2..];
                let mut everywhere = vec![true; shas.len()];
                for reply in &replies {
                    let Some(flags) =
                        ReplyView::element_frames(reply).filter(|flags| flags.len() == shas.len())
                    else {
                        return reply.clone();
                    };
                    for (all, flag) in everywhere.iter_mut().zip(flags) {
                        *all &= merge::integer(flag) == Some(1);
                    }
                }
                let mut out = BytesMut::new();
                encode::array_header(&mut out, shas.len());
                for (sha, all) in shas.iter().zip(everywhere) {
                    encode::integer(&mut out, i64::from(all || self.scripts.contains(sha)));
                }
                out.freeze()
            }
        }
    }

    /// A client's script call, on a connection of its own (see `Upstream::run_script_alone`).
    pub(super) async fn run_script(
        &self,
        run: ScriptRun,
        target: Target,
        request: &Request,
        proto: Proto,
    ) -> Bytes {
        let script = request.args.get(1);
        if run == ScriptRun::Fcall {
            let reply = self.run_function(target, request, proto).await;
            return with_key_slot_hint(reply);
        }
        if run == ScriptRun::Eval {
            if let Some(body) = script {
                self.scripts.remember(body);
            }
            let reply = self
                .upstream
                .run_script_alone(target, request.raw.clone(), proto)
                .await;
            return with_key_slot_hint(reply);
        }
        let reply = self
            .upstream
            .run_script_alone(target, request.raw.clone(), proto)
            .await;
        self.script_reply_of(target, request, reply, proto).await
    }

    /// What the master of `slot` answers now to a command that Redis refuses while a
    /// script runs (`PING`, sent on the shared connection): its `-BUSY` error, or `None`.
    /// `None` at once, with no future, while no client's script runs there through this
    /// proxy (see `topology::ScriptConns`); otherwise the answer comes when the node's
    /// would, after `busy-reply-threshold` if the script is younger than that.
    pub fn busy_probe(
        &self,
        slot: u16,
    ) -> Option<impl std::future::Future<Output = Option<Bytes>> + Send + 'static> {
        let node = self.upstream.node_for(Target::Slot(slot))?;
        if self.topology.scripts_running_on(&node) == 0 {
            return None;
        }
        let conn = self.topology.node(&node, Proto::Resp2);
        let topology = self.topology.clone();
        Some(async move {
            match conn.call(Bytes::from_static(PING), false).await {
                Ok(reply) if reply.starts_with(b"-BUSY") => Some(reply),
                Ok(_) => {
                    topology.scripts_settled(&node);
                    None
                }
                Err(_) => None,
            }
        })
    }

    /// `reply` to the script call `request`, made final: on `-NOSCRIPT` with a remembered
    /// body, the body is loaded on every master and the call sent once more; a script's
    /// error about a key outside its slot gets [`SCRIPT_KEY_HINT`].
    async fn script_reply_of(
        &self,
        target: Target,
        request: &Request,
        reply: Bytes,
        proto: Proto,
    ) -> Bytes {
        if !reply.starts_with(b"-NOSCRIPT") {
            return with_key_slot_hint(reply);
        }
        let Some(body) = request.args.get(1).and_then(|sha| self.scripts.get(sha)) else {
            return reply;
        };
        let load = encode::encode_request(&[b"SCRIPT", b"LOAD", &body]);
        let loaded = self.broadcast_all_same(load, proto).await;
        if loaded.first() == Some(&b'-') {
            // Loading failed somewhere: the original answer explains more than this does.
            return reply;
        }
        let reply = self
            .upstream
            .run_script_alone(target, request.raw.clone(), proto)
            .await;
        with_key_slot_hint(reply)
    }
}

/// The probe of [`Proxy::busy_probe`]: harmless, and refused like any command that is
/// not `allow_busy` while a script runs.
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";

/// What a cluster node says when a script touches a key outside the slot (or node) of its
/// declared keys, e.g. "Script attempted to access a non local key in a cluster node".
const SCRIPT_KEY_ERROR: &[u8] = b"Script attempted to access";

/// Appended to [`SCRIPT_KEY_ERROR`] replies. The node's text does not say which key or why;
/// the usual cause is a key name the script builds itself, which a single Redis accepts.
pub const SCRIPT_KEY_HINT: &str = " (slotbridge: on a cluster a script may only use keys in the slot of the keys it declares in KEYS; a key it builds from KEYS[1], such as KEYS[1]..':seq', needs the same hash tag, e.g. {user:42} and {user:42}:seq, or a layout rule that gives both names one tag)";

/// `reply` with [`SCRIPT_KEY_HINT`] appended when it is a simple error about a script's key
/// outside its slot; any other reply unchanged.
pub fn with_key_slot_hint(reply: Bytes) -> Bytes {
    let Some(line) = reply
        .strip_prefix(b"-")
        .and_then(|rest| rest.strip_suffix(b"\r\n"))
    else {
        return reply;
    };
    let is_key_error = line
        .windows(SCRIPT_KEY_ERROR.len())
        .any(|window| window == SCRIPT_KEY_ERROR);
    // A simple error is one line: anything else is not the node's script error.
    if !is_key_error || line.contains(&b'\n') {
        return reply;
    }
    let mut out = BytesMut::with_capacity(reply.len() + SCRIPT_KEY_HINT.len());
    out.extend_from_slice(b"-");
    out.extend_from_slice(line);
    out.extend_from_slice(SCRIPT_KEY_HINT.as_bytes());
    out.extend_from_slice(b"\r\n");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha_matches_redis_for_known_scripts() {
        // SHA1 test vectors (FIPS 180) and the SHA Redis reports for `return 1`.
        assert_eq!(&sha_of(b"abc"), b"a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(&sha_of(b""), b"da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            &sha_of(b"return 1"),
            b"e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
    }

    #[test]
    fn script_key_errors_get_the_hint_and_other_replies_do_not() {
        // Redis 7.0's text (script.c) when a script touches a key served by another node.
        let node = "-ERR Script attempted to access a non local key in a cluster node script: 0385493f68b8b3e0750a61d7d91c4f1c964b4fe1, on @user_script:12.\r\n";
        let hinted = with_key_slot_hint(Bytes::from_static(node.as_bytes()));
        let text = std::str::from_utf8(&hinted).unwrap();
        assert!(text.starts_with(node.trim_end()), "{text}");
        assert!(text.ends_with(")\r\n"), "{text}");
        assert!(text.contains("hash tag"), "{text}");
        assert_eq!(text.matches("\r\n").count(), 1, "{text}");

        for other in [
            &b"-ERR wrong number of arguments for 'eval' command\r\n"[..],
            b"-NOSCRIPT No matching script. Please use EVAL.\r\n",
            // A value that merely contains the words is data, not an error.
            b"$26\r\nScript attempted to access\r\n",
            b":1\r\n",
        ] {
            assert_eq!(
                &with_key_slot_hint(Bytes::copy_from_slice(other))[..],
                other
            );
        }
    }

    #[test]
    fn lookups_ignore_case() {
        let cache = ScriptCache::default();
        let sha = cache.remember(&Bytes::from_static(b"return 1"));
        assert!(cache.contains(&sha.to_ascii_uppercase()));
        assert_eq!(cache.get(&sha).as_deref(), Some(&b"return 1"[..]));
        assert!(!cache.contains(b"short"));
        cache.clear();
        assert!(cache.is_empty());
    }

    #[test]
    fn preloads_are_the_most_recently_used_within_both_bounds() {
        let cache = ScriptCache::default();
        for body in ["return 1", "return 22", "return 333"] {
            cache.remember(&Bytes::from(body));
        }
        cache.get(&sha_of(b"return 1")).expect("remembered");
        let load = |body: &str| encode::encode_request(&[b"SCRIPT", b"LOAD", body.as_bytes()]);
        assert_eq!(
            cache.recent_loads(2, 1000),
            vec![load("return 1"), load("return 333")]
        );
        // "return 1" and "return 333" are 18 bytes: the third would pass 20.
        assert_eq!(
            cache.recent_loads(10, 20),
            vec![load("return 1"), load("return 333")]
        );
        assert!(ScriptCache::default().recent_loads(10, 1000).is_empty());
    }

    #[test]
    fn least_recently_used_goes_first_within_both_bounds() {
        let cache = ScriptCache::with_limits(2, 1000);
        let a = cache.remember(&Bytes::from_static(b"return 'a'"));
        let b = cache.remember(&Bytes::from_static(b"return 'b'"));
        assert!(cache.get(&a).is_some());
        let c = cache.remember(&Bytes::from_static(b"return 'c'"));
        assert!(cache.contains(&a) && cache.contains(&c) && !cache.contains(&b));
        assert_eq!(cache.len(), 2);

        let small = ScriptCache::with_limits(100, 25);
        let x = small.remember(&Bytes::from_static(b"return 'xxxxxxxx'"));
        let y = small.remember(&Bytes::from_static(b"return 'yyyyyyyy'"));
        assert!(!small.contains(&x) && small.contains(&y));
        let huge = small.remember(&Bytes::from(vec![b'-'; 26]));
        assert!(!small.contains(&huge) && small.contains(&y));
    }
}
