//! Commands the proxy answers itself because, to its clients, it is one server: CLUSTER
//! INFO/SLOTS/SHARDS/NODES/MYID describe a one-node cluster whose only node is the proxy
//! (so a cluster-aware client pointed at it stays on it), CLUSTER KEYSLOT is computed here,
//! INFO is a master's INFO with `cluster_enabled:0`, the keyspace of all masters summed,
//! and a `# Proxy` section, and CONFIG GET shows the proxy's port and `cluster-enabled no`.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::future::join_all;

use crate::command::value::{decode_reply, Value};
use crate::command::CommandSpec;
use crate::protocol::{encode, Proto};
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
    /// CONFIG GET: a master's answer with `port` and `cluster-enabled` as the proxy's.
    ConfigGet,
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
            "config|get" => Local::ConfigGet,
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
            Local::ClusterKeySlot => {
                encode::integer_frame(i64::from(key_slot(&request.args[2])))
            }
            Local::ClusterMyId => encode::bulk_frame(id.as_bytes()),
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
            Local::ClusterShards => {
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
                for (k, v) in [("id", id.as_str()), ("ip", host), ("endpoint", host)] {
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
            Local::ClusterOther => reply::error(&format!(
                "ERR proxy: CLUSTER {} is not available through slotbridge (it addresses real cluster nodes)",
                String::from_utf8_lossy(&request.args[1]).to_ascii_uppercase()
            )),
            Local::Info => self.info(request, proto).await,
            Local::ConfigGet => {
                let upstream = self
                    .forward(Target::AnyMaster, request.raw.clone(), proto)
                    .await;
                config_as_one_node(&upstream, &port.to_string()).unwrap_or(upstream)
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

    /// INFO as one Redis would answer it: a master's sections as the proxy's own (see
    /// [`as_one_node`]), the keyspace summed over every master, and a `# Proxy` section.
    async fn info(&self, request: &crate::protocol::Request, proto: Proto) -> Bytes {
        let wanted = InfoSections::of(&request.args[1..]);
        let upstream = self
            .forward(Target::AnyMaster, request.raw.clone(), proto)
            .await;
        let Some(text) = info_text(&upstream) else {
            return upstream;
        };
        let keyspace = if wanted.keyspace {
            Some(self.keyspace_of_all_masters().await)
        } else {
            None
        };
        let port = self
            .listen_addr
            .rsplit_once(':')
            .map_or("0", |(_, port)| port);
        let clients = crate::metrics::totals().clients.max(0);
        let mut sections = split_sections(&as_one_node(&text, port, clients));
        if let Some((keyspace, answered)) = keyspace {
            let body = keyspace.lines();
            match sections
                .iter_mut()
                .find(|s| s.name.eq_ignore_ascii_case("keyspace"))
            {
                Some(section) => section.lines = body,
                None => sections.push(Section {
                    name: "Keyspace".into(),
                    lines: body,
                }),
            }
            if wanted.proxy {
                sections.push(self.proxy_section(Some(answered)));
            }
        } else if wanted.proxy {
            sections.push(self.proxy_section(None));
        }
        verbatim(join_sections(&sections).as_bytes(), proto)
    }

    /// `INFO keyspace` of every master, summed; and how many masters answered.
    async fn keyspace_of_all_masters(&self) -> (Keyspace, usize) {
        let routing = arc_swap::Guard::into_inner(self.topology.routing());
        let asks = routing.masters().iter().map(|conns| {
            let call = conns.get(Proto::Resp2).call(
                Bytes::from_static(b"*2\r\n$4\r\nINFO\r\n$8\r\nkeyspace\r\n"),
                false,
            );
            tokio::time::timeout(KEYSPACE_TIMEOUT, call)
        });
        let mut total = Keyspace::default();
        let mut answered = 0;
        for reply in join_all(asks).await {
            if let Some(text) = reply.ok().and_then(Result::ok).and_then(|r| info_text(&r)) {
                total.add(&text);
                answered += 1;
            }
        }
        (total, answered)
    }

    fn proxy_section(&self, keyspace_answered: Option<usize>) -> Section {
        let routing = self.topology.routing();
        let totals = crate::metrics::totals();
        let mut lines = vec![
            "proxy_name:slotbridge".to_string(),
            format!("proxy_version:{}", env!("CARGO_PKG_VERSION")),
            format!(
                "proxy_uptime_in_seconds:{}",
                self.started.elapsed().as_secs()
            ),
            format!(
                "proxy_upstream:{}",
                if self.topology.is_standalone() {
                    "standalone"
                } else {
                    "cluster"
                }
            ),
            format!("proxy_connected_clients:{}", totals.clients.max(0)),
            format!("proxy_masters:{}", routing.map.masters().len()),
            format!("proxy_slots_covered:{}", routing.map.slots_covered()),
            format!("proxy_redirects_moved:{}", totals.moved),
            format!("proxy_redirects_ask:{}", totals.ask),
            format!("proxy_retries:{}", totals.retries),
            format!("proxy_topology_refreshes_ok:{}", totals.refreshes_ok),
            format!("proxy_topology_refreshes_failed:{}", totals.refreshes_error),
        ];
        if let Some(answered) = keyspace_answered {
            lines.push(format!("proxy_keyspace_masters_answered:{answered}"));
        }
        Section {
            name: "Proxy".into(),
            lines,
        }
    }
}

/// How long INFO waits for each master's keyspace.
const KEYSPACE_TIMEOUT: Duration = Duration::from_secs(2);

/// Which of the proxy-made sections an INFO request asks for (Redis's rules: no argument
/// is `default`; `all` and `everything` include them; names are case-insensitive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InfoSections {
    keyspace: bool,
    proxy: bool,
}

impl InfoSections {
    fn of(args: &[Bytes]) -> InfoSections {
        if args.is_empty() {
            return InfoSections {
                keyspace: true,
                proxy: true,
            };
        }
        let named = |name: &[u8]| {
            args.iter().any(|arg| {
                [name, b"default", b"all", b"everything"]
                    .iter()
                    .any(|known| arg.eq_ignore_ascii_case(known))
            })
        };
        InfoSections {
            keyspace: named(b"keyspace"),
            proxy: named(b"proxy"),
        }
    }
}

/// One `# Name` section of an INFO text.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Section {
    name: String,
    lines: Vec<String>,
}

