//! INFO through the proxy: one master's text, read as one server's (not in cluster mode,
//! the proxy's port and clients), with the sections that count the whole dataset and its
//! work (`Memory`, `Stats`, `Commandstats`, `Errorstats`, `Keyspace`) summed over every
//! master, and a `# Proxy` section. A client or exporter that reads INFO from the proxy
//! sees the cluster's totals, not a third of them.

mod memory;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;

use crate::protocol::{encode, Proto, Request};

use super::emulate::verbatim;
use crate::dispatch::{Proxy, Target};

impl Proxy {
    /// INFO as one Redis would answer it (see the module's summary).
    pub(in crate::dispatch) async fn info(&self, request: &Request, proto: Proto) -> Bytes {
        let wanted = InfoSections::of(&request.args[1..]);
        let upstream = self
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

/// The summed sections of every master that answered.
#[derive(Debug, Default)]
struct ClusterSections {
    answered: usize,
    keyspace: Keyspace,
    memory: memory::Memory,
    stats: Stats,
    commandstats: Records,
    errorstats: Records,
}

impl ClusterSections {
    /// Adds one master's INFO text.
    fn add(&mut self, text: &str) {
        self.answered += 1;
        for section in split_sections(text) {
            let lines = section.lines.iter().map(String::as_str);
            match section.name.to_ascii_lowercase().as_str() {
                "keyspace" => self.keyspace.add(lines),
                "memory" => self.memory.add(lines),
                "stats" => self.stats.add(lines),
                "commandstats" => self.commandstats.add(lines),
                "errorstats" => self.errorstats.add(lines),
                _ => {}
            }
        }
    }

    /// Puts the sums in place of one master's sections; with `keyspace`, a `# Keyspace`
    /// is added if the master's text had none. Nothing changes when no master answered.
    fn replace(&self, sections: &mut Vec<Section>, keyspace: bool) {
        if self.answered == 0 {
            return;
        }
        for section in sections.iter_mut() {
            section.lines = match section.name.to_ascii_lowercase().as_str() {
                "keyspace" => self.keyspace.lines(),
                "memory" => self.memory.lines(),
                "stats" => self.stats.lines(),
                "commandstats" => self.commandstats.lines(),
                "errorstats" => self.errorstats.lines(),
                _ => continue,
            };
        }
        let has_keyspace = sections
            .iter()
            .any(|s| s.name.eq_ignore_ascii_case("keyspace"));
        if keyspace && !has_keyspace {
            sections.push(Section {
                name: "Keyspace".into(),
                lines: self.keyspace.lines(),
            });
        }
    }
}

/// `# Stats` fields summed (counters and rates alike), except the few that are not
/// amounts: [`MAXIMA`] take the highest, `expired_stale_perc` the mean, and a field that
/// is not a number is the first master's.
#[derive(Debug, Default)]
struct Stats {
    /// In the first master's order.
    fields: Vec<StatField>,
}

/// One `# Stats` field over the masters.
#[derive(Debug)]
struct StatField {
    name: String,
    /// The sum, or the highest for [`MAXIMA`].
    value: f64,
    /// How many masters gave it as a number.
    masters: u32,
    /// The first master's text, when that was not a number.
    text: Option<String>,
}

impl Stats {
    fn add<'a>(&mut self, lines: impl Iterator<Item = &'a str>) {
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let number = value.parse::<f64>().ok();
            let at = match self.fields.iter().position(|f| f.name == name) {
                Some(at) => at,
                None => {
                    self.fields.push(StatField {
                        name: name.to_owned(),
                        value: 0.0,
                        masters: 0,
                        text: number.is_none().then(|| value.to_owned()),
                    });
                    self.fields.len() - 1
                }
            };
            let field = &mut self.fields[at];
            if let (Some(number), None) = (number, &field.text) {
                field.value = if MAXIMA.contains(&name) {
                    field.value.max(number)
                } else {
                    field.value + number
                };
                field.masters += 1;
            }
        }
    }

    /// Sets a field the proxy answers for itself (client connections are the proxy's).
    fn set(&mut self, name: &str, value: u64) {
        if let Some(field) = self.fields.iter_mut().find(|f| f.name == name) {
            field.value = value as f64;
            field.masters = 1;
            field.text = None;
        }
    }

