//! Running a client's commands on a backend connection of its own: MULTI/EXEC blocks
//! (optionally after a WATCH on the same connection), blocking commands, and scripts
//! (on a connection of the script pool, see `topology::ScriptConns`).
//!
//! Invariants: a MULTI block is written as `[ASKING] MULTI, commands..., EXEC` in order
//! on one connection and only EXEC's reply reaches the client; the backend's `+QUEUED`
//! replies are consumed here. A block is only resent when the backend refused it before
//! anything ran (a redirect or TRYAGAIN at queue time makes the backend discard it) and
//! never after WATCH, whose keys were watched on the node that no longer owns them. A
//! blocking command never falls back to a shared connection, where it would stall
//! every other client of that node; nor does a client's script. Blocking commands and
//! scripts run in `alone`.

use bytes::{Bytes, BytesMut};
use futures_util::FutureExt;

use crate::backend::{BackendError, NodeConn};
use crate::config::RetryConfig;
use crate::protocol::{encode, Proto};
use crate::reply;
use crate::route::{NodeAddr, Redirect};

use super::Upstream;
// Where dispatch finds them with the rest of the pinned connections.
pub use super::blocked::{BlockedOn, BLOCKED_ON};
use super::Target;

mod alone;

pub const MULTI: &[u8] = b"*1\r\n$5\r\nMULTI\r\n";
pub const EXEC: &[u8] = b"*1\r\n$4\r\nEXEC\r\n";

/// The connection a transaction's WATCH was sent on; its EXEC must go there too.
#[derive(Debug, Clone)]
pub struct WatchPin {
    /// The dedicated connection holding the client's watched keys.
    pub conn: NodeConn,
    /// Whether the WATCH needed `ASKING` (slot being imported), so MULTI needs it too.
    pub asking: bool,
}

impl WatchPin {
    /// Sends a later WATCH of the same transaction on the pinned connection, so one EXEC
    /// checks every watched key; its reply, or `None` when the watch can no longer be
    /// trusted: the slot moved since the first WATCH, or the connection (and what it
    /// watched) is gone.
    pub async fn watch_again(&self, request: Bytes) -> Option<Bytes> {
        match self.conn.call(request, self.asking).await {
            Ok(frame) if Redirect::classify(&frame, self.conn.addr()).is_some() => None,
            Ok(frame) => Some(frame),
            Err(error) => {
                tracing::debug!(%error, "WATCH on a lost pinned connection");
                None
            }
        }
    }
}

impl Upstream {
    /// The node that serves `target` now, if the slot map knows one.
    pub fn node_for(&self, target: Target) -> Option<NodeAddr> {
        let routing = self.topology.routing();
        match target {
            Target::Slot(slot) => routing.map.master_addr(slot).cloned(),
            Target::AnyMaster => routing.map.masters().first().cloned(),
        }
    }

    /// Sends `request` (a WATCH) on a new dedicated connection to the master of `slot`,
    /// following MOVED/ASK. Returns the reply and, when the keys are watched, the pin the
    /// EXEC must use.
    pub async fn watch(
        &self,
        slot: u16,
        request: Bytes,
        proto: Proto,
    ) -> (Bytes, Option<WatchPin>) {
        let mut budget = RetryBudget::new(&self.retry);
        let mut addr = self.node_for(Target::Slot(slot));
        let mut asking = false;
        loop {
            let Some(node) = addr.clone() else {
                self.topology.request_refresh();
                if !budget.wait_for_retry().await {
                    return (reply::error(reply::text::SLOT_UNSERVED), None);
                }
                addr = self.node_for(Target::Slot(slot));
                continue;
            };
            let conn = self.topology.dedicated_once(&node, proto);
            let frame = match conn.call(request.clone(), asking).await {
                Ok(frame) => frame,
                Err(BackendError::Lost(detail)) => {
                    return (reply::outcome_unknown(&node, &detail), None)
                }
                Err(BackendError::NotSent(detail)) => {
                    self.topology.request_refresh();
                    if !budget.wait_for_retry().await {
                        return (reply::unavailable(&node, &detail), None);
                    }
                    addr = self.node_for(Target::Slot(slot));
                    continue;
                }
            };
            match Redirect::classify(&frame, &node) {
                None if frame.first() == Some(&b'-') => return (frame, None),
                None => return (frame, Some(WatchPin { conn, asking })),
                Some(Redirect::Moved { slot, addr: to }) => {
                    if !budget.follow_redirect().await {
                        return (reply::error(reply::text::TOO_MANY_REDIRECTS), None);
                    }
                    self.topology.on_moved(slot, &to);
                    addr = Some(to);
                    asking = false;
                }
                Some(Redirect::Ask { addr: to, .. }) => {
                    if !budget.follow_redirect().await {
                        return (reply::error(reply::text::TOO_MANY_REDIRECTS), None);
                    }
                    addr = Some(to);
                    asking = true;
                }
                Some(_) => return (frame, None),
            }
        }
    }

