//! The INFO sections summed over every master: `Keyspace`, `Memory` (see `memory`),
//! `Stats`, `Commandstats` and `Errorstats`, as one server holding the whole dataset and
//! doing all of its work would report them.

use std::collections::BTreeMap;

use super::memory;
use super::{split_sections, Section};

/// The summed sections of every master that answered.
#[derive(Debug, Default)]
pub(super) struct ClusterSections {
    /// How many masters answered.
    pub(super) answered: usize,
    keyspace: Keyspace,
    memory: memory::Memory,
    /// `# Stats`, which the proxy corrects with its own connection counts.
    pub(super) stats: Stats,
    commandstats: Records,
    errorstats: Records,
}

impl ClusterSections {
    /// Adds one master's INFO text.
    pub(super) fn add(&mut self, text: &str) {
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
    pub(super) fn replace(&self, sections: &mut Vec<Section>, keyspace: bool) {
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
pub(super) struct Stats {
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
    pub(super) fn set(&mut self, name: &str, value: u64) {
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

#[cfg(test)]
mod tests {
    use super::super::join_sections;
    use super::*;

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
}
