//! WAIT, answered from replication offsets.
//!
//! Redis counts the replicas that acknowledged the offset of the calling connection's last
//! write. A client's writes reach its master over a connection shared with other clients,
//! where a WAIT would stall every one of them; a connection of its own has written nothing,
//! so a WAIT there counts every replica at once, whether or not it has the client's writes.
//! Instead the master's replication offset, read once the client's earlier writes were
//! answered (WAIT is a sequence point), bounds those writes, and a replica counts once its
//! own INFO reports it has processed that offset. That never counts more replicas than a
//! WAIT on the client's own connection would; polled, so the answer can come one poll
//! interval later than Redis's.

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use tokio::time::Instant;

use crate::backend::NodeConn;
use crate::protocol::{encode, Proto, Request};
use crate::route::NodeAddr;

use super::info::info_text;
use crate::dispatch::{Proxy, Target};

const INFO_REPLICATION: &[u8] = b"*2\r\n$4\r\nINFO\r\n$11\r\nreplication\r\n";
/// Pause between two looks at the replicas: short at first (a replica on the same network
/// usually processes a write within a millisecond), doubling up to the maximum.
const POLL_FIRST: Duration = Duration::from_millis(1);
const POLL_MAX: Duration = Duration::from_millis(20);
/// Longest wait for one replica's INFO in one look; one that does not answer counts as behind.
const ASK_TIMEOUT: Duration = Duration::from_millis(200);

/// What the master's `INFO replication` says.
#[derive(Debug, PartialEq, Eq)]
struct MasterState {
    /// `master_repl_offset`: everything the master took so far, the client's writes included.
    offset: u64,
    /// The replicas whose link is up (`slaveN:ip=..,port=..,state=online,..`).
    replicas: Vec<NodeAddr>,
}

impl MasterState {
    fn parse(info: &str) -> Option<MasterState> {
        let mut offset = None;
        let mut replicas = Vec::new();
        for line in info.lines() {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            match name {
                "role" if value != "master" => return None,
                "master_repl_offset" => offset = value.parse().ok(),
                _ if name.starts_with("slave") && name[5..].bytes().all(|b| b.is_ascii_digit()) => {
                    let field = |key: &str| {
                        value
                            .split(',')
                            .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
                    };
                    if let (Some(ip), Some(port), Some("online")) =
                        (field("ip"), field("port"), field("state"))
                    {
                        let addr = if ip.contains(':') {
                            format!("[{ip}]:{port}")
                        } else {
                            format!("{ip}:{port}")
                        };
                        replicas.push(NodeAddr::from(addr));
                    }
                }
                _ => {}
            }
        }
        Some(MasterState {
            offset: offset?,
            replicas,
        })
    }
}

/// `slave_repl_offset` from a replica's `INFO replication`: how much of the master's stream
/// it has processed.
fn processed_offset(info: &str) -> Option<u64> {
    info.lines()
        .find_map(|line| line.strip_prefix("slave_repl_offset:"))
        .and_then(|value| value.trim().parse().ok())
}

/// `WAIT numreplicas timeout` as Redis accepts it: any integer, and a timeout in
/// milliseconds that is not negative (0: no limit).
fn wait_arguments(args: &[Bytes]) -> Option<(i64, u64)> {
    let [_, wanted, timeout] = args else {
        return None;
    };
    let wanted = crate::protocol::parse_i64(wanted)?;
    let timeout = u64::try_from(crate::protocol::parse_i64(timeout)?).ok()?;
    Some((wanted, timeout))
}

