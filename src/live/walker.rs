//! The background walker of a live migration: it goes through the source with `SCAN`,
//! moves every key no command has moved yet (at most `max_keys_per_second`), finishes the
//! moves of claims left by a dead mover, and, when a pass finds the source empty, no checked
//! value differed (`verify`) and every key at the start is accounted for (`counts`), checks
//! a sample of its moves on the target, writes the
//! layout marker, compacts the target's moved-fences to one field per slot and ends the
//! migration.
//!
//! Invariants: the walker moves keys only with [`Migration::move_key`], the same moves the
//! commands make, so it needs no exclusion of its own; the end is declared only after a
//! whole pass found neither a key nor a claim on the source (the source never gains one,
//! so it stays empty), and a failed check or marker write leaves the migration active
//! for the next pass to try again.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;

use super::migration::{Migration, State};
use super::mover::move_recorded;
use super::names::{claimed_key, is_record};
use crate::migrate::source::Reply;
use crate::route::SLOT_COUNT;

/// Keys moved in one batch (one claim and one finish call to the source, see `batch`).
const BATCH: usize = 64;
/// Batches the walker runs at once: enough to hide the round trips of a batch behind one
/// another on loopback and across a network alike.
const CONCURRENT_BATCHES: usize = 4;
/// Slots whose fences are compacted at once at the end.
const COMPACTIONS_AT_ONCE: usize = 32;
/// Moves checked on the target before the end.
const SAMPLE: usize = 64;
/// How long the walker sleeps while paused, or after a pass failed, before looking again.
const IDLE: Duration = Duration::from_millis(200);
/// How often a paused walker looks whether other proxies' walkers emptied the source.
const PAUSED_LOOK: Duration = Duration::from_secs(2);

/// Runs the walker until the migration is done; spawned once per process.
pub async fn run(migration: Arc<Migration>) {
    // The estimate of the work (`source_keys_at_start`) is the first look of `progress::watch`.
    let mut sample: VecDeque<Bytes> = VecDeque::with_capacity(SAMPLE);
    while migration.is_active() {
        let walked = match migration.is_paused() {
            // Paused: the walk of another proxy may empty the source meanwhile.
            true => paused_look(&migration).await,
            false => {
                let walked = pass(&migration, &mut sample).await;
                migration.counters.passes.fetch_add(1, Ordering::Relaxed);
                walked
            }
        };
        match walked {
            Ok(0) => match finish(&migration, &sample).await {
                Ok(true) => {
                    tracing::info!("live migration done: the source is empty, the marker set");
                    return;
                }
                // Held by a value that differed: an operator's resume releases it.
                Ok(false) => tokio::time::sleep(PAUSED_LOOK).await,
                Err(e) => {
                    migration.note_error(&e);
                    tokio::time::sleep(IDLE).await;
                }
            },
            Ok(_) => {}
            Err(e) => {
                migration.note_error(&e);
                tokio::time::sleep(IDLE).await;
            }
        }
    }
}

/// While paused, a look every [`PAUSED_LOOK`] at how many names (keys and claims) the
/// source held at `progress::watch`'s last look: 0 ends the migration here too (the source
/// never gains a name, so a 0 stays 0). Not looked at yet, or resumed meanwhile: the next
/// pass decides.
async fn paused_look(migration: &Migration) -> Result<u64, String> {
    let deadline = Instant::now() + PAUSED_LOOK;
    while migration.is_paused() && Instant::now() < deadline {
        tokio::time::sleep(IDLE).await;
    }
    match migration.is_paused() {
        true => Ok(migration.source_left().0.unwrap_or(u64::MAX)),
        false => Ok(u64::MAX),
    }
}

/// One pass over the source, each of its databases in turn: every key and orphan claim met
/// is moved. Returns how many source names (keys and claims) it met.
async fn pass(migration: &Migration, sample: &mut VecDeque<Bytes>) -> Result<u64, String> {
    let mut met = 0u64;
    let mut paced = Pacer::new();
    for side in 0..migration.sides.len() {
        met += pass_side(migration, side, sample, &mut paced).await?;
    }
    Ok(met)
}

/// One pass over side `side` of the source (see [`pass`]). The sample keeps the target
/// names of the last moves.
async fn pass_side(
    migration: &Migration,
    side: usize,
    sample: &mut VecDeque<Bytes>,
    paced: &mut Pacer,
) -> Result<u64, String> {
    let source = &migration.sides[side];
    let mut walk = source.source.walk(b"*", migration.batch);
    let mut met = 0u64;
    while let Some(page) = walk.next_page().await.map_err(|e| e.to_string())? {
        while migration.is_paused() {
            tokio::time::sleep(IDLE).await;
        }
        let keys: Vec<Bytes> = page
            .iter()
            .filter_map(|name| match is_record(name) {
                // A claim left by a mover that died: its move is finished like any other.
                true => claimed_key(name).map(Bytes::copy_from_slice),
                false => Some(name.clone()),
            })
            .collect();
        let count = keys.len() as u64;
        met += count;
        let seen = page.iter().filter(|name| !is_record(name)).count() as u64;
        migration
            .counters
            .scanned
            .fetch_add(seen, Ordering::Relaxed);
        let unmoved: Vec<Bytes> = keys
            .into_iter()
            .filter(|key| !migration.gone.contains(&source.stored(key)))
            .filter(|key| side != 0 || !reserved(migration, key))
            .collect();
        if side == 0 {
            migration.note_orphans(&unmoved).await;
        }
        let chunks: Vec<Vec<Bytes>> = unmoved.chunks(BATCH).map(<[Bytes]>::to_vec).collect();
        let moves = futures_util::stream::iter(chunks)
            .map(|chunk| migration.move_batch(side, chunk))
            .buffer_unordered(CONCURRENT_BATCHES)
            .flat_map(futures_util::stream::iter);
        futures_util::pin_mut!(moves);
        while let Some((to, result)) = moves.next().await {
            // A failed move is counted and noted by the move; the next pass meets it again.
            if result.is_ok() {
                if sample.len() == SAMPLE {
                    sample.pop_front();
                }
                sample.push_back(to);
            }
        }
        paced.wait(count, migration.max_keys_per_second()).await;
    }
    Ok(met)
}

