//! A blocking command or a client's script on a connection of its own: a fresh connection
//! for a blocking command (shown in the session's [`BlockedOn`](super::BlockedOn)), one of
//! the script pool for a script, either way following MOVED/ASK and retrying as
//! `Upstream::forward` does.

use bytes::Bytes;

use crate::backend::{BackendError, NodeConn};
use crate::protocol::Proto;
use crate::reply;
use crate::route::{NodeAddr, Redirect};
use crate::topology::ScriptLease;

use super::RetryBudget;
use crate::upstream::blocked::ShownBlocked;
use crate::upstream::{Target, Upstream};

impl Upstream {
    /// Runs a blocking command on a dedicated connection to the master of `target`, a
    /// ready one when there is one (see [`crate::upstream::warm`]), following MOVED/ASK on further
    /// dedicated connections. Dropping the future (the client
    /// went away) drops the connection, which ends the command on the server too.
    pub async fn run_blocking(&self, target: Target, request: Bytes, proto: Proto) -> Bytes {
        let _blocked = crate::metrics::BlockedClient::enter();
        self.run_alone(target, request, proto, Alone::Blocking)
            .await
    }

    /// Runs one of several waits of a client's blocking command on a connection of its
    /// own, as [`Upstream::run_blocking`] runs a whole command; the caller counts the client
    /// as blocked once, for all its waits.
    pub async fn run_blocking_part(&self, target: Target, request: Bytes, proto: Proto) -> Bytes {
        self.run_alone(target, request, proto, Alone::Blocking)
            .await
    }

    /// Runs a client's script call (EVAL, EVALSHA, FCALL and their `_RO` forms) on a
    /// connection of its own from the script pool (see `topology::ScriptConns`), following
    /// MOVED/ASK and retrying as [`Upstream::forward`] does: a script that runs long holds
    /// only its own connection, and the other clients' commands to that master get the
    /// node's `-BUSY` as on one Redis. `-NOSCRIPT` is the caller's to handle.
    pub async fn run_script_alone(&self, target: Target, request: Bytes, proto: Proto) -> Bytes {
        self.run_alone(target, request, proto, Alone::Script).await
    }

    async fn run_alone(&self, target: Target, request: Bytes, proto: Proto, alone: Alone) -> Bytes {
        let mut budget = RetryBudget::new(&self.retry);
        let mut redirected: Option<(NodeAddr, bool)> = None;
        loop {
            let (node, asking) = match redirected.take() {
                Some(hop) => hop,
                None => match self.node_for(target) {
                    Some(node) => (node, false),
                    None => {
                        self.topology.request_refresh();
                        if !budget.wait_for_retry().await {
                            return reply::error(reply::text::SLOT_UNSERVED);
                        }
                        continue;
                    }
                },
            };
            let mut lease = match alone {
                Alone::Blocking => Lease::Own(self.warm.take(&node, proto)),
                Alone::Script => Lease::Pooled(self.topology.script_conn(&node, proto)),
            };
            let _shown = (alone == Alone::Blocking).then(|| ShownBlocked::record(lease.conn()));
            let call = match alone {
                // Written before what other clients send after it (see `super::warm`).
                Alone::Blocking => lease.conn().call_at_once(request.clone(), asking).await,
                Alone::Script => lease.conn().call(request.clone(), asking).await,
            };
            let frame = match call {
                Ok(frame) => {
                    lease.answered();
                    frame
                }
                Err(BackendError::Lost(detail)) => {
                    self.topology.request_refresh();
                    return reply::outcome_unknown(&node, &detail);
                }
                Err(BackendError::NotSent(detail)) => {
                    // Never written: no script of this call runs there.
                    lease.answered();
                    self.topology.request_refresh();
                    if !budget.wait_for_retry().await {
                        return reply::unavailable(&node, &detail);
                    }
                    continue;
                }
            };
            if frame.first() != Some(&b'-') {
                return frame;
            }
            match Redirect::classify(&frame, &node) {
                None | Some(Redirect::NoScript) => return frame,
                Some(Redirect::Moved { slot, addr }) => {
                    if !budget.follow_redirect().await {
                        return reply::error(reply::text::TOO_MANY_REDIRECTS);
                    }
                    self.topology.on_moved(slot, &addr);
                    redirected = Some((addr, false));
                }
                Some(Redirect::Ask { addr, .. }) => {
                    if !budget.follow_redirect().await {
                        return reply::error(reply::text::TOO_MANY_REDIRECTS);
                    }
                    redirected = Some((addr, true));
                }
                Some(retryable) => {
                    if matches!(
                        retryable,
                        Redirect::ReadOnly | Redirect::MasterDown | Redirect::ClusterDown
                    ) {
                        self.topology.request_refresh();
                    }
                    if !budget.wait_for_retry().await {
                        return frame;
                    }
                }
            }
        }
    }
}

/// What runs on a connection of its own in [`Upstream::run_alone`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Alone {
    /// A blocking command: a connection of its own, shown in the session's [`BlockedOn`].
    Blocking,
    /// A client's script: a connection of the script pool.
    Script,
}

/// The connection one attempt of [`Upstream::run_alone`] runs on.
enum Lease {
    Own(NodeConn),
    Pooled(ScriptLease),
}

impl Lease {
    fn conn(&self) -> &NodeConn {
        match self {
            Lease::Own(conn) => conn,
            Lease::Pooled(lease) => lease.conn(),
        }
    }

    /// Nothing is outstanding on the connection: a pooled one may serve the next script.
    fn answered(&mut self) {
        if let Lease::Pooled(lease) = self {
            lease.answered();
        }
    }
}
