//! WATCH outside MULTI: which backend connections hold the client's watched keys.
//!
//! Keys of one slot are watched on one connection of the client's own to the slot's
//! master, the connection its EXEC then runs on, so the master's own check applies. Under
//! `cross_slot_transactions: refuse` every watched key must be in one slot (`-CROSSSLOT`
//! otherwise). Under `split` a WATCH may span slots: each slot gets such a connection
//! (a part), later WATCHes of a slot join its part, and EXEC checks every part before any
//! slot runs (see `upstream::watch_check`). Dropping a part closes its connection, which
//! ends its watch on the server: so UNWATCH, DISCARD, RESET, EXEC and a client that goes
//! away clear the watches on every part, as on Redis.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::future::{join_all, BoxFuture};
use futures_util::FutureExt;
use smallvec::SmallVec;

use crate::config::CrossSlotTransactions;
use crate::dispatch::{Proxy, WatchPin};
use crate::protocol::{encode, Proto, Request};
use crate::reply;
use crate::route::key_slot;
use crate::upstream::watch_check::WatchedSlot;

use super::super::step::Step;
use super::{Transaction, OK};

/// Keys watched since the first WATCH, by slot (one part under `refuse`).
#[derive(Default)]
pub(super) struct Watch {
    pub(super) parts: SmallVec<[WatchPart; 1]>,
}

/// The keys watched in one slot and the connection holding them.
pub(super) struct WatchPart {
    pub(super) slot: u16,
    pub(super) first_key: Bytes,
    /// Every key watched in the slot (cluster names), for EXEC's check across slots.
    keys: Vec<Bytes>,
    /// Filled in by the WATCH's future once the backend accepted it; `None` if it did not.
    pin: Arc<Mutex<PinState>>,
}

#[derive(Default)]
struct PinState {
    pin: Option<WatchPin>,
    /// A later WATCH found the slot moved: the watch can no longer be trusted.
    broken: bool,
}

impl Watch {
    /// The slot of the first WATCH: the slot a transaction under `refuse` is bound to.
    pub(super) fn first_slot(&self) -> Option<u16> {
        self.parts.first().map(|part| part.slot)
    }

    /// Whether the watched slots and the commands' `slots` are more than one slot: the
    /// transaction then runs split, with every watch checked first.
    pub(super) fn spans_slots_with(&self, slots: &[u16]) -> bool {
        self.parts.len() > 1 || slots.iter().any(|&slot| Some(slot) != self.first_slot())
    }

    /// The pin of a watch in one slot, for the block on that slot (`None` when
    /// the first WATCH failed); `Err(())` when a later WATCH found the watch broken.
    pub(super) fn single_pin(&self) -> Result<Option<WatchPin>, ()> {
        let Some(part) = self.parts.first() else {
            return Ok(None);
        };
        let state = lock(&part.pin);
        if state.broken {
            return Err(());
        }
        Ok(state.pin.clone())
    }

    /// Every slot's watching connection, for EXEC's check across slots; `None` when one
    /// of them can no longer be trusted (its WATCH failed, or a later one found it
    /// broken): EXEC then answers null.
    pub(super) fn watched_slots(&self) -> Option<Vec<WatchedSlot>> {
        self.parts
            .iter()
            .map(|part| {
                let state = lock(&part.pin);
                let pin = state.pin.clone().filter(|_| !state.broken)?;
                Some(WatchedSlot {
                    slot: part.slot,
                    pin,
                    keys: part.keys.clone(),
                })
            })
            .collect()
    }
}

impl Transaction {
    /// WATCH outside MULTI.
    pub(super) fn watch(&mut self, proxy: &Arc<Proxy>, proto: Proto, request: &Request) -> Step {
        // During a live migration the keys move first: a move after the WATCH would touch
        // them on the target and fail the transaction for nothing.
        let spec = proxy.commands.lookup(&request.args);
        match (
            self.watch_keys(proxy, proto, request),
            proxy.moves_of(spec, &request.args),
        ) {
            (Step::Alone(run), Some(moves)) => Step::Alone(moves.before(run).boxed()),
            (step, _) => step,
        }
    }

    fn watch_keys(&mut self, proxy: &Arc<Proxy>, proto: Proto, request: &Request) -> Step {
        // Under a layout the cluster names are watched (and decide the slot).
        let rewritten = match (&proxy.layout, proxy.commands.lookup(&request.args)) {
            (Some(active), Some(spec)) => match active.rewrite_request(spec, request.clone()) {
                Ok(rewritten) => rewritten.request,
                Err(refusal) => return Step::Reply(refusal),
            },
            _ => request.clone(),
        };
        let request = &rewritten;
        let keys = &request.args[1..];
        let named: Vec<(&[u8], u16)> = keys.iter().map(|k| (&k[..], key_slot(k))).collect();
        let slot = named[0].1;
        let one_slot = named.iter().all(|&(_, s)| s == slot);
        let same_part = self
            .watch
            .as_ref()
            .is_none_or(|watch| watch.parts.iter().all(|part| part.slot == slot));
        let split = proxy.config.cross_slot_transactions == CrossSlotTransactions::Split;
        if split && !(one_slot && same_part) {
            return self.watch_across_slots(proxy, proto, keys);
        }
        if !one_slot {
            return Step::Reply(reply::cross_slot(&named));
        }
        self.watch_one_slot(proxy, proto, request, slot)
    }