    /// Runs `commands` (raw RESP requests) as one MULTI/EXEC block on the master of
    /// `target` and returns EXEC's reply byte-exact. `reusable` is a dedicated connection
    /// the block may use if it goes to that node. With `pin` (after WATCH) the block goes
    /// on the pinned connection only; if that node no longer owns the slot, or the pinned
    /// connection was lost since the WATCH, the answer is the null reply of a failed
    /// WATCH, because the watched keys may have changed unseen. `prelude` requests go
    /// first on the same connection, outside the block (their replies are dropped): what
    /// the block needs on that very node, such as a script its EVALSHA calls use.
    pub async fn exec_block(
        &self,
        target: Target,
        prelude: &[Bytes],
        commands: &[Bytes],
        pin: Option<WatchPin>,
        reusable: Option<NodeConn>,
        proto: Proto,
    ) -> Bytes {
        let mut budget = RetryBudget::new(&self.retry);
        let watched = pin.is_some();
        let (mut conn, mut asking) = match pin {
            Some(pin) => {
                if !pin.conn.is_connected() {
                    return watch_failed(proto);
                }
                (Some(pin.conn), pin.asking)
            }
            None => (reusable, false),
        };
        loop {
            let this = match conn.take() {
                Some(conn) => conn,
                None => match self.node_for(target) {
                    Some(node) => self.topology.dedicated(&node, proto),
                    None => {
                        self.topology.request_refresh();
                        if !budget.wait_for_retry().await {
                            return reply::error(reply::text::SLOT_UNSERVED);
                        }
                        continue;
                    }
                },
            };
            let node = this.addr().clone();
            let attempt = attempt_block(&this, &node, prelude, commands, asking).await;
            let (refusal, exec_reply) = match attempt {
                BlockAttempt::Done(reply) => return reply,
                BlockAttempt::NotSent(detail) => {
                    if watched {
                        return watch_failed(proto);
                    }
                    self.topology.request_refresh();
                    if !budget.wait_for_retry().await {
                        return reply::unavailable(&node, &detail);
                    }
                    continue;
                }
                BlockAttempt::Refused(refusal, exec_reply) => (refusal, exec_reply),
            };
            if watched {
                return watch_failed(proto);
            }
            let next = self
                .after_refused_block(refusal, exec_reply, this, asking, &mut budget, proto)
                .await;
            match next {
                Ok(next) => (conn, asking) = next,
                Err(reply) => return reply,
            }
        }
    }

    /// Where the next attempt of a block the node refused with `refusal` goes (a
    /// connection to reuse, or `None` for the slot's master, and whether to send ASKING),
    /// once redirects or the retry backoff allow; `Err` is the reply when they do not.
    async fn after_refused_block(
        &self,
        refusal: Redirect,
        exec_reply: Bytes,
        this: NodeConn,
        asking: bool,
        budget: &mut RetryBudget<'_>,
        proto: Proto,
    ) -> Result<(Option<NodeConn>, bool), Bytes> {
        match refusal {
            Redirect::Moved { .. } | Redirect::Ask { .. } => {
                if !budget.follow_redirect().await {
                    return Err(reply::error(reply::text::TOO_MANY_REDIRECTS));
                }
                Ok(self.block_redirected_to(refusal, proto))
            }
            Redirect::NoScript => Err(exec_reply),
            retryable => {
                if matches!(
                    retryable,
                    Redirect::ReadOnly | Redirect::MasterDown | Redirect::ClusterDown
                ) {
                    self.topology.request_refresh();
                }
                if !budget.wait_for_retry().await {
                    return Err(exec_reply);
                }
                if asking && retryable == Redirect::TryAgain {
                    // The importing node has some of the keys but not all yet: ask it
                    // again once more have moved, rather than going back to the source,
                    // which would send us here again for the ones it no longer has.
                    Ok((Some(this), true))
                } else {
                    Ok((None, false))
                }
            }
        }
    }

    /// The dedicated connection a MOVED or an ASK sends a MULTI block's next attempt to,
    /// and whether it needs ASKING (a MOVED also updates the slot map).
    fn block_redirected_to(&self, redirect: Redirect, proto: Proto) -> (Option<NodeConn>, bool) {
        match redirect {
            Redirect::Moved { slot, addr } => {
                self.topology.on_moved(slot, &addr);
                (Some(self.topology.dedicated(&addr, proto)), false)
            }
            Redirect::Ask { addr, .. } => (Some(self.topology.dedicated(&addr, proto)), true),
            _ => (None, false),
        }
    }
}

/// The retries and redirects one request has spent, against the configured limits.
struct RetryBudget<'a> {
    retry: &'a RetryConfig,
    attempts: u32,
    redirects: u32,
}

impl<'a> RetryBudget<'a> {
    fn new(retry: &'a RetryConfig) -> Self {
        RetryBudget {
            retry,
            attempts: 0,
            redirects: 0,
        }
    }

