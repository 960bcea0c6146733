//! XREAD over streams in several slots carried out (see `crate::crossslot::streams` for the
//! design and its guarantee): the probes through the forward path, all at once, and the
//! waits on connections of the client's own, as any blocking command's, so a blocked client
//! never holds a shared connection. The waits of one round end together: the first to
//! answer drops the others, which closes their connections and ends their commands on the
//! nodes; a client that goes away drops them all the same way.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::future::select_all;

use crate::crossslot::blocking::{time_left, timed_out, Waited};
use crate::crossslot::streams::{Probed, StreamRead, MAX_WAITS, POLL_MAX, POLL_MIN};
use crate::dispatch::{Proxy, Target};
use crate::protocol::Proto;
use crate::route::key_slot;

impl Proxy {
    /// XREAD across slots: the streams with entries after their IDs, else (with BLOCK) the
    /// first stream to get some within the timeout, else the null array.
    pub(super) async fn cross_slot_stream_read(&self, read: &StreamRead, proto: Proto) -> Bytes {
        let ids = match self.stream_probe(read, read.client_ids(), proto).await {
            Probed::Reply(reply) => return reply,
            Probed::Empty(ids) => ids,
        };
        let Some(timeout) = read.block else {
            return timed_out(proto);
        };
        let _blocked = crate::metrics::BlockedClient::enter();
        // An unblock meant for an earlier command of the client's.
        crate::upstream::take_unblock();
        // A timeout past what the clock holds is as good as none.
        let deadline = timeout.and_then(|timeout| Instant::now().checked_add(timeout));
        let polls = read.keys.len() > MAX_WAITS;
        let mut interval = POLL_MIN;
        loop {
            let Some(left) = time_left(deadline) else {
                return timed_out(proto);
            };
            let span = match polls {
                true => Some(left.map_or(interval, |left| left.min(interval))),
                false => left,
            };
            interval = (interval * 2).min(POLL_MAX);
            if let Waited::Reply(reply) = self.stream_waits(read, &ids, polls, span, proto).await {
                return reply;
            }
            if let Probed::Reply(reply) = self.stream_probe(read, &ids, proto).await {
                return reply;
            }
        }
    }

    /// One probe of every stream with `ids`.
    async fn stream_probe(&self, read: &StreamRead, ids: &[Bytes], proto: Proto) -> Probed {
        let slots: Vec<u16> = read.keys.iter().map(|key| key_slot(key)).collect();
        let probes: Vec<Bytes> = (0..read.keys.len()).map(|n| read.probe(n, ids)).collect();
        let size_hint = probes.iter().map(Bytes::len).sum();
        let replies = self
            .upstream
            .forward_each(
                &slots,
                |n, out: &mut BytesMut| out.extend_from_slice(&probes[n]),
                size_hint,
                proto,
            )
            .await;
        read.probed(ids, &replies, proto)
    }

    /// Waits on every stream at once (on the first only when it `polls`) for at most `span`
    /// (`None`: no end), each on a connection of its own, until the first answers; what
    /// that answer means.
    async fn stream_waits(
        &self,
        read: &StreamRead,
        ids: &[Bytes],
        polls: bool,
        span: Option<Duration>,
        proto: Proto,
    ) -> Waited {
        let streams = if polls { 1 } else { read.keys.len() };
        let waits = (0..streams).map(|n| {
            let target = Target::Slot(key_slot(&read.keys[n]));
            Box::pin(
                self.upstream
                    .run_blocking_part(target, read.wait(n, ids, span), proto),
            )
        });
        let (reply, _, _) = select_all(waits).await;
        StreamRead::waited(&reply, crate::upstream::take_unblock(), polls)
    }
}