    /// WATCH of keys in `slot`, the only slot watched: one connection for every key.
    fn watch_one_slot(
        &mut self,
        proxy: &Arc<Proxy>,
        proto: Proto,
        request: &Request,
        slot: u16,
    ) -> Step {
        let keys = &request.args[1..];
        if let Some(part) = self.watch.as_mut().and_then(|w| w.parts.first_mut()) {
            if part.slot != slot {
                let mut all = vec![(&part.first_key[..], part.slot)];
                all.extend(keys.iter().map(|k| (&k[..], slot)));
                return Step::Reply(reply::cross_slot(&all));
            }
            let existing = lock(&part.pin).pin.clone();
            if let Some(pin) = existing {
                // Later WATCHes join the same connection, so one EXEC checks them all.
                part.keys.extend(keys.iter().cloned());
                return Step::Alone(watch_again(pin, part.pin.clone(), request.raw.clone()));
            }
        }
        let part = WatchPart::new(slot, keys.to_vec());
        let cell = part.pin.clone();
        self.watch = Some(Box::new(Watch {
            parts: smallvec::smallvec![part],
        }));
        Step::Alone(watch_new(
            proxy.clone(),
            slot,
            request.raw.clone(),
            proto,
            cell,
        ))
    }

    /// WATCH under `split` whose keys, with the earlier WATCHes', span slots: each slot's
    /// keys go to that slot's part, all at once. Answers `+OK`, or the first error.
    fn watch_across_slots(&mut self, proxy: &Arc<Proxy>, proto: Proto, keys: &[Bytes]) -> Step {
        let mut by_slot: Vec<(u16, Vec<Bytes>)> = Vec::new();
        for key in keys {
            let slot = key_slot(key);
            match by_slot.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, slot_keys)) => slot_keys.push(key.clone()),
                None => by_slot.push((slot, vec![key.clone()])),
            }
        }
        let watch = self.watch.get_or_insert_with(Box::default);
        let mut calls: Vec<BoxFuture<'static, Bytes>> = Vec::with_capacity(by_slot.len());
        for (slot, slot_keys) in by_slot {
            let mut args: Vec<&[u8]> = vec![b"WATCH"];
            args.extend(slot_keys.iter().map(|key| &key[..]));
            let request = encode::encode_request(&args);
            match watch.parts.iter_mut().find(|part| part.slot == slot) {
                Some(part) => {
                    part.keys.extend(slot_keys);
                    let existing = lock(&part.pin).pin.clone();
                    match existing {
                        Some(pin) => calls.push(watch_again(pin, part.pin.clone(), request)),
                        // Its first WATCH failed: EXEC answers null (see `watched_slots`).
                        None => lock(&part.pin).broken = true,
                    }
                }
                None => {
                    let part = WatchPart::new(slot, slot_keys);
                    let cell = part.pin.clone();
                    watch.parts.push(part);
                    calls.push(watch_new(proxy.clone(), slot, request, proto, cell));
                }
            }
        }
        Step::Alone(
            async move {
                let frames = join_all(calls).await;
                frames
                    .into_iter()
                    .find(|frame| frame.first() == Some(&b'-'))
                    .unwrap_or_else(|| Bytes::from_static(OK))
            }
            .boxed(),
        )
    }
}

impl WatchPart {
    fn new(slot: u16, keys: Vec<Bytes>) -> WatchPart {
        WatchPart {
            slot,
            first_key: keys[0].clone(),
            keys,
            pin: Arc::new(Mutex::new(PinState::default())),
        }
    }
}

/// A first WATCH of a slot, on a new connection of the client's own; the pin goes to
/// `cell` once the master accepted it.
fn watch_new(
    proxy: Arc<Proxy>,
    slot: u16,
    request: Bytes,
    proto: Proto,
    cell: Arc<Mutex<PinState>>,
) -> BoxFuture<'static, Bytes> {
    async move {
        let (frame, pin) = proxy.upstream.watch(slot, request, proto).await;
        lock(&cell).pin = pin;
        frame
    }
    .boxed()
}

/// A later WATCH of a slot, on the connection holding the slot's earlier ones.
fn watch_again(
    pin: WatchPin,
    cell: Arc<Mutex<PinState>>,
    request: Bytes,
) -> BoxFuture<'static, Bytes> {
    async move {
        match pin.watch_again(request).await {
            Some(frame) => frame,
            // EXEC fails as after a change to a watched key, which a client retries; a
            // single Redis never refuses a WATCH.
            None => {
                lock(&cell).broken = true;
                Bytes::from_static(OK)
            }
        }
    }
    .boxed()
}

fn lock(cell: &Mutex<PinState>) -> std::sync::MutexGuard<'_, PinState> {
    cell.lock().unwrap_or_else(|e| e.into_inner())
}
