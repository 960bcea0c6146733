//! Flow control: a client's requests are forwarded only while what it owes stays under its
//! own budget, and what every client owes together stays under the process's.
//!
//! What a client owes is what it has asked for and not yet read: the replies the proxy holds
//! for it (written to no socket yet, or waiting for earlier replies) plus an estimate of the
//! replies of its requests still in flight, each counted as large as the client's recent
//! replies ([`ReplyEstimate`]). Redis answers a pipelined GET of a 1 MB value with 1 MB, so a
//! client that pipelines a hundred of them and never reads would otherwise have the master
//! write 100 MB onto the connection every other client of that master shares, and those
//! clients' replies would wait behind it.
//!
//! Invariants:
//! - Backpressure goes to the client that causes it. A session whose gate is closed stops
//!   decoding, and past one read buffer of input stops reading its socket, so TCP holds that
//!   client back. A node connection never waits for a client: its reader hands every reply
//!   on at once.
//! - A client that owes nothing may always send one request, so a client that reads its
//!   replies is never stalled by its own budget, however large its replies are.
//! - A client whose replies are not known yet (a new connection) has one request in flight
//!   until its first reply, and the whole process has a window of such first requests in
//!   flight: [`PROBATION`] to begin with, one more each time a first reply comes back small
//!   (so it doubles every round trip while new clients ask for small values, as TCP's slow
//!   start), back to [`PROBATION`] at the first large one, and never more than the in-flight
//!   share of the budget counted at [`FIRST_REPLY`] each (1,024 at the default budget). A
//!   thousand new clients each asking for a large value at once send two at a time, unless
//!   small first replies opened the window just before (then up to the window, until the
//!   first large reply comes back), and a fleet of thousands of bots that connect at once
//!   passes within a few round trips.
//! - New clients waiting for a probation place get one in the order they began to wait: a
//!   freed place is handed to the longest waiting at once ([`SharedBudget::place_freed`]),
//!   and a client that arrives later takes a place only while none waits.
//! - Over the process budget, only clients that owe little ([`SMALL`]) and whose requests
//!   are small go on; the others wait until the total falls below the budget
//!   ([`SharedBudget::freed`]). The total is the sum of what each session last charged;
//!   a client that owes no more than [`SMALL`] charges nothing.

use std::sync::atomic::{AtomicUsize, Ordering};

use metrics::Gauge;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;

/// What a client may owe and still send requests while the process is over its budget:
/// the small replies of an ordinary pipeline (16 KiB is a pipeline of a few hundred short
/// replies), so a well-behaved client never waits for the clients that do not read.
pub const SMALL: usize = 16 * 1024;

/// First requests of new clients (whose reply sizes are unknown) in flight at once, for the
/// whole process, to begin with and after a first reply came back large: a burst of new
/// clients each asking for a large value sends at most this many at a time.
pub const PROBATION: usize = 2;

/// The widest the probation window opens without a process budget (`max_buffered_bytes: 0`);
/// with one, the window is its in-flight share counted at [`FIRST_REPLY`] per first request.
const MAX_PROBATION: usize = 4096;

/// What the probation window counts a first request as, once first replies came back small:
/// a fleet's first replies are mostly far smaller (an OK, a counter, a short value), and the
/// first large one closes the window. Counted at [`SMALL`], the default budget let 64 first
/// requests go at a time, and 5,000 bots connecting at once waited up to seconds for theirs.
const FIRST_REPLY: usize = 1024;

/// The part of the process budget that replies still due from the masters may take: a
/// request sent now waits behind at most this much on its master's connection (plus the
/// probation requests), whatever the other clients asked for.
const IN_FLIGHT_SHARE: usize = 64;

/// What every client owes together, against the process-wide `max_buffered_bytes`.
pub struct SharedBudget {
    owed: AtomicUsize,
    /// The part of `owed` that is replies still due (estimated).
    in_flight: AtomicUsize,
    /// 0: no limit.
    limit: AtomicUsize,
    /// First requests of new clients in flight (see [`PROBATION`]).
    unproven: AtomicUsize,
    /// How many of those may be in flight now: the probation window.
    places: AtomicUsize,
    /// New clients waiting for a probation place now.
    waiting_for_place: AtomicUsize,
    /// Of those, how many were handed a freed place and have not run since: the places
    /// kept for them.
    called: AtomicUsize,
    place_freed: Notify,
    /// Clients whose gate is closed now.
    paused: AtomicUsize,
    freed: Notify,
    owed_gauge: Gauge,
    paused_gauge: Gauge,
}

