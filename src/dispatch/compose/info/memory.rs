//! `# Memory` over every master, as one server holding the whole dataset would report it:
//! amounts summed, the `_human` texts, ratios and percentages worked out again from the
//! sums. What is not an amount of data keeps one value: the scripts and function libraries
//! the proxy loads on every master are counted once (the highest count), the host's memory
//! size and the texts (allocator, eviction policy) are the first master's, and `maxmemory`
//! is 0 (no limit) when any master has no limit.

/// The merged section, in the first master's field order.
#[derive(Debug, Default)]
pub(super) struct Memory {
    fields: Vec<Field>,
}

#[derive(Debug)]
struct Field {
    name: String,
    rule: Rule,
    /// The sum or the highest, over the masters that gave a number.
    number: Option<i64>,
    /// The first master's text, for [`Rule::First`] and derived fields without inputs.
    text: String,
}

/// How one field goes from every master's value to the cluster's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Sum,
    /// `maxmemory`: the sum, unless a master has no limit (0).
    SumOfLimits,
    Highest,
    First,
    /// Computed from other fields in [`Memory::lines`].
    Derived,
}

impl Rule {
    fn of(name: &str) -> Rule {
        match name {
            "maxmemory" => Rule::SumOfLimits,
            "number_of_cached_scripts"
            | "number_of_functions"
            | "number_of_libraries"
            | "active_defrag_running" => Rule::Highest,
            "total_system_memory" => Rule::First,
            _ if name.ends_with("_human")
                || name.ends_with("_ratio")
                || name.ends_with("_perc") =>
            {
                Rule::Derived
            }
            _ => Rule::Sum,
        }
    }
}

/// Ratios Redis prints as `numerator / denominator`.
const RATIOS: [(&str, &str, &str); 4] = [
    (
        "allocator_frag_ratio",
        "allocator_active",
        "allocator_allocated",
    ),
    (
        "allocator_rss_ratio",
        "allocator_resident",
        "allocator_active",
    ),
    (
        "rss_overhead_ratio",
        "used_memory_rss",
        "allocator_resident",
    ),
    ("mem_fragmentation_ratio", "used_memory_rss", "used_memory"),
];

impl Memory {
    /// Adds one master's `# Memory` lines.
    pub(super) fn add<'a>(&mut self, lines: impl Iterator<Item = &'a str>) {
        for line in lines {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let at = match self.fields.iter().position(|f| f.name == name) {
                Some(at) => at,
                None => {
                    self.fields.push(Field {
                        name: name.to_owned(),
                        rule: Rule::of(name),
                        number: None,
                        text: value.to_owned(),
                    });
                    self.fields.len() - 1
                }
            };
            let field = &mut self.fields[at];
            let Ok(number) = value.parse::<i64>() else {
                continue;
            };
            field.number = Some(match (field.rule, field.number) {
                (_, None) => number,
                (Rule::Sum, Some(sum)) => sum.saturating_add(number),
                (Rule::SumOfLimits, Some(sum)) if sum == 0 || number == 0 => 0,
                (Rule::SumOfLimits, Some(sum)) => sum.saturating_add(number),
                (Rule::Highest, Some(highest)) => highest.max(number),
                (Rule::First | Rule::Derived, Some(first)) => first,
            });
        }
    }

    pub(super) fn lines(&self) -> Vec<String> {
        self.fields
            .iter()
            .map(|field| {
                let value = match field.rule {
                    Rule::Derived => self.derived(&field.name),
                    Rule::First => None,
                    _ => field.number.map(|n| n.to_string()),
                };
                format!("{}:{}", field.name, value.as_deref().unwrap_or(&field.text))
            })
            .collect()
    }

    fn number(&self, name: &str) -> Option<i64> {
        let field = self.fields.iter().find(|f| f.name == name)?;
        match field.rule {
            Rule::First | Rule::Derived => field.text.parse().ok(),
            _ => field.number,
        }
    }

    /// A derived field from the merged amounts; `None` (the first master's text) when its
    /// inputs are missing or it is not one this module knows.
    fn derived(&self, name: &str) -> Option<String> {
        if let Some(base) = name.strip_suffix("_human") {
            return self.number(base).map(bytes_to_human);
        }
        let ratio = |numerator: &str, denominator: &str| {
            let denominator = self.number(denominator).filter(|&d| d != 0)?;
            Some(self.number(numerator)? as f64 / denominator as f64)
        };
        match name {
            "used_memory_peak_perc" => {
                let perc = ratio("used_memory", "used_memory_peak")? * 100.0;
                Some(format!("{perc:.2}%"))
            }
            "used_memory_dataset_perc" => {
                // As Redis: the dataset's share of what was allocated after start-up.
                let net = self.number("used_memory")? - self.number("used_memory_startup")?;
                let dataset = self.number("used_memory_dataset")? as f64;
                Some(format!("{:.2}%", dataset * 100.0 / net.max(1) as f64))
            }
            _ => {
                let (_, numerator, denominator) = RATIOS.iter().find(|(n, ..)| *n == name)?;
                Some(format!("{:.2}", ratio(numerator, denominator)?))
            }
        }
    }
}