impl Proxy {
    /// Answers WAIT for a client whose last write went to the master of `slot`.
    pub async fn wait_for_replicas(&self, slot: u16, request: Request, proto: Proto) -> Bytes {
        let master = self.topology.master_for_slot(slot, Proto::Resp2);
        let (Some((wanted, timeout)), Some(master)) = (wait_arguments(&request.args), master)
        else {
            // Redis's own error for bad arguments; the retries of any command for a slot
            // without a master.
            return self
                .upstream
                .run_blocking(Target::Slot(slot), request.raw, proto)
                .await;
        };
        let _blocked = crate::metrics::BlockedClient::enter();
        let state = match master
            .call(Bytes::from_static(INFO_REPLICATION), false)
            .await
        {
            Ok(reply) => info_text(&reply).and_then(|info| MasterState::parse(&info)),
            Err(error) => return crate::reply::unavailable(master.addr(), &error.to_string()),
        };
        let Some(state) = state else {
            return crate::reply::error(&crate::reply::refusals::wait_without_offset(
                master.addr(),
            ));
        };
        let replicas: Vec<NodeConn> = state
            .replicas
            .iter()
            // Shared with later WAITs: only WAIT asks replicas anything, and INFO is quick.
            .map(|addr| {
                self.topology
                    .node(&self.topology.remapped(addr), Proto::Resp2)
            })
            .collect();
        let deadline = (timeout > 0).then(|| Instant::now() + Duration::from_millis(timeout));
        let mut pause = POLL_FIRST;
        loop {
            let caught_up = replicas_at(&replicas, state.offset, deadline).await;
            let caught_up = i64::try_from(caught_up).unwrap_or(i64::MAX);
            let now = Instant::now();
            if caught_up >= wanted || deadline.is_some_and(|deadline| now >= deadline) {
                return encode::integer_frame(caught_up);
            }
            let nap = deadline.map_or(pause, |deadline| pause.min(deadline - now));
            tokio::time::sleep(nap).await;
            pause = (pause * 2).min(POLL_MAX);
        }
    }
}

/// How many of `replicas` report having processed `offset`, asking them all at once.
async fn replicas_at(replicas: &[NodeConn], offset: u64, deadline: Option<Instant>) -> usize {
    let limit = deadline.map_or(ASK_TIMEOUT, |deadline| {
        ASK_TIMEOUT.min(deadline.saturating_duration_since(Instant::now()))
    });
    let asks = replicas.iter().map(|conn| {
        tokio::time::timeout(
            limit,
            conn.call(Bytes::from_static(INFO_REPLICATION), false),
        )
    });
    join_all(asks)
        .await
        .into_iter()
        .filter_map(|answer| {
            let reply = answer.ok()?.ok()?;
            processed_offset(&info_text(&reply)?)
        })
        .filter(|&processed| processed >= offset)
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn master_state_lists_online_replicas_and_the_offset() {
        let info = "# Replication\r\nrole:master\r\nconnected_slaves:3\r\n\
            slave0:ip=10.0.0.2,port=6380,state=online,offset=120,lag=0\r\n\
            slave1:ip=10.0.0.3,port=6380,state=wait_bgsave,offset=0,lag=0\r\n\
            slave2:ip=::1,port=6381,state=online,offset=118,lag=1\r\n\
            master_failover_state:no-failover\r\nmaster_repl_offset:120\r\n";
        assert_eq!(
            MasterState::parse(info),
            Some(MasterState {
                offset: 120,
                replicas: vec![
                    NodeAddr::from("10.0.0.2:6380"),
                    NodeAddr::from("[::1]:6381")
                ],
            })
        );
        assert_eq!(
            MasterState::parse("role:slave\r\nmaster_repl_offset:5\r\n"),
            None
        );
        assert_eq!(MasterState::parse("role:master\r\n"), None);
    }

    #[test]
    fn a_replica_reports_what_it_processed() {
        let info = "role:slave\r\nmaster_link_status:up\r\nslave_repl_offset:4242\r\n";
        assert_eq!(processed_offset(info), Some(4242));
        assert_eq!(processed_offset("role:master\r\n"), None);
    }

    #[test]
    fn wait_arguments_follow_redis() {
        let args = |a: &[&str]| -> Vec<Bytes> {
            a.iter()
                .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                .collect()
        };
        assert_eq!(wait_arguments(&args(&["WAIT", "1", "100"])), Some((1, 100)));
        assert_eq!(wait_arguments(&args(&["WAIT", "-1", "0"])), Some((-1, 0)));
        assert_eq!(wait_arguments(&args(&["WAIT", "1", "-5"])), None);
        assert_eq!(wait_arguments(&args(&["WAIT", "x", "5"])), None);
        assert_eq!(wait_arguments(&args(&["WAIT", "1"])), None);
    }
}
