//! Why the upstream could not be set up or its map read: the configuration or the
//! certificates it names, the node that did not give its slot map, or the Sentinels that
//! named no usable master. Each error names the node or Sentinel, so a log line says
//! where to look.

use crate::backend::BackendError;
use crate::config::ConfigError;
use crate::route::NodeAddr;
use crate::tls::TlsError;

/// Why a topology could not be built or refreshed.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The configuration names no usable upstream.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `backend.tls` could not be used.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// A cluster upstream with no node to ask.
    #[error("no seed nodes")]
    NoSeeds,
    /// The last node asked did not give its slot map (every node before it failed too).
    #[error("{addr}: {source}")]
    SlotMap {
        /// The node asked.
        addr: NodeAddr,
        /// Why its map could not be read.
        source: SlotMapError,
    },
    /// Nodes answered, but the map leaves slots unserved.
    #[error("slot map incomplete")]
    Incomplete,
    /// No Sentinel named a master that says it is one.
    #[error(transparent)]
    Sentinel(#[from] SentinelError),
}

/// Why one cluster node's slot map could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SlotMapError {
    /// The call failed (connection refused, closed, reset).
    #[error(transparent)]
    Call(#[from] BackendError),
    /// The node did not answer in time.
    #[error("timed out")]
    TimedOut,
    /// The node answered `CLUSTER SLOTS` with an error (the text after its `-`).
    #[error("{0}")]
    Refused(String),
    /// The reply is not a slot map.
    #[error("{0}")]
    Malformed(String),
    /// The offline tools need every slot served.
    #[error("the cluster serves {covered} of 16384 slots")]
    Incomplete {
        /// Slots the map covers.
        covered: usize,
    },
}

/// Why no master of a Sentinel group could be used.
#[derive(Debug, thiserror::Error)]
pub enum SentinelError {
    /// No Sentinel answered with the master's address: each one's reason.
    #[error("{}", unanswered(.0))]
    Unanswered(Vec<(String, SentinelAskError)>),
    /// The named master could not be asked its role.
    #[error("master {addr} (named by {named_by}): {source}")]
    Unreachable {
        /// The master's address.
        addr: NodeAddr,
        /// Who named it (a Sentinel, or the `+switch-master` event).
        named_by: String,
        /// Why the call failed.
        source: BackendError,
    },
    /// The named master did not answer `ROLE` in time.
    #[error("master {addr} did not answer ROLE in time")]
    RoleTimedOut {
        /// The master's address.
        addr: NodeAddr,
    },
    /// The `ROLE` reply was an error or could not be read.
    #[error("{0}")]
    Role(String),
    /// The named node says it is not a master.
    #[error(
        "{addr}, the master {named_by} names for '{master_name}', says its role is \
         '{role}': not used until it is a master"
    )]
    NotMaster {
        /// The node's address.
        addr: NodeAddr,
        /// Who named it.
        named_by: String,
        /// The name the Sentinels monitor.
        master_name: String,
        /// The role it gave.
        role: String,
    },
}

fn unanswered(failures: &[(String, SentinelAskError)]) -> String {
    failures
        .iter()
        .map(|(sentinel, error)| format!("Sentinel {sentinel}: {error}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Why one Sentinel gave no master address, or its event subscription failed.
#[derive(Debug, thiserror::Error)]
pub enum SentinelAskError {
    /// The connection could not be opened.
    #[error("{0}")]
    Connect(String),
    /// Writing the request failed.
    #[error("write failed: {0}")]
    Write(std::io::Error),
    /// Reading failed.
    #[error("read failed: {0}")]
    Read(std::io::Error),
    /// The Sentinel closed the connection.
    #[error("connection closed")]
    Closed,
    /// The Sentinel sent something that is not RESP.
    #[error("{0}")]
    Protocol(String),
    /// No answer within the ask timeout.
    #[error("no answer in time")]
    TimedOut,
    /// The Sentinel does not monitor the master by that name.
    #[error("monitors no master named '{name}'")]
    NoSuchMaster {
        /// The name asked about.
        name: String,
    },
    /// The Sentinel answered with an error.
    #[error("{0}")]
    Refused(String),
    /// The reply is not `[ip, port]`.
    #[error("unreadable master address")]
    UnreadableAddress,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresh_error_names_the_node_and_why() {
        let error = TopologyError::SlotMap {
            addr: "10.0.0.1:7000".into(),
            source: SlotMapError::Incomplete { covered: 100 },
        };
        assert_eq!(
            error.to_string(),
            "10.0.0.1:7000: the cluster serves 100 of 16384 slots"
        );
        let error = TopologyError::SlotMap {
            addr: "10.0.0.1:7000".into(),
            source: SlotMapError::Call(BackendError::NotSent("connection refused".into())),
        };
        assert_eq!(
            error.to_string(),
            "10.0.0.1:7000: not sent: connection refused"
        );
        assert!(
            std::error::Error::source(&error).is_some(),
            "the cause is kept"
        );
    }

    #[test]
    fn sentinel_errors_read_as_the_operator_saw_them() {
        let error = TopologyError::from(SentinelError::Unanswered(vec![
            ("10.0.0.1:26379".into(), SentinelAskError::TimedOut),
            (
                "10.0.0.2:26379".into(),
                SentinelAskError::NoSuchMaster {
                    name: "mymaster".into(),
                },
            ),
        ]));
        assert_eq!(
            error.to_string(),
            "Sentinel 10.0.0.1:26379: no answer in time; \
             Sentinel 10.0.0.2:26379: monitors no master named 'mymaster'"
        );
        let error = SentinelError::NotMaster {
            addr: "10.0.0.3:6379".into(),
            named_by: "Sentinel 10.0.0.1:26379".into(),
            master_name: "mymaster".into(),
            role: "slave".into(),
        };
        assert_eq!(
            error.to_string(),
            "10.0.0.3:6379, the master Sentinel 10.0.0.1:26379 names for 'mymaster', says its \
             role is 'slave': not used until it is a master"
        );
    }
}