    fn lines(&self) -> Vec<String> {
        self.fields
            .iter()
            .map(
                |StatField {
                     name,
                     value,
                     masters,
                     text,
                 }| match text {
                    Some(text) => format!("{name}:{text}"),
                    None if name == "expired_stale_perc" => {
                        format!("{name}:{:.2}", value / f64::from((*masters).max(1)))
                    }
                    None if is_fractional(name) => format!("{name}:{value:.2}"),
                    None => format!("{name}:{value:.0}"),
                },
            )
            .collect()
    }
}

/// Stats fields that are not amounts but a longest time or an on/off state.
const MAXIMA: [&str; 2] = ["latest_fork_usec", "io_threads_active"];

/// Stats fields Redis prints with two decimals.
fn is_fractional(name: &str) -> bool {
    name.ends_with("_kbps") || name.ends_with("_perc")
}

/// `name:k=v,k=v` lines (`cmdstat_get:calls=..,usec=..`, `errorstat_ERR:count=..`) with
/// each count summed per name; `usec_per_call` is worked out again from the sums.
#[derive(Debug, Default)]
struct Records {
    /// name -> counts in the first master's order.
    records: BTreeMap<String, Vec<(String, u64)>>,
}

impl Records {
    fn add<'a>(&mut self, lines: impl Iterator<Item = &'a str>) {
        for line in lines {
            let Some((name, fields)) = line.split_once(':') else {
                continue;
            };
            let record = self.records.entry(name.to_owned()).or_default();
            for (key, value) in fields.split(',').filter_map(|f| f.split_once('=')) {
                let value = if key == "usec_per_call" {
                    0
                } else {
                    match value.parse::<u64>() {
                        Ok(value) => value,
                        Err(_) => continue,
                    }
                };
                match record.iter_mut().find(|(k, _)| k == key) {
                    Some((_, sum)) => *sum = sum.saturating_add(value),
                    None => record.push((key.to_owned(), value)),
                }
            }
        }
    }

    fn lines(&self) -> Vec<String> {
        self.records
            .iter()
            .map(|(name, counts)| {
                let count = |key: &str| counts.iter().find(|(k, _)| k == key).map_or(0, |c| c.1);
                let fields: Vec<String> = counts
                    .iter()
                    .map(|(key, value)| match key.as_str() {
                        "usec_per_call" => {
                            let calls = count("calls");
                            let per_call = if calls == 0 {
                                0.0
                            } else {
                                count("usec") as f64 / calls as f64
                            };
                            format!("usec_per_call={per_call:.2}")
                        }
                        _ => format!("{key}={value}"),
                    })
                    .collect();
                format!("{name}:{}", fields.join(","))
            })
            .collect()
    }
}

/// Per-database key counts summed over masters.
#[derive(Debug, Default, Clone, PartialEq)]
struct Keyspace {
    /// db number -> (keys, expires, sum of avg_ttl weighted by expires).
    dbs: BTreeMap<u32, (u64, u64, u128)>,
}

