//! A live migration as the proxy runs it: the source and target deployments, the mover of
//! keys, what this process knows is moved, and the progress the walker and the clients'
//! commands make. One per process, kept across reloads; the request path asks it which
//! keys a command must move first ([`Migration::to_move`]) and moves them
//! ([`Migration::move_keys`]); the walker ([`super::walker`]) moves the rest.
//!
//! Invariants: a command's keys are moved to done before it runs on the target (so every
//! write lands after the key's move, see `docs/live-migration.md`); once the walker has
//! verified the source empty, [`Migration::is_active`] turns false for good and the
//! source is never consulted again.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::gone::GoneKeys;
use super::mover::{MoveError, MoveSpec};
use super::sides::{Reach, Side};
use super::Outcome;
use crate::config::MigrationConfig;
use crate::migrate::plan::{kind_of, Kind, MessageRules};
use crate::migrate::source::Endpoint;
use crate::migrate::RedisUrl;
use crate::rewrite::{Forward, Layout};

/// How often one key's move is tried before the command that needs it fails: every step
/// may be sent again, and a slot that moved is found again between tries.
const MOVE_ATTEMPTS: u32 = 3;

/// Where the migration is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    /// The walker goes through the source.
    Walking = 0,
    /// The walker is paused; commands still move what they touch.
    Paused = 1,
    /// A pass found the source empty; checking before the end.
    Verifying = 2,
    /// Everything is on the target; the source is no longer consulted.
    Done = 3,
}

impl State {
    fn from_u8(n: u8) -> State {
        match n {
            0 => State::Walking,
            1 => State::Paused,
            2 => State::Verifying,
            _ => State::Done,
        }
    }

    /// The name status reports and metrics label.
    pub fn name(self) -> &'static str {
        match self {
            State::Walking => "walking",
            State::Paused => "paused",
            State::Verifying => "verifying",
            State::Done => "done",
        }
    }
}

/// Counters of the migration's work, read by status and metrics.
#[derive(Debug, Default)]
pub struct Counters {
    /// Keys this process moved because a command touched them.
    pub moved_on_touch: AtomicU64,
    /// Keys this process's walker moved.
    pub moved_by_walker: AtomicU64,
    /// Moves that found the key already moved by another mover, or not on the source.
    pub already_moved: AtomicU64,
    /// Source names the walker has seen (records excluded).
    pub scanned: AtomicU64,
    /// Moves that failed (each is retried: by the command, or by the walker's next pass).
    pub errors: AtomicU64,
    /// Complete passes of the walker over the source.
    pub passes: AtomicU64,
    /// The source's keys when the walker began (its estimate of the work).
    pub source_keys_at_start: AtomicU64,
    /// Walker moves whose value was compared on both sides between seal and finish.
    pub values_checked: AtomicU64,
    /// Of those, the ones whose values differed.
    pub values_differ: AtomicU64,
    /// Walker moves counted towards the next value check.
    pub(super) check_tick: AtomicU64,
    /// Message items the walker met that their chat's log does not list (see `orphans`).
    pub orphan_items: AtomicU64,
}

/// One live migration, shared by every session of the process.
pub struct Migration {
    /// The source's databases with keys, database 0 first, each with its movers.
    pub(super) sides: Vec<Side>,
    pub(super) target: Arc<Endpoint>,
    /// How many databases `SELECT` offers: how stored names are read (`rewrite::database`).
    databases: u32,
    pub(super) layout: Option<Arc<Layout>>,
    pub(super) gone: GoneKeys,
    state: AtomicU8,
    /// The walker's settings (a reload changes them).
    paused: AtomicBool,
    max_keys_per_second: AtomicU64,
    pub(super) batch: usize,
    /// What the walker and the commands did.
    pub counters: Counters,
    pub(super) started: Instant,
    /// When the end was declared: what the rate is measured over from then on.
    pub(super) finished: std::sync::OnceLock<Instant>,
    pub(super) last_error: Mutex<Option<String>>,
    /// Why the end is held (a checked value differed), as this proxy last knew it.
    pub(super) end_held: Mutex<Option<super::verify::Hold>>,
    /// What the end's count check found, once it passed here.
    pub(super) counts: Mutex<Option<String>>,
    /// The layout's message rules, one per prefix (none without a layout).
    pub(super) messages: Vec<crate::migrate::plan::MessageRules>,
    /// The first orphan message items met.
    pub(super) orphan_names: Mutex<Vec<String>>,
    /// The source's size as last looked at (see `progress`): what every proxy left.
    pub(super) source_left: Mutex<super::progress::SourceLeft>,
    /// The layout markers the walker's end writes on the target (one per prefix), and the
    /// layout's name they hold; none without a layout.
    pub(super) markers: Vec<Bytes>,
    pub(super) layout_name: String,
}