impl std::fmt::Debug for SharedBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedBudget")
            .field("owed", &self.owed())
            .field("limit", &self.limit.load(Ordering::Relaxed))
            .field("paused", &self.paused())
            .finish_non_exhaustive()
    }
}

impl Default for SharedBudget {
    fn default() -> Self {
        SharedBudget {
            owed: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            limit: AtomicUsize::new(0),
            unproven: AtomicUsize::new(0),
            places: AtomicUsize::new(PROBATION),
            waiting_for_place: AtomicUsize::new(0),
            called: AtomicUsize::new(0),
            place_freed: Notify::new(),
            paused: AtomicUsize::new(0),
            freed: Notify::new(),
            owed_gauge: crate::metrics::buffered_bytes(),
            paused_gauge: crate::metrics::flow_paused_clients(),
        }
    }
}

impl SharedBudget {
    /// Sets the budget (`max_buffered_bytes`; 0: none), at start and on reload.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
        crate::metrics::max_buffered_bytes(limit);
        self.freed.notify_waiters();
    }

    /// What every client owes now, in bytes.
    pub fn owed(&self) -> usize {
        self.owed.load(Ordering::Relaxed)
    }

    /// Clients whose gate is closed now.
    pub fn paused(&self) -> usize {
        self.paused.load(Ordering::Relaxed)
    }

    /// Whether the clients together owe the whole budget, or the replies due take their
    /// whole share of it.
    fn is_spent(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        limit > 0
            && (self.owed() >= limit
                || self.in_flight.load(Ordering::Relaxed) >= limit / IN_FLIGHT_SHARE)
    }

    /// Whether a client waiting on [`SharedBudget::freed`] should look again.
    pub fn has_room(&self) -> bool {
        !self.is_spent()
    }

    /// Whether a new client waiting on [`SharedBudget::place_freed`] should look again.
    pub fn has_place(&self) -> bool {
        !self.probation_full()
    }

    /// How many first requests of new clients may be in flight now (see [`PROBATION`]).
    pub fn probation_places(&self) -> usize {
        self.places.load(Ordering::Relaxed)
    }

    /// The widest the probation window may open under the current budget.
    fn widest_window(&self) -> usize {
        match self.limit.load(Ordering::Relaxed) {
            0 => MAX_PROBATION,
            limit => (limit / IN_FLIGHT_SHARE / FIRST_REPLY).clamp(PROBATION, MAX_PROBATION),
        }
    }

    /// Resolves once the total falls below the budget (it counts from its creation, so
    /// create it before looking at [`SharedBudget::has_room`]).
    /// Waiters are woken one at a time, in turn: each passes the turn on once it has sent
    /// what it could ([`ClientFlow::woken`]), so a budget that frees a little does not wake
    /// a thousand paused clients to find it spent again.
    pub fn freed(&self) -> Notified<'_> {
        self.freed.notified()
    }

    /// Resolves once a probation place is handed to this waiter (it counts from its creation,
    /// so create it before looking at [`SharedBudget::has_place`]). Every place that frees
    /// is handed on at once, to the waiters in the order they began to wait. Handed on one
    /// at a time (each waiter passing the turn on once it ran, behind every task ready to
    /// run), the last few hundred of 5,000 new clients waited until the others had run the
    /// rest of their benchmark.
    pub fn place_freed(&self) -> Notified<'_> {
        self.place_freed.notified()
    }

    /// Moves a client's part from `from` to `to` (total owed, and the part of it in flight).
    fn recharge(&self, from: (usize, usize), to: (usize, usize)) {
        let was_spent = self.is_spent();
        let owed = apply(&self.owed, from.0, to.0);
        apply(&self.in_flight, from.1, to.1);
        if from.0 != to.0 {
            self.owed_gauge.set(owed as f64);
        }
        if was_spent && !self.is_spent() {
            self.freed.notify_one();
        }
    }

    fn take_probation(&self) {
        self.unproven.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether no place is free for a client that was not handed one: the places kept for
    /// the waiters called count as taken.
    fn probation_full(&self) -> bool {
        let taken = self.unproven.load(Ordering::Relaxed) + self.called.load(Ordering::Relaxed);
        taken >= self.probation_places()
    }

    /// Hands each free probation place to a waiter, the longest waiting first.
    fn call_for_places(&self) {
        let free = self
            .probation_places()
            .saturating_sub(self.unproven.load(Ordering::Relaxed));
        let want = free.min(self.waiting_for_place.load(Ordering::Relaxed));
        while self.called.load(Ordering::Relaxed) < want {
            self.called.fetch_add(1, Ordering::Relaxed);
            self.place_freed.notify_one();
        }
    }

    /// A first request is done: answered with `first_reply` bytes, or abandoned (`None`,
    /// the client left). A small first reply opens the window by one, a large one closes it
    /// to [`PROBATION`].
    fn end_probation(&self, first_reply: Option<usize>) {
        self.unproven.fetch_sub(1, Ordering::Relaxed);
        match first_reply {
            Some(len) if len <= SMALL => {
                let widest = self.widest_window();
                let _ = self
                    .places
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |places| {
                        (places < widest).then_some(places + 1)
                    });
            }
            Some(_) => self.places.store(PROBATION, Ordering::Relaxed),
            None => {}
        }
        self.call_for_places();
    }

    /// A client's gate changed from `from` to `to`: counts the paused, and the new clients
    /// waiting for a place.
    fn gate_changed(&self, from: Gate, to: Gate) {
        if (from == Gate::Open) != (to == Gate::Open) {
            let count = if to != Gate::Open {
                self.paused.fetch_add(1, Ordering::Relaxed) + 1
            } else {
                self.paused.fetch_sub(1, Ordering::Relaxed) - 1
            };
            self.paused_gauge.set(count as f64);
        }
        // A place that freed before the client counted as waiting is not handed to it: its
        // wait finds it free when it looks (`has_place`).
        if to == Gate::Probation {
            self.waiting_for_place.fetch_add(1, Ordering::Relaxed);
        } else if from == Gate::Probation
            && self.waiting_for_place.fetch_sub(1, Ordering::Relaxed) == 1
        {
            // No one waits: no place is kept (a call that found no waiter left a permit,
            // which the next waiter takes as its call).
            self.called.store(0, Ordering::Relaxed);
        }
    }
}

