//! Sending one command to the node that owns its slot, following MOVED/ASK and retrying
//! the answers that arrive before anything ran (TRYAGAIN, CLUSTERDOWN, LOADING, MASTERDOWN,
//! READONLY, node unreachable). A command whose reply was lost is never resent.

use bytes::Bytes;

use crate::backend::{BackendError, NodeConn};
use crate::metrics::{self, RetryReason};
use crate::protocol::Proto;
use crate::reply;
use crate::route::Redirect;

use super::Proxy;

/// Where the first attempt of a command goes.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    /// The master of this slot.
    Slot(u16),
    /// Any master (keyless commands).
    AnyMaster,
}

impl Proxy {
    /// Sends `request` (one raw RESP command) and returns its reply frame, after redirects
    /// and retries. Errors that reach the client are final.
    pub async fn forward(&self, target: Target, request: Bytes, proto: Proto) -> Bytes {
        let retry = &self.config.retry;
        let mut redirects = 0;
        let mut attempts = 0;
        // The node a redirect names, and whether it was an ASK (send ASKING first).
        let mut redirected: Option<(NodeConn, bool)> = None;
        loop {
            let (conn, asking) = match redirected.take() {
                Some((conn, asking)) => (Some(conn), asking),
                None => (
                    match target {
                        Target::Slot(slot) => self.topology.master_for_slot(slot, proto),
                        Target::AnyMaster => self.topology.any_master(proto),
                    },
                    false,
                ),
            };
            let Some(conn) = conn else {
                // The slot map does not cover the slot (yet): wait for a refresh.
                self.topology.request_refresh();
                if attempts >= retry.attempts {
                    return reply::error(reply::text::SLOT_UNSERVED);
                }
                metrics::retry(RetryReason::Unreachable);
                tokio::time::sleep(retry.backoff(attempts)).await;
                attempts += 1;
                continue;
            };
            let answer = conn.call(request.clone(), asking).await;
            let frame = match answer {
                Ok(frame) => frame,
                Err(BackendError::Lost(detail)) => {
                    self.topology.request_refresh();
                    return reply::outcome_unknown(conn.addr(), &detail);
                }
                Err(BackendError::NotSent(detail)) => {
                    self.topology.request_refresh();
                    if attempts >= retry.attempts {
                        return reply::unavailable(conn.addr(), &detail);
                    }
                    metrics::retry(RetryReason::Unreachable);
                    tokio::time::sleep(retry.backoff(attempts)).await;
                    attempts += 1;
                    continue;
                }
            };
            if frame.first() != Some(&b'-') {
                return frame;
            }
            match Redirect::classify(&frame, conn.addr()) {
                None | Some(Redirect::NoScript) => return frame,
                Some(Redirect::Moved { slot, addr }) => {
                    redirects += 1;
                    if redirects > retry.max_redirects {
                        return reply::error(reply::text::TOO_MANY_REDIRECTS);
                    }
                    metrics::redirect_moved();
                    self.topology.on_moved(slot, &addr);
                    redirected = Some((self.topology.node(&addr, proto), false));
                }
                Some(Redirect::Ask { addr, .. }) => {
                    redirects += 1;
                    if redirects > retry.max_redirects {
                        return reply::error(reply::text::TOO_MANY_REDIRECTS);
                    }
                    metrics::redirect_ask();
                    redirected = Some((self.topology.node(&addr, proto), true));
                }
                Some(retryable) => {
                    if matches!(
                        retryable,
                        Redirect::ReadOnly | Redirect::MasterDown | Redirect::ClusterDown
                    ) {
                        self.topology.request_refresh();
                    }
                    if attempts >= retry.attempts {
                        return frame;
                    }
                    if let Some(reason) = RetryReason::from_label(retryable.retry_reason()) {
                        metrics::retry(reason);
                    }
                    tokio::time::sleep(retry.backoff(attempts)).await;
                    attempts += 1;
                }
            }
        }
    }
}