/// Redis's `bytesToHuman`: bytes below 1 KiB as is, then K, M, G, T, P with two decimals.
fn bytes_to_human(bytes: i64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    let mut scale = 1024f64;
    if bytes.unsigned_abs() < 1024 {
        return format!("{bytes}B");
    }
    for unit in UNITS {
        if (bytes.unsigned_abs() as f64) < scale * 1024.0 {
            return format!("{:.2}{unit}", bytes as f64 / scale);
        }
        scale *= 1024.0;
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn merged(masters: &[&str]) -> Vec<String> {
        let mut memory = Memory::default();
        for text in masters {
            memory.add(text.lines());
        }
        memory.lines()
    }

    #[test]
    fn human_sizes_read_as_redis_prints_them() {
        assert_eq!(bytes_to_human(200), "200B");
        assert_eq!(bytes_to_human(32768), "32.00K");
        assert_eq!(bytes_to_human(27_288_184), "26.02M");
        assert_eq!(bytes_to_human(25_276_514_304), "23.54G");
        assert_eq!(bytes_to_human(0), "0B");
    }

    #[test]
    fn amounts_add_up_and_what_derives_from_them_follows() {
        let a = "used_memory:1000000\nused_memory_human:976.56K\nused_memory_rss:3000000\n\
                 used_memory_peak:2000000\nused_memory_peak_perc:50.00%\n\
                 used_memory_startup:100000\nused_memory_dataset:450000\n\
                 used_memory_dataset_perc:50.00%\nallocator_allocated:1000000\n\
                 allocator_active:1520000\nallocator_frag_ratio:1.52\n\
                 mem_fragmentation_ratio:3.00\ntotal_system_memory:8000\n\
                 number_of_cached_scripts:2\nmaxmemory:100\nmaxmemory_policy:noeviction\n\
                 mem_fragmentation_bytes:-5";
        let b = "used_memory:3000000\nused_memory_human:2.86M\nused_memory_rss:3000000\n\
                 used_memory_peak:6000000\nused_memory_peak_perc:50.00%\n\
                 used_memory_startup:100000\nused_memory_dataset:1450000\n\
                 used_memory_dataset_perc:50.00%\nallocator_allocated:3000000\n\
                 allocator_active:3000000\nallocator_frag_ratio:1.00\n\
                 mem_fragmentation_ratio:1.00\ntotal_system_memory:9000\n\
                 number_of_cached_scripts:2\nmaxmemory:200\nmaxmemory_policy:allkeys-lru\n\
                 mem_fragmentation_bytes:-7";
        assert_eq!(
            merged(&[a, b]),
            [
                "used_memory:4000000",
                "used_memory_human:3.81M",
                "used_memory_rss:6000000",
                "used_memory_peak:8000000",
                "used_memory_peak_perc:50.00%",
                "used_memory_startup:200000",
                "used_memory_dataset:1900000",
                // 1.9M of the 3.8M allocated after start-up.
                "used_memory_dataset_perc:50.00%",
                "allocator_allocated:4000000",
                "allocator_active:4520000",
                "allocator_frag_ratio:1.13",
                "mem_fragmentation_ratio:1.50",
                "total_system_memory:8000",
                "number_of_cached_scripts:2",
                "maxmemory:300",
                "maxmemory_policy:noeviction",
                "mem_fragmentation_bytes:-12",
            ]
        );
    }

    #[test]
    fn a_master_without_a_limit_lifts_the_limit_and_unknown_ratios_stay_as_read() {
        let lines = merged(&[
            "maxmemory:100\nmaxmemory_human:100B\nsome_new_ratio:0.50",
            "maxmemory:0\nmaxmemory_human:0B\nsome_new_ratio:0.70",
            "maxmemory:300\nmaxmemory_human:300B\nsome_new_ratio:0.90",
        ]);
        assert_eq!(
            lines,
            ["maxmemory:0", "maxmemory_human:0B", "some_new_ratio:0.50"]
        );
    }
}