/// Changes `counter` from `from` to `to`; returns its new value.
fn apply(counter: &AtomicUsize, from: usize, to: usize) -> usize {
    if to >= from {
        counter.fetch_add(to - from, Ordering::Relaxed) + (to - from)
    } else {
        counter.fetch_sub(from - to, Ordering::Relaxed) - (from - to)
    }
}

/// How large a client's next replies are expected to be: its first reply's size, then the
/// largest of its recent replies, forgotten a little (1/32) with each smaller one (a GET of
/// a large value followed by many small replies counts as small again after a hundred or
/// so). Slowly, so that cheap replies interleaved with large requests (GET big, ECHO x, GET
/// big...) cannot talk the estimate down within one pipeline. `None` until the first.
#[derive(Debug, Default, Clone, Copy)]
pub struct ReplyEstimate(Option<usize>);

impl ReplyEstimate {
    /// Takes a reply of `len` bytes into account.
    pub fn note(&mut self, len: usize) {
        self.0 = Some(match self.0 {
            Some(estimate) if estimate > len => estimate - (estimate - len) / 32,
            _ => len,
        });
    }

    /// The expected size of one reply, once one was seen.
    pub fn bytes(self) -> Option<usize> {
        self.0
    }
}

/// What a client owes now, as its session sees it.
#[derive(Debug, Clone, Copy)]
pub struct Owed {
    /// Replies held for it: unwritten output and answers waiting for earlier ones.
    pub held: usize,
    /// Its requests still unanswered.
    pub unanswered: usize,
    /// How many of those were sent on a master's shared connection as they came (the
    /// others run as steps of their own: blocking commands on connections of their own).
    pub direct: usize,
    pub estimate: ReplyEstimate,
}

impl Owed {
    /// Held replies plus the estimate of those in flight, in bytes.
    fn bytes(&self) -> usize {
        self.held.saturating_add(self.in_flight())
    }

    /// The estimate of the replies in flight, in bytes.
    fn in_flight(&self) -> usize {
        let each = self.estimate.bytes().unwrap_or(0);
        self.unanswered.saturating_mul(each)
    }
}

