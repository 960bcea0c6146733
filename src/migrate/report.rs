//! The migration report: counts per family, timing, the marker's fate; as text or JSON.
//!
//! Invariant: every key the walk found is counted exactly once, under its family (or as
//! unmatched), so the counts add up to what the source holds under the prefix.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// Counts of one family.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FamilyCounts {
    /// Keys written to the target that were not there (or, in a dry run, would be).
    pub copied: u64,
    /// Keys left alone: target key kept, ephemeral, same name in place, not included,
    /// vanished on the source, or an item of another chat.
    pub skipped: u64,
    /// Target keys replaced (`--overwrite`, mirror) or counters raised.
    pub overwritten: u64,
    /// Message items no log lists (reported, not copied).
    pub orphans: u64,
    /// Keys that failed.
    pub errors: u64,
    /// Target keys removed by a mirroring way back.
    pub pruned: u64,
    /// Source keys removed by `--delete-source`.
    pub deleted: u64,
}

/// What happened to the layout marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerOutcome {
    /// Written on the target after a complete pass.
    Written,
    /// Removed (the way back).
    Removed,
    /// Left as it was, and why.
    NotWritten(String),
}

/// The result of one run.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// `legacy-to-cluster` or `cluster-to-legacy`.
    pub direction: String,
    /// Nothing was written.
    pub dry_run: bool,
    /// Counts per family name.
    pub families: BTreeMap<String, FamilyCounts>,
    /// Keys under the prefix that no rule matches.
    pub unmatched: u64,
    /// Legacy names of orphan message items (the first 100).
    pub orphan_keys: Vec<String>,
    /// The first error messages (at most 20).
    pub error_messages: Vec<String>,
    /// The marker's fate; `None` before the run ends.
    pub marker: Option<MarkerOutcome>,
    /// The run stopped early (`--stop-after`), or its pass may have missed keys (slots of a
    /// cluster source moved during it): run again.
    pub interrupted: bool,
    /// Wall time of the run.
    pub elapsed: Duration,
}

/// Most error messages a report keeps.
const MAX_ERROR_MESSAGES: usize = 20;
/// Most orphan names a report keeps.
const MAX_ORPHAN_KEYS: usize = 100;

impl Report {
    /// The counts of family `name`, created on first use.
    pub fn family(&mut self, name: &str) -> &mut FamilyCounts {
        self.families.entry(name.to_owned()).or_default()
    }

    /// Counts an error of family `name` and keeps its message.
    pub fn error(&mut self, name: &str, message: String) {
        self.family(name).errors += 1;
        if self.error_messages.len() < MAX_ERROR_MESSAGES {
            self.error_messages.push(message);
        }
    }

    /// Counts an orphan item.
    pub fn orphan(&mut self, name: &str, key: &[u8]) {
        self.family(name).orphans += 1;
        if self.orphan_keys.len() < MAX_ORPHAN_KEYS {
            self.orphan_keys
                .push(String::from_utf8_lossy(key).into_owned());
        }
    }

    /// Sum over families.
    pub fn totals(&self) -> FamilyCounts {
        let mut sum = FamilyCounts::default();
        for counts in self.families.values() {
            sum.copied += counts.copied;
            sum.skipped += counts.skipped;
            sum.overwritten += counts.overwritten;
            sum.orphans += counts.orphans;
            sum.errors += counts.errors;
            sum.pruned += counts.pruned;
            sum.deleted += counts.deleted;
        }
        sum
    }

    /// Keys handled (copied, skipped or overwritten) per second of wall time.
    pub fn keys_per_second(&self) -> f64 {
        let totals = self.totals();
        let handled = totals.copied + totals.skipped + totals.overwritten;
        let seconds = self.elapsed.as_secs_f64();
        if seconds > 0.0 {
            handled as f64 / seconds
        } else {
            0.0
        }
    }

