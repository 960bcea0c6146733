//! INFO through the proxy: one master's text, read as one server's (not in cluster mode,
//! the proxy's port and clients), with the sections that count the whole dataset and its
//! work (`Memory`, `Stats`, `Commandstats`, `Errorstats`, `Keyspace`) summed over every
//! master, and a `# Proxy` section. A client or exporter that reads INFO from the proxy
//! sees the cluster's totals, not a third of them.

mod memory;
mod sums;

use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;

use crate::protocol::{encode, Proto, ReplyView, Request};

use super::emulate::verbatim;
use crate::dispatch::{Proxy, Target};
use sums::ClusterSections;

impl Proxy {
    /// INFO as one Redis would answer it (see the module's summary).
    pub(in crate::dispatch) async fn info(&self, request: &Request, proto: Proto) -> Bytes {
        let wanted = InfoSections::of(&request.args[1..]);
        let upstream = self
            .upstream
            .forward(Target::AnyMaster, request.raw.clone(), proto)
            .await;
        let Some(text) = info_text(&upstream) else {
            return upstream;
        };
        let port = self
            .listen_addr
            .rsplit_once(':')
            .map_or("0", |(_, port)| port);
        let totals = crate::metrics::totals();
        let own = OwnClients {
            connected: totals.clients.max(0),
            blocked: totals.blocked_clients.max(0),
            tracking: totals.tracking_clients.max(0),
            max: self.config.maxclients,
        };
        let mut sections = split_sections(&as_one_node(&text, port, &own));
        let answered = if wanted.summed {
            let args: Vec<&[u8]> = request.args.iter().map(|a| &a[..]).collect();
            let mut cluster = self.info_of_all_masters(&args).await;
            cluster
                .stats
                .set("total_connections_received", totals.connections_received);
            cluster
                .stats
                .set("rejected_connections", totals.connections_rejected);
            // The masters count the proxies' own tracking connections; the clients that
            // track are the proxy's.
            let tracking = [
                "tracking_total_keys",
                "tracking_total_items",
                "tracking_total_prefixes",
            ];
            for (name, value) in tracking.into_iter().zip(totals.tracking_table) {
                cluster.stats.set(name, value);
            }
            cluster.replace(&mut sections, wanted.keyspace);
            Some(cluster.answered)
        } else {
            None
        };
        if wanted.proxy {
            sections.push(self.proxy_section(answered));
        }
        verbatim(join_sections(&sections).as_bytes(), proto)
    }

    /// The same INFO request answered by every master, its summed sections added up.
    async fn info_of_all_masters(&self, args: &[&[u8]]) -> ClusterSections {
        let request = encode::encode_request(args);
        let routing = arc_swap::Guard::into_inner(self.topology.routing());
        let asks = routing.masters().iter().map(|conns| {
            let call = conns.get(Proto::Resp2).call(request.clone(), false);
            tokio::time::timeout(MASTER_TIMEOUT, call)
        });
        let mut total = ClusterSections::default();
        for reply in join_all(asks).await {
            if let Some(text) = reply.ok().and_then(Result::ok).and_then(|r| info_text(&r)) {
                total.add(&text);
            }
        }
        total
    }

    fn proxy_section(&self, masters_answered: Option<usize>) -> Section {
        let routing = self.topology.routing();
        let totals = crate::metrics::totals();
        let mut lines = vec![
            "proxy_name:slotbridge".to_string(),
            format!("proxy_version:{}", env!("CARGO_PKG_VERSION")),
            format!(
                "proxy_uptime_in_seconds:{}",
                self.started.elapsed().as_secs()
            ),
            format!("proxy_upstream:{}", self.topology.upstream_kind().label()),
            format!(
                "proxy_upstream_master:{}",
                self.topology.upstream_master().as_deref().unwrap_or("")
            ),
            format!("proxy_upstream_switches:{}", totals.upstream_switches),
            format!("proxy_connected_clients:{}", totals.clients.max(0)),
            format!("proxy_masters:{}", routing.map.masters().len()),
            format!("proxy_slots_covered:{}", routing.map.slots_covered()),
            format!("proxy_redirects_moved:{}", totals.moved),
            format!("proxy_redirects_ask:{}", totals.ask),
            format!("proxy_retries:{}", totals.retries),
            format!("proxy_topology_refreshes_ok:{}", totals.refreshes_ok),
            format!("proxy_topology_refreshes_failed:{}", totals.refreshes_error),
        ];
        if let Some(answered) = masters_answered {
            // The name predates the other summed sections; kept for the tools that read it.
            lines.push(format!("proxy_keyspace_masters_answered:{answered}"));
        }
        Section {
            name: "Proxy".into(),
            lines,
        }
    }
}

/// How long INFO waits for each master's sections.
const MASTER_TIMEOUT: Duration = Duration::from_secs(2);