/// Splits INFO text into its sections (lines before the first header are dropped).
fn split_sections(text: &str) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    for line in text.split("\r\n") {
        if let Some(name) = line.strip_prefix("# ") {
            sections.push(Section {
                name: name.to_string(),
                lines: Vec::new(),
            });
        } else if !line.is_empty() {
            if let Some(section) = sections.last_mut() {
                section.lines.push(line.to_string());
            }
        }
    }
    sections
}

/// INFO text as Redis writes it: sections separated by an empty line, CRLF everywhere.
fn join_sections(sections: &[Section]) -> String {
    let mut out = String::new();
    for (i, section) in sections.iter().enumerate() {
        if i > 0 {
            out.push_str("\r\n");
        }
        out.push_str("# ");
        out.push_str(&section.name);
        out.push_str("\r\n");
        for line in &section.lines {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out
}

/// Per-database key counts summed over masters.
#[derive(Debug, Default, Clone, PartialEq)]
struct Keyspace {
    /// db number -> (keys, expires, sum of avg_ttl weighted by expires).
    dbs: BTreeMap<u32, (u64, u64, u128)>,
}

impl Keyspace {
    /// Adds one node's `INFO keyspace` text (`db0:keys=1,expires=0,avg_ttl=0` lines).
    fn add(&mut self, text: &str) {
        for line in text.lines() {
            let Some((db, fields)) = line.trim_end().split_once(':') else {
                continue;
            };
            let Some(db) = db.strip_prefix("db").and_then(|n| n.parse().ok()) else {
                continue;
            };
            let mut keys = 0u64;
            let mut expires = 0u64;
            let mut avg_ttl = 0u64;
            for field in fields.split(',') {
                match field.split_once('=') {
                    Some(("keys", n)) => keys = n.parse().unwrap_or(0),
                    Some(("expires", n)) => expires = n.parse().unwrap_or(0),
                    Some(("avg_ttl", n)) => avg_ttl = n.parse().unwrap_or(0),
                    _ => {}
                }
            }
            let entry = self.dbs.entry(db).or_default();
            entry.0 = entry.0.saturating_add(keys);
            entry.1 = entry.1.saturating_add(expires);
            entry.2 = entry
                .2
                .saturating_add(u128::from(avg_ttl) * u128::from(expires));
        }
    }

    /// The `dbN:keys=..,expires=..,avg_ttl=..` lines; avg_ttl is the masters' averages
    /// weighted by their number of keys with an expiry.
    fn lines(&self) -> Vec<String> {
        self.dbs
            .iter()
            .filter(|(_, (keys, _, _))| *keys > 0)
            .map(|(db, (keys, expires, weighted))| {
                let avg_ttl = if *expires > 0 {
                    weighted / u128::from(*expires)
                } else {
                    0
                };
                format!("db{db}:keys={keys},expires={expires},avg_ttl={avg_ttl}")
            })
            .collect()
    }
}

/// A master's INFO `text` as a client of one Redis at the proxy's `port` expects it: not in
/// cluster mode (`redis_mode`, `cluster_enabled`), listening on `port`, with the proxy's
/// `clients`. Clients that pick a cluster driver from these fields stay on the plain one.
fn as_one_node(text: &str, port: &str, clients: i64) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (field, _) = line.split_once(':').unwrap_or((line, ""));
        let end = if line.ends_with("\r\n") { "\r\n" } else { "" };
        match field {
            "redis_mode" => out.push_str(&format!("redis_mode:standalone{end}")),
            "cluster_enabled" => out.push_str(&format!("cluster_enabled:0{end}")),
            "tcp_port" => out.push_str(&format!("tcp_port:{port}{end}")),
            "connected_clients" => out.push_str(&format!("connected_clients:{clients}{end}")),
            _ => out.push_str(line),
        }
    }
    out
}