    fn marker_text(&self) -> String {
        match &self.marker {
            Some(MarkerOutcome::Written) => "written".to_owned(),
            Some(MarkerOutcome::Removed) => "removed".to_owned(),
            Some(MarkerOutcome::NotWritten(why)) => format!("not written: {why}"),
            None => "not written: run incomplete".to_owned(),
        }
    }

    /// A table for people.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{}{}",
            self.direction,
            if self.dry_run {
                " (dry run: nothing written)"
            } else {
                ""
            }
        );
        let _ = writeln!(
            out,
            "{:<14} {:>9} {:>9} {:>11} {:>8} {:>7} {:>7} {:>8}",
            "family", "copied", "skipped", "overwritten", "orphans", "errors", "pruned", "deleted"
        );
        let mut rows: Vec<(&str, FamilyCounts)> = self
            .families
            .iter()
            .map(|(k, v)| (k.as_str(), *v))
            .collect();
        rows.push(("total", self.totals()));
        for (name, c) in rows {
            let _ = writeln!(
                out,
                "{name:<14} {:>9} {:>9} {:>11} {:>8} {:>7} {:>7} {:>8}",
                c.copied, c.skipped, c.overwritten, c.orphans, c.errors, c.pruned, c.deleted
            );
        }
        let _ = writeln!(out, "unmatched keys: {}", self.unmatched);
        for key in &self.orphan_keys {
            let _ = writeln!(out, "orphan: {key}");
        }
        for message in &self.error_messages {
            let _ = writeln!(out, "error: {message}");
        }
        let _ = writeln!(out, "marker: {}", self.marker_text());
        if self.interrupted {
            let _ = writeln!(out, "stopped early: run again to finish");
        }
        let _ = writeln!(
            out,
            "elapsed: {:.3} s, {:.0} keys/s",
            self.elapsed.as_secs_f64(),
            self.keys_per_second()
        );
        out
    }

    /// One JSON object (see the field names; counts per family under `families`).
    pub fn to_json(&self) -> String {
        let mut out = String::from("{");
        let _ = write!(
            out,
            "\"direction\":{},\"dry_run\":{},\"families\":{{",
            json_string(&self.direction),
            self.dry_run
        );
        for (i, (name, c)) in self.families.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{}:{{\"copied\":{},\"skipped\":{},\"overwritten\":{},\"orphans\":{},\
                 \"errors\":{},\"pruned\":{},\"deleted\":{}}}",
                json_string(name),
                c.copied,
                c.skipped,
                c.overwritten,
                c.orphans,
                c.errors,
                c.pruned,
                c.deleted
            );
        }
        let list = |items: &[String]| {
            items
                .iter()
                .map(|s| json_string(s))
                .collect::<Vec<_>>()
                .join(",")
        };
        let _ = write!(
            out,
            "}},\"unmatched\":{},\"orphans\":[{}],\"errors\":[{}],\"marker\":{},\
             \"interrupted\":{},\"elapsed_ms\":{},\"keys_per_second\":{:.1}}}",
            self.unmatched,
            list(&self.orphan_keys),
            list(&self.error_messages),
            json_string(&self.marker_text()),
            self.interrupted,
            self.elapsed.as_millis(),
            self.keys_per_second()
        );
        out
    }
}

/// `text` as a JSON string literal.
pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes_and_counts() {
        assert_eq!(json_string("a\"b\\c\n\u{1}"), "\"a\\\"b\\\\c\\n\\u0001\"");
        let mut report = Report {
            direction: "legacy-to-cluster".into(),
            ..Report::default()
        };
        report.family("chat").copied = 3;
        report.error("chat", "boom".into());
        let json = report.to_json();
        assert!(
            json.contains("\"chat\":{\"copied\":3,\"skipped\":0"),
            "{json}"
        );
        assert!(json.contains("\"errors\":[\"boom\"]"), "{json}");
        assert_eq!(report.totals().errors, 1);
    }
}