/// What an INFO request asks for beyond one master's text (Redis's rules: no argument is
/// `default`; `default`, `all` and `everything` include the summed sections, `all` and
/// `everything` also `commandstats`; names are case-insensitive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct InfoSections {
    /// Any section summed over the masters.
    summed: bool,
    /// `Keyspace`, which is added when a master's text lacks it.
    keyspace: bool,
    proxy: bool,
}

impl InfoSections {
    fn of(args: &[Bytes]) -> InfoSections {
        if args.is_empty() {
            return InfoSections {
                summed: true,
                keyspace: true,
                proxy: true,
            };
        }
        let named = |names: &[&[u8]]| {
            args.iter().any(|arg| {
                names
                    .iter()
                    .chain([&b"default"[..], b"all", b"everything"].iter())
                    .any(|known| arg.eq_ignore_ascii_case(known))
            })
        };
        InfoSections {
            summed: named(&[
                b"keyspace",
                b"memory",
                b"stats",
                b"commandstats",
                b"errorstats",
            ]),
            keyspace: named(&[b"keyspace"]),
            proxy: named(&[b"proxy"]),
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

/// A master's INFO `text` as a client of one Redis at the proxy's `port` expects it: not in
/// cluster mode (`redis_mode`, `cluster_enabled`, no cluster bus connections), listening on
/// `port`, with the client counts of [`OwnClients`]. Clients that pick a cluster driver
/// from these fields stay on the plain one.
fn as_one_node(text: &str, port: &str, own: &OwnClients) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (field, _) = line.split_once(':').unwrap_or((line, ""));
        let end = if line.ends_with("\r\n") { "\r\n" } else { "" };
        let value = match field {
            "redis_mode" => "standalone".to_owned(),
            "cluster_enabled" | "cluster_connections" => "0".to_owned(),
            "tracking_clients" => own.tracking.to_string(),
            "tcp_port" => port.to_owned(),
            "connected_clients" => own.connected.to_string(),
            "blocked_clients" => own.blocked.to_string(),
            "maxclients" => own.max.to_string(),
            _ => {
                out.push_str(line);
                continue;
            }
        };
        out.push_str(&format!("{field}:{value}{end}"));
    }
    out
}

/// The `# Clients` fields that are the proxy's own: its clients, those of them waiting in
/// a blocking command, and its `maxclients` (the nodes' count the proxy's connections).
/// `tracking_clients` counts the proxy's clients with CLIENT TRACKING on.
struct OwnClients {
    connected: i64,
    blocked: i64,
    tracking: i64,
    max: usize,
}

/// The text of a bulk (`$`) or verbatim (`=`, after its `txt:` tag) string reply.
pub(in crate::dispatch) fn info_text(frame: &[u8]) -> Option<String> {
    match ReplyView::parse(frame).ok()? {
        ReplyView::Bulk(text) | ReplyView::Verbatim { text, .. } => {
            Some(String::from_utf8_lossy(text).into_owned())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_masters_info_reads_as_one_nodes() {
        let text = "# Server\r\nredis_version:7.0.15\r\nredis_mode:cluster\r\ntcp_port:7001\r\n\
                    # Clients\r\nconnected_clients:3\r\ncluster_connections:4\r\n\
                    maxclients:10000\r\nblocked_clients:0\r\ntracking_clients:2\r\n\
                    # Cluster\r\ncluster_enabled:1\r\n";
        assert_eq!(
            as_one_node(
                text,
                "6380",
                &OwnClients {
                    connected: 12,
                    blocked: 1,
                    tracking: 3,
                    max: 500
                }
            ),
            "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\ntcp_port:6380\r\n\
             # Clients\r\nconnected_clients:12\r\ncluster_connections:0\r\n\
             maxclients:500\r\nblocked_clients:1\r\ntracking_clients:3\r\n\
             # Cluster\r\ncluster_enabled:0\r\n"
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
        assert_eq!(info_text(b"+a:1\r\n"), None);
        assert_eq!(info_text(b"$5\r\na:1\r\n"), None);
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
            (wanted.summed, wanted.keyspace, wanted.proxy)
        };
        assert_eq!(of(&[]), (true, true, true));
        assert_eq!(of(&["ALL"]), (true, true, true));
        assert_eq!(of(&["everything"]), (true, true, true));
        assert_eq!(of(&["default"]), (true, true, true));
        assert_eq!(of(&["keyspace"]), (true, true, false));
        assert_eq!(of(&["Stats"]), (true, false, false));
        assert_eq!(of(&["commandstats"]), (true, false, false));
        assert_eq!(of(&["errorstats", "proxy"]), (true, false, true));
        assert_eq!(of(&["Proxy"]), (false, false, true));
        assert_eq!(of(&["cpu", "proxy"]), (false, false, true));
        assert_eq!(of(&["server"]), (false, false, false));
    }
}