/// The text of a bulk (`$`) or verbatim (`=`, after its `txt:` tag) string reply.
pub(super) fn info_text(frame: &[u8]) -> Option<String> {
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

/// Text replies such as INFO: a verbatim string in RESP3, a bulk string in RESP2.
/// A master's CONFIG GET reply (an array, or a RESP3 map, of name/value bulk strings)
/// with the values a client of one server would see: the proxy's `port`, and
/// `cluster-enabled no` (the proxy is not a cluster to its clients). `None` for any other
/// reply (an error passes as it is).
fn config_as_one_node(frame: &[u8], port: &str) -> Option<Bytes> {
    let (as_map, flat) = match decode_reply(frame).ok()? {
        Value::Map(pairs) => (true, pairs.into_iter().flat_map(|(k, v)| [k, v]).collect()),
        Value::List(items) => (false, items),
        _ => return None,
    };
    if flat.len() % 2 != 0 {
        return None;
    }
    let mut out = BytesMut::with_capacity(frame.len() + 8);
    if as_map {
        encode::map_header(&mut out, Proto::Resp3, flat.len() / 2);
    } else {
        encode::array_header(&mut out, flat.len());
    }
    for pair in flat.chunks_exact(2) {
        let (name, value) = (pair[0].text()?, pair[1].text()?);
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

fn verbatim(text: &[u8], proto: Proto) -> Bytes {
    let mut out = BytesMut::with_capacity(text.len() + 24);
    encode::verbatim(&mut out, proto, *b"txt", text);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_masters_info_reads_as_one_nodes() {
        let text = "# Server\r\nredis_version:7.0.15\r\nredis_mode:cluster\r\ntcp_port:7001\r\n\
                    # Clients\r\nconnected_clients:3\r\n# Cluster\r\ncluster_enabled:1\r\n";
        assert_eq!(
            as_one_node(text, "6380", 12),
            "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\ntcp_port:6380\r\n\
             # Clients\r\nconnected_clients:12\r\n# Cluster\r\ncluster_enabled:0\r\n"
        );
    }

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
    fn keyspace_sums_keys_and_weights_ttl_by_expires() {
        let mut total = Keyspace::default();
        total.add("# Keyspace\r\ndb0:keys=10,expires=2,avg_ttl=1000\r\n");
        total.add(
            "# Keyspace\r\ndb0:keys=5,expires=6,avg_ttl=3000\r\ndb3:keys=1,expires=0,avg_ttl=0\r\n",
        );
        total.add("# Keyspace\r\n");
        assert_eq!(
            total.lines(),
            [
                "db0:keys=15,expires=8,avg_ttl=2500",
                "db3:keys=1,expires=0,avg_ttl=0"
            ]
        );
    }

    #[test]
    fn sections_split_and_join_like_redis() {
        let text =
            "# CPU\r\nused_cpu_sys:0.1\r\n\r\n# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=9\r\n";
        let sections = split_sections(text);
        assert_eq!(sections.len(), 2);
        assert_eq!(sections[1].name, "Keyspace");
        assert_eq!(join_sections(&sections), text);
        assert!(split_sections("").is_empty());
    }

    #[test]
    fn info_section_arguments_follow_redis() {
        let of = |args: &[&str]| {
            let args: Vec<Bytes> = args.iter().map(|a| Bytes::from(a.to_string())).collect();
            let wanted = InfoSections::of(&args);
            (wanted.keyspace, wanted.proxy)
        };
        assert_eq!(of(&[]), (true, true));
        assert_eq!(of(&["ALL"]), (true, true));
        assert_eq!(of(&["everything"]), (true, true));
        assert_eq!(of(&["default"]), (true, true));
        assert_eq!(of(&["keyspace"]), (true, false));
        assert_eq!(of(&["Proxy"]), (false, true));
        assert_eq!(of(&["cpu", "proxy"]), (false, true));
        assert_eq!(of(&["server"]), (false, false));
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
