//! Commands the proxy answers itself because, to its clients, it is one server: CLUSTER
//! INFO/SLOTS/SHARDS/NODES/MYID describe a one-node cluster whose only node is the proxy
//! (so a cluster-aware client pointed at it stays on it), CLUSTER KEYSLOT is computed here,
//! INFO is one server's (see [`super::info`]), and CONFIG GET shows the proxy's port and
//! `cluster-enabled no`. `REPLICAOF NO ONE` is a no-op on a master, which the proxy shows
//! itself as.

use bytes::{Bytes, BytesMut};

use crate::command::Emulated;
use crate::protocol::{encode, AggregateKind, Proto, ReplyView};
use crate::reply;
use crate::route::{key_slot, SLOT_COUNT};

use crate::dispatch::{Proxy, Target};

impl Proxy {
    pub(in crate::dispatch) async fn emulate(
        &self,
        local: Emulated,
        request: &crate::protocol::Request,
        proto: Proto,
    ) -> Bytes {
        let (host, port) = self
            .listen_addr
            .rsplit_once(':')
            .unwrap_or(("127.0.0.1", "6380"));
        let port: u16 = port.parse().unwrap_or(0);
        let id = self.node_id();
        match local {
            Emulated::ClusterKeySlot => {
                encode::integer_frame(i64::from(key_slot(&request.args[2])))
            }
            Emulated::ClusterMyId => encode::bulk_frame(id.as_bytes()),
            Emulated::ClusterInfo => {
                let text = format!(
                    "cluster_state:ok\r\ncluster_slots_assigned:{n}\r\ncluster_slots_ok:{n}\r\n\
                     cluster_slots_pfail:0\r\ncluster_slots_fail:0\r\ncluster_known_nodes:1\r\n\
                     cluster_size:1\r\ncluster_current_epoch:1\r\ncluster_my_epoch:1\r\n\
                     cluster_stats_messages_sent:0\r\ncluster_stats_messages_received:0\r\n\
                     total_cluster_links_buffer_limit_exceeded:0\r\n",
                    n = SLOT_COUNT
                );
                verbatim(text.as_bytes(), proto)
            }
            Emulated::ClusterNodes => {
                let line = format!(
                    "{id} {host}:{port}@0 myself,master - 0 0 1 connected 0-{}\n",
                    SLOT_COUNT - 1
                );
                verbatim(line.as_bytes(), proto)
            }
            Emulated::ClusterSlots => cluster_slots(host, port, &id),
            Emulated::ClusterShards => cluster_shards(host, port, &id, proto),
            // A subcommand the servers do not have gets their error, not the proxy's.
            Emulated::ClusterOther
                if self
                    .commands
                    .lookup(&request.args)
                    .is_some_and(|spec| !spec.name.contains('|')) =>
            {
                reply::unknown_subcommand("cluster", &request.args[1])
            }
            Emulated::ClusterOther => {
                reply::error(&reply::refusals::cluster_subcommand_unavailable(
                    &String::from_utf8_lossy(&request.args[1]).to_ascii_uppercase(),
                ))
            }
            Emulated::ReplicaOf => self.replicaof(request, proto).await,
            Emulated::Info => self.info(request, proto).await,
            Emulated::ConfigGet => {
                let upstream = self
                    .upstream
                    .forward(Target::AnyMaster, request.raw.clone(), proto)
                    .await;
                config_as_one_node(&upstream, &port.to_string()).unwrap_or(upstream)
            }
        }
    }

    /// REPLICAOF / SLAVEOF: `NO ONE` is `+OK`, a no-op on the master the proxy shows
    /// itself as; a master's address (reached only when the policy allows it) is sent on
    /// and gets the node's own answer.
    async fn replicaof(&self, request: &crate::protocol::Request, proto: Proto) -> Bytes {
        if is_no_one(&request.args) {
            return Bytes::from_static(b"+OK\r\n");
        }
        self.upstream
            .forward(Target::AnyMaster, request.raw.clone(), proto)
            .await
    }

    /// Whether `request` is a REPLICAOF or SLAVEOF the proxy answers itself, a no-op the
    /// command policy has no reason to refuse.
    pub(in crate::dispatch) fn is_replicaof_no_one(
        spec: &crate::command::CommandSpec,
        args: &[Bytes],
    ) -> bool {
        spec.shape == crate::command::Shape::Emulated(Emulated::ReplicaOf) && is_no_one(args)
    }

    /// A stable 40-hex-digit node id derived from the listen address.
    fn node_id(&self) -> String {
        let mut hash: u64 = 0xcbf29ce484222325;
        let mut id = String::with_capacity(40);
        while id.len() < 40 {
            for b in self.listen_addr.bytes() {
                hash = (hash ^ u64::from(b)).wrapping_mul(0x100000001b3);
            }
            id.push_str(&format!("{hash:016x}"));
        }
        id.truncate(40);
        id
    }
}

/// CLUSTER SLOTS of a one-node cluster: every slot on the proxy's own address.
fn cluster_slots(host: &str, port: u16, id: &str) -> Bytes {
    let mut out = BytesMut::new();
    encode::array_header(&mut out, 1);
    encode::array_header(&mut out, 3);
    encode::integer(&mut out, 0);
    encode::integer(&mut out, SLOT_COUNT as i64 - 1);
    encode::array_header(&mut out, 3);
    encode::bulk(&mut out, host.as_bytes());
    encode::integer(&mut out, i64::from(port));
    encode::bulk(&mut out, id.as_bytes());
    out.freeze()
}

