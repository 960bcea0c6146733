//! A transaction against a master busy with a script, answered as Redis answers it.
//!
//! Redis refuses a command with `-BUSY` while a script runs past `busy-reply-threshold`,
//! also between MULTI and EXEC, and the refusal flags the transaction: its EXEC answers
//! EXECABORT ("because of previous errors" once the script is over, "because of: BUSY
//! ..." while it still runs, since EXEC is refused too). The proxy queues the commands
//! itself, so to see that refusal it asks the transaction's master at queue time, with a
//! command the node refuses the same way (`Proxy::busy_probe`), but only while one of its
//! clients' scripts runs there: the proxy knows those, as they hold a connection of the
//! script pool (or held one and went away before the script's end, until a probe finds
//! the node idle). A script some other client started on the node directly is not seen at
//! queue time; the node's own answer to the block at EXEC (EXECABORT while busy) still
//! comes through.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;

use crate::command::CommandFlags;
use crate::dispatch::Proxy;
use crate::protocol::Request;
use crate::reply;

use super::{EXECABORT, QUEUED};

/// Redis's EXECABORT when EXEC itself is refused, before the refusal's text.
const EXECABORT_BECAUSE: &str = reply::transaction::EXECABORT_BECAUSE;

/// Whether a queued command met `-BUSY`, set by the future that answered it.
#[derive(Debug, Default, Clone)]
pub(super) struct BusyRefused(Arc<AtomicBool>);

impl BusyRefused {
    pub(super) fn happened(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// The answer to `request`, just queued for the master of `slot`, when that master may be
/// busy with a script: `-BUSY` (noting it in `refused`) or `+QUEUED`, once the node
/// answered. `None`: `+QUEUED` now.
pub(super) fn queued_or_busy(
    proxy: &Proxy,
    request: &Request,
    slot: Option<u16>,
    refused: &BusyRefused,
) -> Option<BoxFuture<'static, Bytes>> {
    let spec = proxy.commands.lookup(&request.args)?;
    if spec.flags.has(CommandFlags::ALLOW_BUSY) {
        return None;
    }
    let probe = proxy.busy_probe(slot?)?;
    let refused = refused.0.clone();
    Some(
        async move {
            match probe.await {
                Some(busy) => {
                    refused.store(true, Ordering::Release);
                    busy
                }
                None => Bytes::from_static(QUEUED),
            }
        }
        .boxed(),
    )
}

/// EXEC's answer to a transaction with a refused command, on the master of `slot`:
/// EXECABORT because of `-BUSY` while that master is still busy, else because of
/// previous errors. `None`: the latter, now.
pub(super) fn exec_abort(proxy: &Proxy, slot: Option<u16>) -> Option<BoxFuture<'static, Bytes>> {
    let probe = proxy.busy_probe(slot?)?;
    Some(
        async move {
            match probe.await {
                Some(busy) => because_of(&busy),
                None => reply::error(EXECABORT),
            }
        }
        .boxed(),
    )
}

/// EXECABORT naming `refusal` (an error frame) as the reason, as Redis words it.
fn because_of(refusal: &[u8]) -> Bytes {
    let text = refusal
        .strip_prefix(b"-")
        .and_then(|rest| rest.strip_suffix(b"\r\n"))
        .unwrap_or(refusal);
    reply::error(&format!(
        "{EXECABORT_BECAUSE}{}",
        String::from_utf8_lossy(text)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_abort_because_of_busy_is_worded_as_redis_words_it() {
        // Redis 7.0's reply to EXEC while a script is busy.
        let busy = b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
        assert_eq!(
            &because_of(busy)[..],
            &b"-EXECABORT Transaction discarded because of: BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"[..]
        );
    }
}
