//! Live migration: how a keyspace moves from a source deployment to the proxy's upstream
//! while clients keep using it through any number of proxies. The claim protocol moves one
//! key ([`claim`], [`mover`]); a [`Migration`] is the mode the proxy runs in (commands move
//! the keys they touch first); the [`walker`] moves the rest and ends the migration; a
//! [`Status`] is its progress. `docs/live-migration.md` holds the whole design and its
//! argument.
//!
//! # Invariants
//!
//! - A key is authoritative in exactly one place: on the source until its move finishes
//!   (the source key is deleted), on the target from then on. Proxies never write the
//!   source; they only read it, claim on it and finish moves on it.
//! - A move is claim (source), seal (target), finish (source), see [`claim`]. The claim is
//!   a record in Redis beside the key ([`names::claim_key`]) with a token and a deadline
//!   on the source's clock, so movers in any number of processes exclude one another, and
//!   one that dies is taken over once its deadline passes.
//! - The target is written by a move at most once per key: the seal sets the key's field
//!   in its slot's moved-fence ([`names::fence_key`]) in the same script as the write and
//!   refuses when it is set. A mover that was slow, taken over or retried can therefore
//!   never put a value read before the move over a write made after it, nor bring back a
//!   key deleted after it. Leases only decide who may try; the fence decides what lands.
//! - The fences are compacted to one field per slot ([`names::EVERY_KEY_MOVED`], refusing
//!   every seal of the slot) only after a whole pass found the source empty: no key's first
//!   seal can still come then.
//! - The source key is deleted only after a seal answered, so the target holds the key
//!   (or, when it expired on the source, holds nothing) before the source lets go.
//! - A write runs on the target only once a move of its key has reported done (the source
//!   holds neither key nor claim). A read asks the target, then the source, then the
//!   target again (the move may have finished between the first two).
//! - Values travel with the offline copy's rules (`migrate`'s restore-and-index and
//!   set-if-greater scripts): TTLs kept, index entries rebuilt, counters never lowered.

mod batch;
pub mod claim;
mod counts;
mod gone;
mod listing;
pub mod metrics;
mod migration;
#[cfg(test)]
mod model;
pub mod mover;
pub mod names;
mod orphans;
pub mod progress;
mod sides;
mod status;
mod verify;
pub mod walker;

pub use claim::{Claim, Finish, KeyMove, Outcome, Phase, Seal, Value};
pub use listing::SourcePage;
pub use migration::{Counters, Migration, State};
pub use mover::{MoveError, MoveSpec, Mover};
pub use status::{Status, STATES};
pub use verify::Check;