/// CLUSTER SHARDS of a one-node cluster: one shard, all slots, the proxy as its master.
fn cluster_shards(host: &str, port: u16, id: &str, proto: Proto) -> Bytes {
    let mut out = BytesMut::new();
    encode::array_header(&mut out, 1);
    encode::map_header(&mut out, proto, 2);
    encode::bulk(&mut out, b"slots");
    encode::array_header(&mut out, 2);
    encode::integer(&mut out, 0);
    encode::integer(&mut out, SLOT_COUNT as i64 - 1);
    encode::bulk(&mut out, b"nodes");
    encode::array_header(&mut out, 1);
    encode::map_header(&mut out, proto, 7);
    for (k, v) in [("id", id), ("ip", host), ("endpoint", host)] {
        encode::bulk(&mut out, k.as_bytes());
        encode::bulk(&mut out, v.as_bytes());
    }
    encode::bulk(&mut out, b"port");
    encode::integer(&mut out, i64::from(port));
    for (k, v) in [("role", "master"), ("health", "online")] {
        encode::bulk(&mut out, k.as_bytes());
        encode::bulk(&mut out, v.as_bytes());
    }
    encode::bulk(&mut out, b"replication-offset");
    encode::integer(&mut out, 0);
    out.freeze()
}

/// Whether REPLICAOF's or SLAVEOF's arguments are `NO ONE` (any case), as Redis reads them.
fn is_no_one(args: &[Bytes]) -> bool {
    matches!(args, [_, no, one] if no.eq_ignore_ascii_case(b"no") && one.eq_ignore_ascii_case(b"one"))
}

/// A master's CONFIG GET reply (an array, or a RESP3 map, of name/value bulk strings)
/// with the values a client of one server would see: the proxy's `port`, and
/// `cluster-enabled no` (the proxy is not a cluster to its clients). `None` for any other
/// reply (an error passes as it is).
fn config_as_one_node(frame: &[u8], port: &str) -> Option<Bytes> {
    let ReplyView::Aggregate(kind, elements) = ReplyView::parse(frame).ok()? else {
        return None;
    };
    if elements.len() % 2 != 0 {
        return None;
    }
    let mut out = BytesMut::with_capacity(frame.len() + 8);
    if kind == AggregateKind::Map {
        encode::map_header(&mut out, Proto::Resp3, elements.len() / 2);
    } else {
        encode::array_header(&mut out, elements.len());
    }
    let mut elements = elements;
    while let (Some(name), Some(value)) = (elements.next(), elements.next()) {
        let (name, value) = (name.text()?, value.text()?);
        let value: &[u8] = match name {
            b"port" => port.as_bytes(),
            b"cluster-enabled" => b"no",
            _ => value,
        };
        encode::bulk(&mut out, name);
        encode::bulk(&mut out, value);
    }
    Some(out.freeze())
}

/// Text replies such as INFO: a verbatim string in RESP3, a bulk string in RESP2.
pub(in crate::dispatch) fn verbatim(text: &[u8], proto: Proto) -> Bytes {
    let mut out = BytesMut::with_capacity(text.len() + 24);
    encode::verbatim(&mut out, proto, *b"txt", text);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_no_one_is_replicaof_a_no_op() {
        let args = |line: &str| -> Vec<Bytes> {
            line.split(' ')
                .map(|w| Bytes::copy_from_slice(w.as_bytes()))
                .collect()
        };
        assert!(is_no_one(&args("REPLICAOF NO ONE")));
        assert!(is_no_one(&args("slaveof no One")));
        assert!(!is_no_one(&args("REPLICAOF 127.0.0.1 6379")));
        assert!(!is_no_one(&args("REPLICAOF NO ONE extra")));
        assert!(!is_no_one(&args("REPLICAOF NO")));
        assert!(!is_no_one(&args("REPLICAOF ONE NO")));
    }

    #[test]
    fn config_get_shows_the_proxys_port_and_no_cluster() {
        let master = b"*6\r\n$4\r\nport\r\n$4\r\n7001\r\n$15\r\ncluster-enabled\r\n$3\r\nyes\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n";
        assert_eq!(
            config_as_one_node(master, "6380").unwrap(),
            Bytes::from_static(b"*6\r\n$4\r\nport\r\n$4\r\n6380\r\n$15\r\ncluster-enabled\r\n$2\r\nno\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n")
        );
        let map = b"%1\r\n$4\r\nport\r\n$4\r\n7001\r\n";
        assert_eq!(
            config_as_one_node(map, "6380").unwrap(),
            Bytes::from_static(b"%1\r\n$4\r\nport\r\n$4\r\n6380\r\n")
        );
        // A value named "port" is not a name: only names pick what changes.
        let tricky = b"*2\r\n$3\r\ndir\r\n$4\r\nport\r\n";
        assert_eq!(
            &config_as_one_node(tricky, "6380").unwrap()[..],
            &tricky[..]
        );
        assert_eq!(
            config_as_one_node(b"*0\r\n", "1").unwrap(),
            Bytes::from_static(b"*0\r\n")
        );
        assert!(config_as_one_node(b"-ERR x\r\n", "1").is_none());
        assert!(config_as_one_node(b"*2\r\n$4\r\nport\r\n", "1").is_none());
    }

    #[test]
    fn verbatim_by_protocol() {
        assert_eq!(
            verbatim(b"ab", Proto::Resp2),
            Bytes::from_static(b"$2\r\nab\r\n")
        );
        assert_eq!(
            verbatim(b"ab", Proto::Resp3),
            Bytes::from_static(b"=6\r\ntxt:ab\r\n")
        );
    }
}