/// Whether a client may send its next request now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    Open,
    /// It owes its own budget: it goes on as its replies are read.
    Client,
    /// The process owes its budget: it goes on when [`SharedBudget::freed`] fires.
    Shared,
    /// A new client, and the probation places are taken: it goes on when
    /// [`SharedBudget::place_freed`] hands it one.
    Probation,
}

/// One client's part in the shared budget; gives it back when dropped.
pub struct ClientFlow<'a> {
    shared: &'a SharedBudget,
    /// What this client added to the shared totals: owed, and the part of it in flight.
    charged: (usize, usize),
    /// Holds one of the probation places.
    probing: bool,
    /// Woken by [`SharedBudget::freed`], and not yet passed the turn on.
    woken: bool,
    /// The gate the shared counts know of.
    shown: Gate,
}

impl<'a> ClientFlow<'a> {
    pub fn new(shared: &'a SharedBudget) -> Self {
        ClientFlow {
            shared,
            charged: (0, 0),
            probing: false,
            woken: false,
            shown: Gate::Open,
        }
    }

    /// Whether the client, owing `owed`, may send one more request, with `max_owed` its own
    /// budget (`limits.max_owed_bytes`, 0: none).
    pub fn gate(&mut self, owed: Owed, max_owed: usize) -> Gate {
        let Some(each) = owed.estimate.bytes() else {
            // Its first reply is not in: one request at a time, on probation.
            if owed.unanswered > 0 {
                return Gate::Client;
            }
            if !self.probing && self.shared.probation_full() {
                return Gate::Probation;
            }
            return Gate::Open;
        };
        let bytes = owed.bytes();
        let idle = bytes == 0 && owed.unanswered == 0;
        let after = bytes.saturating_add(each);
        if !idle && max_owed > 0 && after > max_owed {
            return Gate::Client;
        }
        if after > SMALL && self.shared.is_spent() {
            return Gate::Shared;
        }
        Gate::Open
    }

    /// Brings the shared total up to date with what the client owes now, and shows whether
    /// its gate is closed (`gate`: the latest answer of [`ClientFlow::gate`]).
    #[inline]
    pub fn charge(&mut self, owed: Owed, gate: Gate) {
        // On probation while its first request is on a shared connection, unanswered (a
        // first BLPOP waits on a connection of its own and takes no place).
        let probing = owed.estimate.bytes().is_none() && owed.direct > 0;
        // The usual case, twice per request of an ordinary client: nothing to change.
        let settled =
            probing == self.probing && self.charged == (0, 0) && !self.woken && self.shown == gate;
        if settled && owed.bytes() <= SMALL {
            return;
        }
        self.recharge(owed, gate, probing);
    }

    /// Whether a charge once everything is answered, at the gate open, would change
    /// nothing: the client charged nothing, is not on probation, and was not woken for
    /// room. Asked while the client's state is in the cache, so its last reply need not
    /// read it again.
    pub fn settled_once_answered(&self) -> bool {
        !self.probing && self.charged == (0, 0) && !self.woken && self.shown == Gate::Open
    }

    /// The rest of [`ClientFlow::charge`], off its usual path.
    fn recharge(&mut self, owed: Owed, gate: Gate, probing: bool) {
        if probing != self.probing {
            self.probing = probing;
            if probing {
                self.shared.take_probation();
            } else {
                self.shared.end_probation(owed.estimate.bytes());
            }
        }
        // A client that owes little is let through whatever the total (see `gate`), so it is
        // not counted in it either: the request path of ordinary clients touches no shared
        // counter.
        let bytes = owed.bytes();
        let now = if bytes > SMALL {
            (bytes, owed.in_flight())
        } else {
            (0, 0)
        };
        if now != self.charged {
            self.shared.recharge(self.charged, now);
            self.charged = now;
        }
        if std::mem::take(&mut self.woken) && self.shared.has_room() {
            self.shared.freed.notify_one();
        }
        if gate != self.shown {
            self.shared.gate_changed(self.shown, gate);
            self.shown = gate;
        }
    }

    /// Notes that the client was woken by [`SharedBudget::freed`]: after its next charge,
    /// the next waiter is woken if room is left.
    pub fn woken(&mut self) {
        self.woken = true;
    }