    /// Sleeps the backoff before one more attempt; `false` (without sleeping) when every
    /// attempt is spent.
    async fn wait_for_retry(&mut self) -> bool {
        if self.attempts >= self.retry.attempts {
            return false;
        }
        tokio::time::sleep(self.retry.backoff(self.attempts)).await;
        self.attempts += 1;
        true
    }

    /// Counts one MOVED/ASK hop. Past `max_redirects` hops in a row the nodes are taken to
    /// disagree about the slot (as they do for a moment after it moved): the budget waits
    /// like a retry and allows another round of hops; `false` once retries are spent too.
    async fn follow_redirect(&mut self) -> bool {
        self.redirects += 1;
        if self.redirects <= self.retry.max_redirects {
            return true;
        }
        if !self.wait_for_retry().await {
            return false;
        }
        self.redirects = 1;
        true
    }
}

/// What one attempt of a MULTI block on one connection came to.
enum BlockAttempt {
    /// The answer for the client: EXEC's reply, or why there is none.
    Done(Bytes),
    /// Nothing was written: another attempt is safe.
    NotSent(String),
    /// The node refused the block before anything ran (a redirect, TRYAGAIN...), with
    /// EXEC's reply, the client's answer if no other attempt is made.
    Refused(Redirect, Bytes),
}

/// Sends `prelude`, then `[ASKING] MULTI, commands..., EXEC` on `conn` (to `node`) and
/// reads what came of it.
async fn attempt_block(
    conn: &NodeConn,
    node: &NodeAddr,
    prelude: &[Bytes],
    commands: &[Bytes],
    asking: bool,
) -> BlockAttempt {
    let mut requests = Vec::with_capacity(prelude.len() + commands.len() + 2);
    requests.extend(prelude.iter().map(|p| (p.clone(), false)));
    requests.push((Bytes::from_static(MULTI), asking));
    requests.extend(commands.iter().map(|c| (c.clone(), false)));
    requests.push((Bytes::from_static(EXEC), false));
    let replies = match call_in_order(conn, requests).await {
        Ok(replies) => replies,
        Err(BackendError::Lost(detail)) => {
            return BlockAttempt::Done(reply::outcome_unknown(node, &detail))
        }
        Err(BackendError::NotSent(detail)) => return BlockAttempt::NotSent(detail),
    };
    let block = replies.get(prelude.len()..).unwrap_or_default();
    let Some((exec_reply, queued)) = block.split_last() else {
        return BlockAttempt::Done(reply::error("ERR proxy: no reply to EXEC"));
    };
    // The first refusal at queue time explains the backend's EXECABORT. A refusal of EXEC
    // itself (a redirect, TRYAGAIN while the slot's keys move, READONLY after a failover)
    // comes before anything ran: the node discarded the transaction.
    let refusal = queued
        .iter()
        .chain(std::iter::once(exec_reply))
        .find_map(|frame| Redirect::classify(frame, node));
    match refusal {
        Some(refusal) => BlockAttempt::Refused(refusal, exec_reply.clone()),
        None => BlockAttempt::Done(exec_reply.clone()),
    }
}

/// EXEC's answer when WATCH failed: a null array (RESP2 `*-1`, RESP3 `_`).
pub fn watch_failed(proto: Proto) -> Bytes {
    let mut out = BytesMut::with_capacity(5);
    encode::null_array(&mut out, proto);
    out.freeze()
}

/// Sends every request on `conn` in order and returns their replies in the same order.
/// `NotSent` only when nothing was written; `Lost` when anything may have run.
pub(super) async fn call_in_order(
    conn: &NodeConn,
    requests: Vec<(Bytes, bool)>,
) -> Result<Vec<Bytes>, BackendError> {
    let mut calls: Vec<_> = requests
        .into_iter()
        .map(|(request, asking)| Box::pin(conn.call(request, asking)))
        .collect();
    // Polling each call once, in order, queues its request behind the previous one (the
    // queue is FIFO, also when full), so the connection writes them in this order,
    // normally in one write, before anything waits for a reply.
    let mut early: Vec<Option<Result<Bytes, BackendError>>> = calls
        .iter_mut()
        .map(|call| call.as_mut().now_or_never())
        .collect();
    let mut replies = Vec::with_capacity(calls.len());
    for (call, ready) in calls.iter_mut().zip(early.iter_mut()) {
        let result = match ready.take() {
            Some(result) => result,
            None => call.as_mut().await,
        };
        match result {
            Ok(frame) => replies.push(frame),
            // Nothing answered yet: the first failure tells whether anything was written.
            Err(error) if replies.is_empty() => return Err(error),
            // Part of the block was written and answered: its outcome is unknown.
            Err(BackendError::NotSent(detail) | BackendError::Lost(detail)) => {
                return Err(BackendError::Lost(detail))
            }
        }
    }
    Ok(replies)
}