impl std::fmt::Debug for Migration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Migration")
            .field("state", &self.state())
            .field("source", &self.sides[0].source)
            .field(
                "databases",
                &self.sides.iter().map(|s| s.db).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Migration {
    /// Connects to the source of `config` (each of its databases with keys, see `sides`)
    /// and to `target` (the proxy's upstream, its seeds with the backend's credentials and
    /// TLS), and loads the move scripts on both. `layout`: the rules naming each key on the
    /// target, when one is configured; `databases`: how many `SELECT` offers;
    /// `read_timeout`: the backend's (`backend.read_timeout_ms`), for both sides, so a hung
    /// source fails the moves waiting on it instead of stalling their commands for good.
    pub async fn connect(
        config: &MigrationConfig,
        target_urls: &[RedisUrl],
        layout: Option<Arc<Layout>>,
        databases: u32,
        read_timeout: Option<Duration>,
    ) -> Result<Migration, MoveError> {
        let source_url = config
            .source_url()
            .map_err(|e| MoveError::Source(e.to_string()))?
            .ok_or_else(|| MoveError::Source("migration.source is not set".into()))?;
        let reach = Reach {
            source: &source_url,
            target: target_urls,
            lease: Duration::from_millis(config.lease_ms),
            read_timeout,
        };
        let (target, sides) = super::sides::connect(&reach, databases, layout.is_some()).await?;
        let markers = layout.as_ref().map_or(Vec::new(), |layout| {
            let prefixes = layout.prefixes().iter();
            prefixes
                .map(|prefix| crate::rewrite::marker_key(prefix))
                .collect()
        });
        let messages = layout.as_ref().map_or(Vec::new(), |layout| {
            let prefixes = layout.prefixes().iter();
            let rules = prefixes.filter_map(|prefix| MessageRules::new(layout, prefix));
            rules.collect()
        });
        let layout_name = layout
            .as_ref()
            .and_then(|layout| layout.layout_name())
            .unwrap_or(crate::rewrite::CLUSTER_V1)
            .to_owned();
        let migration = Migration {
            sides,
            target,
            databases,
            layout,
            gone: GoneKeys::default(),
            state: AtomicU8::new(State::Walking as u8),
            paused: AtomicBool::new(false),
            max_keys_per_second: AtomicU64::new(0),
            batch: config.batch,
            counters: Counters::default(),
            started: Instant::now(),
            finished: std::sync::OnceLock::new(),
            last_error: Mutex::new(None),
            end_held: Mutex::new(None),
            counts: Mutex::new(None),
            messages,
            orphan_names: Mutex::new(Vec::new()),
            source_left: Mutex::default(),
            markers,
            layout_name,
        };
        migration.configure(config);
        Ok(migration)
    }

    /// Takes the walker's settings a reload may change: its pace and whether it is paused.
    pub fn configure(&self, config: &MigrationConfig) {
        let (rate, paused) = config.walker();
        self.max_keys_per_second.store(rate, Ordering::Relaxed);
        self.set_paused(paused);
    }

    /// Pauses or resumes the walker.
    pub fn set_paused(&self, paused: bool) {
        self.paused.store(paused, Ordering::Relaxed);
        let (from, to) = match paused {
            true => (State::Walking, State::Paused),
            false => (State::Paused, State::Walking),
        };
        let _ =
            self.state
                .compare_exchange(from as u8, to as u8, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Whether the walker is told to pause.
    pub fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// The walker's pace, keys per second (0: no limit).
    pub fn max_keys_per_second(&self) -> u64 {
        self.max_keys_per_second.load(Ordering::Relaxed)
    }

    /// Where the migration is.
    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    pub(super) fn set_state(&self, state: State) {
        self.state.store(state as u8, Ordering::Release);
    }

    /// Whether commands must still move their keys first: until the end is verified.
    pub fn is_active(&self) -> bool {
        self.state() != State::Done
    }

    /// The keys among `keys` (client names) this process does not know are moved: those a
    /// command must move before it runs. Empty once the migration is done.
    pub fn to_move<'k>(&self, keys: impl IntoIterator<Item = &'k Bytes>) -> Vec<Bytes> {
        if !self.is_active() {
            return Vec::new();
        }
        let mut out: Vec<Bytes> = Vec::new();
        for key in keys {
            if !self.gone.contains(key) && !out.contains(key) {
                out.push(key.clone());
            }
        }
        out
    }

    /// Whether any of `keys` must be moved before a command on them runs.
    pub fn must_move<'k>(&self, mut keys: impl Iterator<Item = &'k Bytes>) -> bool {
        self.is_active() && keys.any(|key| !self.gone.contains(key))
    }

    /// Moves every one of `keys` (client names) to done, all at once; the first error
    /// after [`MOVE_ATTEMPTS`] tries of a key.
    pub async fn move_keys(&self, keys: &[Bytes]) -> Result<(), MoveError> {
        let moves = keys.iter().map(|key| self.move_key(key, Source::Touch));
        for result in futures_util::future::join_all(moves).await {
            result?;
        }
        Ok(())
    }

    /// Moves `key` (a client name) to done, trying again after a failure; counts it as
    /// `by` moved it.
    pub(super) async fn move_key(&self, key: &Bytes, by: Source) -> Result<(), MoveError> {
        if self.gone.contains(key) {
            return Ok(());
        }
        let (side, name) = self.side_of(key);
        let spec = self.spec_in(side, name);
        let side = &self.sides[side];
        let mut attempt = 0;
        loop {
            attempt += 1;
            match side.mover.run(&spec).await {
                Ok(outcome) => {
                    self.note_moved(key, outcome, by);
                    return Ok(());
                }
                Err(e) => {
                    self.note_failed(&e);
                    if attempt >= MOVE_ATTEMPTS {
                        return Err(e);
                    }
                    // A slot of either side may have moved: read the maps again.
                    let _ = side.source.refresh().await;
                    let _ = self.target.refresh().await;
                }
            }
        }
    }

    /// Counts a finished move of `key` and remembers the key as moved.
    pub(super) fn note_moved(&self, key: &Bytes, outcome: Outcome, by: Source) {
        self.count(outcome, by);
        self.gone.insert(key);
    }

    /// Counts a failed move and keeps its error for the status.
    pub(super) fn note_failed(&self, error: &MoveError) {
        self.counters.errors.fetch_add(1, Ordering::Relaxed);
        self.note_error(error);
    }

    fn count(&self, outcome: Outcome, by: Source) {
        let counter = match (outcome, by) {
            (Outcome::Moved, Source::Touch) => &self.counters.moved_on_touch,
            (Outcome::Moved, Source::Walker) => &self.counters.moved_by_walker,
            _ => &self.counters.already_moved,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn note_error(&self, error: &dyn std::fmt::Display) {
        tracing::warn!(error = %error, "live migration: a move failed; it is retried");
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(error.to_string());
    }

    /// The side a stored key (as commands name it) is on, and its name there: `__db<n>:k`
    /// is `k` of database `n` when the source has keys in `n`; any other name is database
    /// 0's own (a name of the form `__db<n>:` there is reserved, as `rewrite::database`
    /// says).
    pub(super) fn side_of(&self, key: &Bytes) -> (usize, Bytes) {
        if self.sides.len() > 1 {
            let (db, name) = crate::rewrite::database::split(key, self.databases);
            if let Some(side) = self.sides.iter().position(|side| db > 0 && side.db == db) {
                return (side, key.slice_ref(name));
            }
        }
        (0, key.clone())
    }

    /// The move of stored key `key` (see [`Migration::side_of`]).
    pub fn spec_for(&self, key: &Bytes) -> MoveSpec {
        let (side, name) = self.side_of(key);
        self.spec_in(side, name)
    }

    /// The move of `name` of side `side`: in database 0, its target name, index entry and
    /// kind by the layout (as the layout stage names it in requests), or the same name
    /// without one; in database `n`, the name `SELECT n` stores it under.
    pub(super) fn spec_in(&self, side: usize, key: Bytes) -> MoveSpec {
        let side = &self.sides[side];
        if side.db != 0 {
            return MoveSpec {
                to: side.stored(&key),
                ..MoveSpec::same_name(key)
            };
        }
        let Some(layout) = &self.layout else {
            return MoveSpec::same_name(key);
        };
        match layout.forward_shared(&key) {
            Forward::Rewritten(rewritten) => {
                let family = layout.family_name(rewritten.family);
                let kind = kind_of(family, &key, &rewritten.key, rewritten.index.is_some());
                MoveSpec {
                    from: key.clone(),
                    to: rewritten.key,
                    index: rewritten.index,
                    counter: kind == Kind::Counter,
                }
            }
            Forward::Outside | Forward::Unmatched { .. } => MoveSpec::same_name(key.clone()),
        }
    }
}

/// Who asked for a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Source {
    /// A client's command touched the key.
    Touch,
    /// The background walker came across it.
    Walker,
}

impl Migration {
    /// The precondition of the mode (`docs/live-migration.md`): the target holds no key of
    /// the keyspace that no move wrote, else a read of the target would show that copy over
    /// the source's value. Checked on the first `SCAN` page of each of the source's
    /// databases: a target already holding a copy (an earlier offline copy kept its source)
    /// shows there at once.
    pub async fn check_target(&self) -> Result<(), MoveError> {
        for (i, side) in self.sides.iter().enumerate() {
            let mut walk = side.source.walk(b"*", self.batch);
            let page = walk
                .next_page()
                .await
                .map_err(|e| MoveError::Source(e.to_string()))?
                .unwrap_or_default();
            let specs: Vec<MoveSpec> = page
                .iter()
                .filter(|name| !super::names::is_record(name))
                .map(|name| self.spec_in(i, name.clone()))
                .collect();
            let checks = specs.iter().map(|spec| self.foreign_copy(spec));
            for found in futures_util::future::join_all(checks).await {
                if let Some(spec) = found? {
                    return Err(MoveError::Target(format!(
                        "the target already holds {} (the source's {}), which no move wrote: \
                         empty the target of the migrated keyspace before a live migration",
                        spec.to.escape_ascii(),
                        spec.from.escape_ascii()
                    )));
                }
            }
        }
        Ok(())
    }

    /// `Some(spec)` when the target holds `spec`'s key and its move is not recorded.
    async fn foreign_copy<'s>(
        &self,
        spec: &'s MoveSpec,
    ) -> Result<Option<&'s MoveSpec>, MoveError> {
        let target_error = |e: crate::migrate::MigrateError| MoveError::Target(e.to_string());
        let to = &spec.to;
        let exists = self
            .target
            .call_key(to, &[b"EXISTS", to])
            .await
            .map_err(target_error)?;
        if exists.int() != Some(1) {
            return Ok(None);
        }
        let moved = super::mover::move_recorded(&self.target, to)
            .await
            .map_err(target_error)?;
        Ok((!moved).then_some(spec))
    }
}