impl Keyspace {
    /// Adds one node's `dbN:keys=1,expires=0,avg_ttl=0` lines.
    fn add<'a>(&mut self, lines: impl Iterator<Item = &'a str>) {
        for line in lines {
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
            "cluster_enabled" | "cluster_connections" | "tracking_clients" => "0".to_owned(),
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
/// Client-side caching is not offered, so `tracking_clients` is 0.
struct OwnClients {
    connected: i64,
    blocked: i64,
    max: usize,
}

/// The text of a bulk (`$`) or verbatim (`=`, after its `txt:` tag) string reply.
pub(in crate::dispatch) fn info_text(frame: &[u8]) -> Option<String> {
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
                    max: 500
                }
            ),
            "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\ntcp_port:6380\r\n\
             # Clients\r\nconnected_clients:12\r\ncluster_connections:0\r\n\
             maxclients:500\r\nblocked_clients:1\r\ntracking_clients:0\r\n\
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
    }

    #[test]
    fn keyspace_sums_keys_and_weights_ttl_by_expires() {
        let mut total = ClusterSections::default();
        total.add("# Keyspace\r\ndb0:keys=10,expires=2,avg_ttl=1000\r\n");
        total.add(
            "# Keyspace\r\ndb0:keys=5,expires=6,avg_ttl=3000\r\ndb3:keys=1,expires=0,avg_ttl=0\r\n",
        );
        total.add("# Keyspace\r\n");
        assert_eq!(
            total.keyspace.lines(),
            [
                "db0:keys=15,expires=8,avg_ttl=2500",
                "db3:keys=1,expires=0,avg_ttl=0"
            ]
        );
    }

    #[test]
    fn stats_are_summed_but_for_the_fork_time_the_stale_share_and_text() {
        let mut total = ClusterSections::default();
        total.add(
            "# Stats\r\ntotal_commands_processed:10\r\ninstantaneous_input_kbps:0.50\r\n\
             latest_fork_usec:300\r\nexpired_stale_perc:10.00\r\nkeyspace_hits:4\r\n",
        );
        total.add(
            "# Stats\r\ntotal_commands_processed:32\r\ninstantaneous_input_kbps:1.25\r\n\
             latest_fork_usec:200\r\nexpired_stale_perc:20.00\r\nkeyspace_hits:1\r\n\
             io_threads_active:0\r\nsome_mode:lazy\r\n",
        );
        total.add("# Stats\r\nsome_mode:eager\r\ntotal_commands_processed:1\r\n");
        assert_eq!(
            total.stats.lines(),
            [
                "total_commands_processed:43",
                "instantaneous_input_kbps:1.75",
                "latest_fork_usec:300",
                "expired_stale_perc:15.00",
                "keyspace_hits:5",
                "io_threads_active:0",
                "some_mode:lazy",
            ]
        );
        total.stats.set("keyspace_hits", 99);
        total.stats.set("not_there", 1);
        assert!(total
            .stats
            .lines()
            .contains(&"keyspace_hits:99".to_string()));
        assert_eq!(total.stats.lines().len(), 7);
    }

    #[test]
    fn command_and_error_counts_are_summed_per_name() {
        let mut total = ClusterSections::default();
        total.add(
            "# Commandstats\r\n\
             cmdstat_get:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n\
             cmdstat_set:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n\
             # Errorstats\r\nerrorstat_ERR:count=2\r\n",
        );
        total.add(
            "# Commandstats\r\n\
             cmdstat_get:calls=1,usec=2,usec_per_call=2.00,rejected_calls=1,failed_calls=0\r\n\
             # Errorstats\r\nerrorstat_ERR:count=1\r\nerrorstat_WRONGTYPE:count=4\r\n",
        );
        assert_eq!(
            total.commandstats.lines(),
            [
                "cmdstat_get:calls=4,usec=32,usec_per_call=8.00,rejected_calls=1,failed_calls=1",
                "cmdstat_set:calls=1,usec=5,usec_per_call=5.00,rejected_calls=0,failed_calls=0",
            ]
        );
        assert_eq!(
            total.errorstats.lines(),
            ["errorstat_ERR:count=3", "errorstat_WRONGTYPE:count=4"]
        );
    }

    #[test]
    fn summed_sections_replace_one_masters_and_keyspace_is_added_when_missing() {
        let mut total = ClusterSections::default();
        total.add("# Stats\r\nexpired_keys:1\r\n# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n");
        total.add("# Stats\r\nexpired_keys:2\r\n# Keyspace\r\ndb0:keys=2,expires=0,avg_ttl=0\r\n");
        let mut sections =
            split_sections("# Server\r\nredis_version:7\r\n# Stats\r\nexpired_keys:1\r\n");
        total.replace(&mut sections, true);
        assert_eq!(
            join_sections(&sections),
            "# Server\r\nredis_version:7\r\n\r\n# Stats\r\nexpired_keys:3\r\n\r\n\
             # Keyspace\r\ndb0:keys=3,expires=0,avg_ttl=0\r\n"
        );
        let mut unchanged = split_sections("# Stats\r\nexpired_keys:1\r\n");
        ClusterSections::default().replace(&mut unchanged, true);
        assert_eq!(join_sections(&unchanged), "# Stats\r\nexpired_keys:1\r\n");
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
