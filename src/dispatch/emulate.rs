//! Commands the proxy answers itself because, to its clients, it is one server: CLUSTER
//! INFO/SLOTS/SHARDS/NODES/MYID describe a one-node cluster whose only node is the proxy
//! (so a cluster-aware client pointed at it stays on it), CLUSTER KEYSLOT is computed here,
//! and INFO is a master's INFO with `cluster_enabled:0` and a `# Proxy` section.

use bytes::{BufMut, Bytes, BytesMut};

use crate::command::CommandSpec;
use crate::protocol::Proto;
use crate::reply;
use crate::route::{key_slot, SLOT_COUNT};

use super::{Proxy, Target};

/// A command answered (at least partly) by the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Local {
    ClusterInfo,
    ClusterSlots,
    ClusterShards,
    ClusterNodes,
    ClusterMyId,
    ClusterKeySlot,
    /// Other CLUSTER subcommands address real nodes and make no sense through a proxy.
    ClusterOther,
    Info,
}

impl Local {
    /// Whether the proxy answers this command itself.
    pub fn classify(spec: &CommandSpec, _args: &[Bytes]) -> Option<Local> {
        Some(match spec.name.as_str() {
            "cluster|info" => Local::ClusterInfo,
            "cluster|slots" => Local::ClusterSlots,
            "cluster|shards" => Local::ClusterShards,
            "cluster|nodes" => Local::ClusterNodes,
            "cluster|myid" => Local::ClusterMyId,
            "cluster|keyslot" => Local::ClusterKeySlot,
            "cluster|countkeysinslot" | "cluster|getkeysinslot" | "cluster|help" => return None,
            name if name.starts_with("cluster") => Local::ClusterOther,
            "info" => Local::Info,
            _ => return None,
        })
    }
}

impl Proxy {
    pub(super) async fn emulate(
        &self,
        local: Local,
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
            Local::ClusterKeySlot => Bytes::from(format!(":{}\r\n", key_slot(&request.args[2]))),
            Local::ClusterMyId => bulk(id.as_bytes()),
            Local::ClusterInfo => {
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
            Local::ClusterNodes => {
                let line = format!(
                    "{id} {host}:{port}@0 myself,master - 0 0 1 connected 0-{}\n",
                    SLOT_COUNT - 1
                );
                verbatim(line.as_bytes(), proto)
            }
            Local::ClusterSlots => {
                let mut out = BytesMut::new();
                out.put_slice(b"*1\r\n*3\r\n:0\r\n");
                out.put_slice(format!(":{}\r\n*3\r\n", SLOT_COUNT - 1).as_bytes());
                out.put_slice(&bulk(host.as_bytes()));
                out.put_slice(format!(":{port}\r\n").as_bytes());
                out.put_slice(&bulk(id.as_bytes()));
                out.freeze()
            }
            Local::ClusterShards => {
                let mut out = BytesMut::new();
                out.put_slice(b"*1\r\n");
                map_header(&mut out, 2, proto);
                out.put_slice(&bulk(b"slots"));
                out.put_slice(format!("*2\r\n:0\r\n:{}\r\n", SLOT_COUNT - 1).as_bytes());
                out.put_slice(&bulk(b"nodes"));
                out.put_slice(b"*1\r\n");
                map_header(&mut out, 7, proto);
                for (k, v) in [("id", id.as_str()), ("ip", host), ("endpoint", host)] {
                    out.put_slice(&bulk(k.as_bytes()));
                    out.put_slice(&bulk(v.as_bytes()));
                }
                out.put_slice(&bulk(b"port"));
                out.put_slice(format!(":{port}\r\n").as_bytes());
                for (k, v) in [("role", "master"), ("health", "online")] {
                    out.put_slice(&bulk(k.as_bytes()));
                    out.put_slice(&bulk(v.as_bytes()));
                }
                out.put_slice(&bulk(b"replication-offset"));
                out.put_slice(b":0\r\n");
                out.freeze()
            }
            Local::ClusterOther => reply::error(&format!(
                "ERR proxy: CLUSTER {} is not available through slotbridge (it addresses real cluster nodes)",
                String::from_utf8_lossy(&request.args[1]).to_ascii_uppercase()
            )),
            Local::Info => {
                let upstream = self.forward(Target::AnyMaster, request.raw.clone(), proto).await;
                match info_text(&upstream) {
                    Some(text) => verbatim(self.patch_info(&text).as_bytes(), proto),
                    None => upstream,
                }
            }
        }
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

    fn patch_info(&self, text: &str) -> String {
        let mut out = text.replace("cluster_enabled:1", "cluster_enabled:0");
        let routing = self.topology.routing();
        if !out.ends_with("\r\n") && !out.is_empty() {
            out.push_str("\r\n");
        }
        out.push_str(&format!(
            "\r\n# Proxy\r\nproxy_name:slotbridge\r\nproxy_version:{}\r\nproxy_uptime_in_seconds:{}\r\n\
             proxy_upstream:{}\r\nproxy_masters:{}\r\nproxy_slots_covered:{}\r\n",
            env!("CARGO_PKG_VERSION"),
            self.started.elapsed().as_secs(),
            if self.topology.is_standalone() { "standalone" } else { "cluster" },
            routing.map.masters().len(),
            routing.map.slots_covered(),
        ));
        out
    }
}

/// The text of a bulk (`$`) or verbatim (`=`, after its `txt:` tag) string reply.
fn info_text(frame: &[u8]) -> Option<String> {
    let header_end = frame.windows(2).position(|w| w == b"\r\n")?;
    let len: usize = std::str::from_utf8(&frame[1..header_end])
        .ok()?
        .parse()
        .ok()?;
    let body = frame.get(header_end + 2..header_end + 2 + len)?;
    let body = match frame.first()? {
        b'$' => body,
        b'=' => body.get(4..)?,
        _ => return None,
    };
    Some(String::from_utf8_lossy(body).into_owned())
}

fn bulk(data: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(data.len() + 16);
    out.put_slice(format!("${}\r\n", data.len()).as_bytes());
    out.put_slice(data);
    out.put_slice(b"\r\n");
    out.freeze()
}

/// Text replies such as INFO: a verbatim string in RESP3, a bulk string in RESP2.
fn verbatim(text: &[u8], proto: Proto) -> Bytes {
    match proto {
        Proto::Resp2 => bulk(text),
        Proto::Resp3 => {
            let mut out = BytesMut::with_capacity(text.len() + 20);
            out.put_slice(format!("={}\r\ntxt:", text.len() + 4).as_bytes());
            out.put_slice(text);
            out.put_slice(b"\r\n");
            out.freeze()
        }
    }
}

fn map_header(out: &mut BytesMut, pairs: usize, proto: Proto) {
    match proto {
        Proto::Resp2 => out.put_slice(format!("*{}\r\n", pairs * 2).as_bytes()),
        Proto::Resp3 => out.put_slice(format!("%{pairs}\r\n").as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_text_reads_bulk_and_verbatim() {
        assert_eq!(info_text(b"$5\r\na:1\r\n\r\n").as_deref(), Some("a:1\r\n"));
        assert_eq!(
            info_text(b"=9\r\ntxt:a:1\r\n\r\n").as_deref(),
            Some("a:1\r\n")
        );
        assert_eq!(info_text(b"-ERR x\r\n"), None);
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