    /// Notes that the client, waiting for a probation place, looks again: `called`, it was
    /// handed one, no longer kept for it from now on (it takes it at its next request,
    /// or waits again if the window closed meanwhile).
    pub fn place_woken(&mut self, called: bool) {
        if called {
            let _ = self
                .shared
                .called
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// The process-wide budget this client counts against.
    pub fn shared(&self) -> &'a SharedBudget {
        self.shared
    }
}

impl Drop for ClientFlow<'_> {
    fn drop(&mut self) {
        if self.charged != (0, 0) {
            self.shared.recharge(self.charged, (0, 0));
        }
        if self.shown != Gate::Open {
            self.shared.gate_changed(self.shown, Gate::Open);
        }
        if self.probing {
            self.shared.end_probation(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owed(held: usize, unanswered: usize, estimate: Option<usize>) -> Owed {
        owed_direct(held, unanswered, unanswered, estimate)
    }

    fn owed_direct(held: usize, unanswered: usize, direct: usize, estimate: Option<usize>) -> Owed {
        let mut known = ReplyEstimate::default();
        if let Some(bytes) = estimate {
            known.note(bytes);
        }
        Owed {
            held,
            unanswered,
            direct,
            estimate: known,
        }
    }

    #[test]
    fn the_estimate_follows_a_large_reply_at_once_and_forgets_it_gradually() {
        let mut estimate = ReplyEstimate::default();
        assert_eq!(estimate.bytes(), None);
        estimate.note(1_000_000);
        assert_eq!(estimate.bytes(), Some(1_000_000));
        estimate.note(5);
        assert_eq!(estimate.bytes(), Some(968_751));
        for _ in 0..400 {
            estimate.note(5);
        }
        assert!(estimate.bytes().is_some_and(|bytes| bytes < 64));
        estimate.note(2_000_000);
        assert_eq!(estimate.bytes(), Some(2_000_000));
    }

    /// GET big, ECHO x, GET big...: the cheap replies do not let the large requests pile up.
    #[test]
    fn cheap_replies_between_large_ones_keep_the_window_small() {
        let shared = SharedBudget::default();
        let mut flow = ClientFlow::new(&shared);
        let mut estimate = ReplyEstimate::default();
        estimate.note(256 * 1024);
        let mut sent = 1;
        loop {
            estimate.note(5);
            let owed = Owed {
                held: 0,
                unanswered: sent,
                direct: sent,
                estimate,
            };
            if flow.gate(owed, 1 << 20) != Gate::Open {
                break;
            }
            sent += 1;
        }
        assert!(
            sent <= 5,
            "{sent} large requests in flight on a 1 MiB budget"
        );
    }

    #[test]
    fn a_new_client_sends_one_request_until_its_first_reply() {
        let shared = SharedBudget::default();
        let mut flow = ClientFlow::new(&shared);
        assert_eq!(flow.gate(owed(0, 0, None), 1 << 20), Gate::Open);
        assert_eq!(flow.gate(owed(0, 1, None), 1 << 20), Gate::Client);
        flow.charge(owed(0, 1, None), Gate::Client);
        assert_eq!(shared.unproven.load(Ordering::Relaxed), 1);
        // Its first reply is small: a deep pipeline goes on at once.
        flow.charge(owed(0, 0, Some(5)), Gate::Open);
        assert_eq!(shared.unproven.load(Ordering::Relaxed), 0);
        assert_eq!(flow.gate(owed(0, 500, Some(5)), 1 << 20), Gate::Open);
    }

    #[test]
    fn large_replies_keep_a_client_to_what_its_budget_holds_but_never_below_one() {
        let shared = SharedBudget::default();
        let mut flow = ClientFlow::new(&shared);
        let mb = 1 << 20;
        assert_eq!(flow.gate(owed(0, 3, Some(mb / 4)), mb), Gate::Open);
        assert_eq!(flow.gate(owed(0, 4, Some(mb / 4)), mb), Gate::Client);
        // Replies unread count as much as replies in flight.
        assert_eq!(flow.gate(owed(mb / 2, 2, Some(mb / 4)), mb), Gate::Client);
        // A reply larger than the whole budget: one at a time, once everything is read.
        assert_eq!(flow.gate(owed(0, 0, Some(4 * mb)), mb), Gate::Open);
        assert_eq!(flow.gate(owed(0, 1, Some(4 * mb)), mb), Gate::Client);
        assert_eq!(flow.gate(owed(1, 0, Some(4 * mb)), mb), Gate::Client);
        // No budget of its own: only max_pipeline limits it.
        assert_eq!(flow.gate(owed(0, 1000, Some(4 * mb)), 0), Gate::Open);
    }

    #[test]
    fn over_the_process_budget_only_clients_that_owe_little_go_on() {
        let shared = SharedBudget::default();
        shared.set_limit(10 * SMALL);
        let mut big = ClientFlow::new(&shared);
        let mut small = ClientFlow::new(&shared);
        big.charge(owed(12 * SMALL, 0, Some(SMALL)), Gate::Open);
        assert_eq!(shared.owed(), 12 * SMALL);
        assert_eq!(big.gate(owed(0, 0, Some(2 * SMALL)), 0), Gate::Shared);
        assert_eq!(small.gate(owed(100, 10, Some(50)), 0), Gate::Open);
        assert_eq!(small.gate(owed(SMALL, 0, Some(50)), 0), Gate::Shared);
        // What a client that owes little owes is not counted.
        small.charge(owed(100, 10, Some(50)), Gate::Open);
        assert_eq!(shared.owed(), 12 * SMALL);
        big.charge(owed(12 * SMALL, 0, Some(SMALL)), Gate::Shared);
        assert_eq!(shared.paused(), 1);
        // What it owes drops below the budget: the waiters are told.
        let freed = shared.freed();
        big.charge(owed(SMALL, 0, Some(SMALL)), Gate::Open);
        assert!(shared.has_room());
        assert_eq!(shared.paused(), 0);
        let mut freed = std::pin::pin!(freed);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(freed.as_mut().poll(&mut cx).is_ready());
        drop(big);
        drop(small);
        assert_eq!(shared.owed(), 0);
    }

    #[test]
    fn at_most_probation_new_clients_have_a_first_request_in_flight() {
        let shared = SharedBudget::default();
        let mut clients: Vec<ClientFlow> = (0..PROBATION + 1)
            .map(|_| ClientFlow::new(&shared))
            .collect();
        for flow in &mut clients[..PROBATION] {
            assert_eq!(flow.gate(owed(0, 0, None), 0), Gate::Open);
            flow.charge(owed(0, 1, None), Gate::Client);
        }
        assert_eq!(
            clients[PROBATION].gate(owed(0, 0, None), 0),
            Gate::Probation
        );
        assert!(!shared.has_place());
        // One is answered, large: a place frees, and the window stays as narrow.
        clients[0].charge(owed(0, 0, Some(SMALL + 1)), Gate::Open);
        assert!(shared.has_place());
        assert_eq!(shared.probation_places(), PROBATION);
        assert_eq!(clients[PROBATION].gate(owed(0, 0, None), 0), Gate::Open);
        drop(clients);
        assert_eq!(shared.unproven.load(Ordering::Relaxed), 0);
    }

    /// Start one new client's first request; answer it with `reply` bytes.
    fn first_request(shared: &SharedBudget, reply: usize) {
        let mut flow = ClientFlow::new(shared);
        assert_eq!(flow.gate(owed(0, 0, None), 0), Gate::Open);
        flow.charge(owed(0, 1, None), Gate::Client);
        flow.charge(owed(0, 0, Some(reply)), Gate::Open);
    }

    /// A fleet asking for small values opens the window one place per first reply (doubling
    /// each round trip), up to the in-flight share of the budget at `FIRST_REPLY` each; the first
    /// large reply closes it again.
    #[test]
    fn the_probation_window_opens_on_small_first_replies_and_closes_on_a_large_one() {
        let shared = SharedBudget::default();
        shared.set_limit(64 << 20);
        for _ in 0..10 {
            first_request(&shared, 100);
        }
        assert_eq!(shared.probation_places(), PROBATION + 10);
        for _ in 0..2000 {
            first_request(&shared, 100);
        }
        let widest = (64 << 20) / IN_FLIGHT_SHARE / FIRST_REPLY;
        assert_eq!(widest, 1024);
        assert_eq!(shared.probation_places(), widest);
        // That many first requests go at once, no more.
        let mut clients: Vec<ClientFlow> = (0..=widest).map(|_| ClientFlow::new(&shared)).collect();
        for flow in &mut clients[..widest] {
            assert_eq!(flow.gate(owed(0, 0, None), 0), Gate::Open);
            flow.charge(owed(0, 1, None), Gate::Client);
        }
        assert_eq!(clients[widest].gate(owed(0, 0, None), 0), Gate::Probation);
        // One comes back large: the window is back to its narrowest.
        clients[0].charge(owed(0, 0, Some(1 << 20)), Gate::Open);
        assert_eq!(shared.probation_places(), PROBATION);
        assert_eq!(clients[widest].gate(owed(0, 0, None), 0), Gate::Probation);
        drop(clients);
        // Without a process budget the window may open further.
        let unbounded = SharedBudget::default();
        for _ in 0..(2 * widest) {
            first_request(&unbounded, 100);
        }
        assert_eq!(unbounded.probation_places(), PROBATION + 2 * widest);
    }

    /// A first request that waits on a connection of its own (BLPOP 0) takes no place: new
    /// clients are not held up by workers that block.
    #[test]
    fn first_requests_off_the_shared_connections_take_no_probation_place() {
        let shared = SharedBudget::default();
        let mut workers: Vec<ClientFlow> = (0..2 * PROBATION)
            .map(|_| ClientFlow::new(&shared))
            .collect();
        for flow in &mut workers {
            assert_eq!(flow.gate(owed(0, 0, None), 0), Gate::Open);
            flow.charge(owed_direct(0, 1, 0, None), Gate::Client);
        }
        let mut next = ClientFlow::new(&shared);
        assert_eq!(next.gate(owed(0, 0, None), 0), Gate::Open);
        // A client that sent half a request holds nothing either.
        next.charge(owed(0, 0, None), Gate::Open);
        assert!(shared.has_place());
    }

    /// Every place that frees is handed at once to a waiter, the longest waiting first, and
    /// kept for it: a client that comes later waits behind them.
    #[test]
    fn freed_probation_places_go_to_the_longest_waiting_at_once() {
        let shared = SharedBudget::default();
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let mut probing: Vec<ClientFlow> =
            (0..PROBATION).map(|_| ClientFlow::new(&shared)).collect();
        for flow in &mut probing {
            assert_eq!(flow.gate(owed(0, 0, None), 0), Gate::Open);
            flow.charge(owed(0, 1, None), Gate::Client);
        }
        // Six new clients wait, in turn.
        let mut waiting: Vec<ClientFlow> = (0..6).map(|_| ClientFlow::new(&shared)).collect();
        let mut calls = Vec::new();
        for flow in &mut waiting {
            assert_eq!(flow.gate(owed(0, 0, None), 0), Gate::Probation);
            flow.charge(owed(0, 0, None), Gate::Probation);
            let mut call = Box::pin(shared.place_freed());
            assert!(call.as_mut().poll(&mut cx).is_pending());
            calls.push(call);
        }
        // Both first requests come back small: the window opens to four, all free at once.
        for flow in &mut probing {
            flow.charge(owed(0, 0, Some(5)), Gate::Open);
        }
        assert_eq!(shared.probation_places(), PROBATION + 2);
        let ready: Vec<bool> = calls
            .iter_mut()
            .map(|call| call.as_mut().poll(&mut cx).is_ready())
            .collect();
        assert_eq!(ready, [true, true, true, true, false, false]);
        // The four places are kept for those called: a latecomer waits.
        let mut late = ClientFlow::new(&shared);
        assert_eq!(late.gate(owed(0, 0, None), 0), Gate::Probation);
        // The first called runs and takes its place; the others' are still kept.
        waiting[0].place_woken(true);
        assert_eq!(waiting[0].gate(owed(0, 0, None), 0), Gate::Open);
        waiting[0].charge(owed(0, 1, None), Gate::Client);
        assert_eq!(late.gate(owed(0, 0, None), 0), Gate::Probation);
        for flow in &mut waiting[1..4] {
            flow.place_woken(true);
            assert_eq!(flow.gate(owed(0, 0, None), 0), Gate::Open);
            flow.charge(owed(0, 1, None), Gate::Client);
        }
        assert_eq!(shared.called.load(Ordering::Relaxed), 0);
        // A place that frees later goes to the next in line.
        waiting[0].charge(owed(0, 0, Some(5)), Gate::Open);
        let mut fifth = calls.remove(4);
        assert!(fifth.as_mut().poll(&mut cx).is_ready());
        drop(waiting);
        drop(calls);
        drop(probing);
        assert_eq!(shared.waiting_for_place.load(Ordering::Relaxed), 0);
        assert_eq!(shared.unproven.load(Ordering::Relaxed), 0);
        assert_eq!(shared.paused(), 0);
    }

    use std::future::Future;
}