/// Whether database 0's `key` has a name reserved for another database of the source
/// (`__db<n>:...`, see `sides`): moved, it would land on that database's key of the same
/// name. It stays on the source, and the migration cannot end, until an operator renames it.
fn reserved(migration: &Migration, key: &Bytes) -> bool {
    let (side, _) = migration.side_of(key);
    if side != 0 {
        migration.note_error(&format!(
            "the source's database 0 holds {}, a name reserved for database {}'s keys: \
             rename it on the source",
            key.escape_ascii(),
            migration.sides[side].db
        ));
    }
    side != 0
}

/// The end: unless a checked value differed or the counts fall short (`false`: the end is
/// held, see `verify` and `counts`), the sample's moves are checked on the target (each
/// key's fence is set), the layout markers are written, the fences compacted, and the
/// migration is declared done.
async fn finish(migration: &Migration, sample: &VecDeque<Bytes>) -> Result<bool, String> {
    if migration.end_hold().await?.is_some() {
        return Ok(false);
    }
    if migration.counts_hold_the_end().await? {
        return Ok(false);
    }
    migration.set_state(State::Verifying);
    let ended = async {
        check_sample(migration, sample).await?;
        write_marker(migration).await?;
        compact_fences(migration).await
    };
    if let Err(e) = ended.await {
        let back = match migration.is_paused() {
            true => State::Paused,
            false => State::Walking,
        };
        migration.set_state(back);
        return Err(e);
    }
    let _ = migration.finished.set(Instant::now());
    migration.set_state(State::Done);
    migration.gone.clear();
    Ok(true)
}

/// Each sampled move (its key's name on the target) is recorded on the target: its fence
/// field is set.
async fn check_sample(migration: &Migration, sample: &VecDeque<Bytes>) -> Result<(), String> {
    for to in sample {
        let recorded = move_recorded(&migration.target, to)
            .await
            .map_err(|e| format!("checking the move of {}: {e}", to.escape_ascii()))?;
        if !recorded {
            return Err(format!(
                "the move of {} is not recorded on the target",
                to.escape_ascii()
            ));
        }
    }
    Ok(())
}

/// Compacts every slot's moved-fence on the target (`compact.lua`): after a whole pass found
/// the source empty, a field per moved key gives way to one per slot, which refuses every
/// later seal as they did. Every proxy's walker does it at its end; a second time changes
/// nothing.
async fn compact_fences(migration: &Migration) -> Result<(), String> {
    let compacted = futures_util::stream::iter(0..SLOT_COUNT as u16)
        .map(|slot| migration.sides[0].walker.compact_fence(slot))
        .buffer_unordered(COMPACTIONS_AT_ONCE)
        .fold(Ok(0u64), |total, one| async move {
            match (total, one) {
                (Ok(total), Ok(had)) => Ok(total + u64::from(had)),
                (Err(e), _) => Err(e),
                (_, Err(e)) => Err(format!("compacting the moved-fences: {e}")),
            }
        })
        .await?;
    tracing::info!(slots = compacted, "live migration: moved-fences compacted");
    Ok(())
}

/// Writes the layout marker of every prefix on the target, when a layout is configured.
async fn write_marker(migration: &Migration) -> Result<(), String> {
    let value = migration.layout_name.as_bytes();
    for key in &migration.markers {
        let set: &[&[u8]] = &[b"SET", key, value];
        match migration.target.call_key(key, set).await {
            Ok(Reply::Data(_)) => {}
            Ok(other) => return Err(format!("SET {}: {other:?}", key.escape_ascii())),
            Err(e) => return Err(format!("SET {}: {e}", key.escape_ascii())),
        }
    }
    Ok(())
}

/// Keeps a walk at most at a given pace, counted from the pass's start.
struct Pacer {
    since: Instant,
    done: u64,
}

impl Pacer {
    fn new() -> Pacer {
        Pacer {
            since: Instant::now(),
            done: 0,
        }
    }

    /// Notes `moved` more keys and sleeps until `rate` keys per second allows the next.
    async fn wait(&mut self, moved: u64, rate: u64) {
        self.done += moved;
        if rate == 0 {
            return;
        }
        let due = Duration::from_secs_f64(self.done as f64 / rate as f64);
        if let Some(ahead) = due.checked_sub(self.since.elapsed()) {
            tokio::time::sleep(ahead).await;
        }
    }
}
