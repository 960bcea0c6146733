//! A fixed-bucket latency histogram and its Prometheus text exposition.
//!
//! Hand-written because the exporter's histogram keeps every sample (with a clock read of
//! its own) until its next upkeep, which on the per-command path cost more than the rest of
//! the metrics together and buffered seconds of samples under load. Fixed buckets of
//! counters are what Prometheus client libraries do: a sample is two relaxed atomic adds.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (inclusive, as Prometheus' `le`) of the buckets, seconds: 100 µs to 1 s.
pub const BUCKETS: [f64; 13] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];

/// [`BUCKETS`] in nanoseconds, so a sample is placed with integer compares.
const BOUNDS_NANOS: [u64; 13] = {
    let mut nanos = [0u64; 13];
    let mut i = 0;
    while i < BUCKETS.len() {
        nanos[i] = (BUCKETS[i] * 1e9) as u64;
        i += 1;
    }
    nanos
};

/// Counts per bucket (not cumulative; the last one is `+Inf`) and the sum of all samples.
#[derive(Default)]
pub struct LatencyHistogram {
    counts: [AtomicU64; BUCKETS.len() + 1],
    sum_nanos: AtomicU64,
}

impl LatencyHistogram {
    /// Adds `count` samples of the same value.
    pub fn record_many(&self, elapsed: Duration, count: u64) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let bucket = BOUNDS_NANOS
            .iter()
            .position(|&bound| nanos <= bound)
            .unwrap_or(BUCKETS.len());
        self.counts[bucket].fetch_add(count, Ordering::Relaxed);
        self.sum_nanos
            .fetch_add(nanos.saturating_mul(count), Ordering::Relaxed);
    }

    /// Appends this histogram's series to `out`: cumulative `_bucket` lines ending with
    /// `le="+Inf"`, then `_sum` (seconds) and `_count`. `labels` is the label set without
    /// braces (`command="get"`), placed before `le`.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0u64;
        for (i, count) in self.counts.iter().enumerate() {
            cumulative += count.load(Ordering::Relaxed);
            let _ = match BUCKETS.get(i) {
                Some(bound) => {
                    writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {cumulative}")
                }
                None => writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cumulative}"),
            };
        }
        let sum = self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

/// `value` escaped for a Prometheus label value (backslash, double quote, newline).
pub fn escape_label(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(histogram: &LatencyHistogram) -> String {
        let mut out = String::new();
        histogram.render(&mut out, "x_seconds", "command=\"get\"");
        out
    }

    #[test]
    fn samples_land_in_the_first_bucket_whose_bound_they_do_not_exceed() {
        let histogram = LatencyHistogram::default();
        histogram.record_many(Duration::from_micros(100), 1); // le 0.0001, inclusive
        histogram.record_many(Duration::from_micros(101), 1); // le 0.00025
        histogram.record_many(Duration::from_millis(3), 2); // le 0.005, twice
        histogram.record_many(Duration::from_secs(2), 1); // +Inf only
        let text = rendered(&histogram);
        for line in [
            "x_seconds_bucket{command=\"get\",le=\"0.0001\"} 1\n",
            "x_seconds_bucket{command=\"get\",le=\"0.00025\"} 2\n",
            "x_seconds_bucket{command=\"get\",le=\"0.0025\"} 2\n",
            "x_seconds_bucket{command=\"get\",le=\"0.005\"} 4\n",
            "x_seconds_bucket{command=\"get\",le=\"1\"} 4\n",
            "x_seconds_bucket{command=\"get\",le=\"+Inf\"} 5\n",
            "x_seconds_count{command=\"get\"} 5\n",
            "x_seconds_sum{command=\"get\"} 2.006201\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from\n{text}");
        }
        assert_eq!(text.lines().count(), BUCKETS.len() + 3);
    }

    #[test]
    fn an_empty_histogram_renders_zeros() {
        let text = rendered(&LatencyHistogram::default());
        assert!(text.contains("x_seconds_bucket{command=\"get\",le=\"+Inf\"} 0\n"));
        assert!(text.contains("x_seconds_sum{command=\"get\"} 0\n"));
    }

    #[test]
    fn bounds_in_nanoseconds_match_the_bucket_bounds() {
        for (nanos, seconds) in BOUNDS_NANOS.iter().zip(BUCKETS) {
            assert_eq!(*nanos, (seconds * 1e9).round() as u64, "{seconds}");
        }
        assert!(BOUNDS_NANOS.windows(2).all(|pair| pair[0] < pair[1]));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("config|get"), "config|get");
        assert_eq!(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
