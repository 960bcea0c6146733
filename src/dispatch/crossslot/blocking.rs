//! Multi-key pops across slots carried out (see `crate::crossslot::blocking` for the
//! design and its guarantee): probes through the forward path, the pop of the key that
//! decides through it too (all LMPOP and ZMPOP need), and the waits on connections of the client's own (as any
//! blocking command's), so a blocked client never holds a shared connection. The waits of
//! one round end together: the first to answer drops the others, which closes their
//! connections and ends their commands on the nodes; a client that goes away drops them
//! all the same way. `CLIENT UNBLOCK` reaches the wait the session shows as blocked, and
//! notes that it did (`upstream::take_unblock`): a poll's wait answers the same null at
//! the end of its interval.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::future::select_all;

use crate::crossslot::blocking::{
    time_left, timed_out, BlockingPop, Holds, Probed, Waited, POLL_MAX, POLL_MIN,
};
use crate::dispatch::{Proxy, Target};
use crate::protocol::Proto;
use crate::route::key_slot;

/// The most keys of one list pop waited on at once, one connection each; a pop over more
/// keys polls as a sorted-set pop does, so one client cannot open connections without
/// bound.
const MAX_LIST_WAITS: usize = 16;

/// What one probe and pop found.
enum Round {
    /// The client's reply: what was popped, or an error.
    Reply(Bytes),
    /// The probe found every key empty.
    Empty,
    /// The probe found a key with data, but another client emptied it before the pop.
    Emptied,
}

impl Proxy {
    /// LMPOP or ZMPOP: pops the first key in order with data, or answers the null array
    /// when one probe finds every key empty.
    pub(super) async fn cross_slot_pop(&self, pop: &BlockingPop, proto: Proto) -> Bytes {
        loop {
            match self.blocking_pop_round(pop, proto).await {
                Round::Reply(reply) => return reply,
                Round::Empty => return timed_out(proto),
                // Another key may still hold data: what one Redis would have popped.
                Round::Emptied => {}
            }
        }
    }

    /// Pops as `pop` says, waiting as long as its timeout allows, and returns the reply.
    pub(super) async fn cross_slot_blocking_pop(&self, pop: &BlockingPop, proto: Proto) -> Bytes {
        let _blocked = crate::metrics::BlockedClient::enter();
        // An unblock meant for an earlier command of the client's.
        crate::upstream::take_unblock();
        // A timeout past what the clock holds is as good as none.
        let deadline = pop
            .timeout
            .and_then(|timeout| Instant::now().checked_add(timeout));
        let polls = pop.holds == Holds::SortedSet || pop.keys.len() > MAX_LIST_WAITS;
        let mut interval = POLL_MIN;
        loop {
            if let Round::Reply(reply) = self.blocking_pop_round(pop, proto).await {
                return reply;
            }
            let Some(left) = time_left(deadline) else {
                return timed_out(proto);
            };
            let waited = if polls {
                let span = left.map_or(interval, |left| left.min(interval));
                interval = (interval * 2).min(POLL_MAX);
                self.wait_on(&pop.keys[..1], Some(span), true, proto).await
            } else {
                self.wait_on(&pop.keys, left, false, proto).await
            };
            if let Waited::Reply(reply) = waited {
                return reply;
            }
        }
    }

    /// One probe of every key and, when one has data, its pop.
    async fn blocking_pop_round(&self, pop: &BlockingPop, proto: Proto) -> Round {
        let slots: Vec<u16> = pop.keys.iter().map(|key| key_slot(key)).collect();
        let probes: Vec<Bytes> = pop.keys.iter().map(|key| pop.probe(key)).collect();
        let size_hint = probes.iter().map(Bytes::len).sum();
        let replies = self
            .upstream
            .forward_each(
                &slots,
                |i, out: &mut BytesMut| out.extend_from_slice(&probes[i]),
                size_hint,
                Proto::Resp2,
            )
            .await;
        match pop.probed(&replies) {
            Probed::Reply(reply) => Round::Reply(reply),
            Probed::Empty => Round::Empty,
            Probed::Ready(n) => {
                let target = Target::Slot(slots[n]);
                let reply = self.upstream.forward(target, pop.pop(n), proto).await;
                pop.popped(n, &reply).map_or(Round::Emptied, Round::Reply)
            }
        }
    }

    /// Waits on every key of `keys` at once for at most `span` (`None`: no end), each on
    /// a connection of its own, until the first answers; what that answer means.
    async fn wait_on(
        &self,
        keys: &[Bytes],
        span: Option<Duration>,
        poll: bool,
        proto: Proto,
    ) -> Waited {
        let seconds = span.map(|span| span.as_secs_f64());
        let waits = keys.iter().map(|key| {
            let target = Target::Slot(key_slot(key));
            let request = BlockingPop::wait(key, seconds);
            Box::pin(
                self.upstream
                    .run_blocking_part(target, request, Proto::Resp2),
            )
        });
        let (reply, _, _) = select_all(waits).await;
        BlockingPop::waited(&reply, crate::upstream::take_unblock(), poll, proto)
    }
}
