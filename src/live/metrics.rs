//! The live migration's series, rendered at scrape time from a [`Status`] snapshot of the
//! migration's own counters: the moves pay no metrics call, and the series cannot drift
//! from what `GET /migration` reports.
//!
//! Invariants: the label sets are fixed (`by` in touch/walker, `state` in
//! [`crate::live::STATES`]); every series of a family is always present, so an alert on a
//! rise or a state has a series to watch from the first scrape.

use std::fmt::Write;

use super::{Status, STATES};

/// Keys this process moved to the target, by who asked (`by`: touch, walker).
pub const MIGRATION_KEYS_MOVED: &str = "slotbridge_migration_keys_moved_total";
/// Moves that found their key already moved by another mover, or gone from the source.
pub const MIGRATION_KEYS_ALREADY_MOVED: &str = "slotbridge_migration_keys_already_moved_total";
/// Source names the walker has seen.
pub const MIGRATION_KEYS_SCANNED: &str = "slotbridge_migration_keys_scanned_total";
/// Moves that failed (each is retried).
pub const MIGRATION_ERRORS: &str = "slotbridge_migration_errors_total";
/// Complete passes of the walker over the source.
pub const MIGRATION_PASSES: &str = "slotbridge_migration_passes_total";
/// The source's keys when the walker began.
pub const MIGRATION_SOURCE_KEYS: &str = "slotbridge_migration_source_keys";
/// Keys left to move: the source's at the last look, every proxy's moves counted.
pub const MIGRATION_KEYS_LEFT: &str = "slotbridge_migration_keys_left";
/// 1 for the migration's current state, 0 for the others.
pub const MIGRATION_STATE: &str = "slotbridge_migration_state";
/// Whether the walker is told to pause (0/1).
pub const MIGRATION_PAUSED: &str = "slotbridge_migration_paused";
/// Walker moves whose value was compared on both sides between seal and finish.
pub const MIGRATION_VALUES_CHECKED: &str = "slotbridge_migration_values_checked_total";
/// Checked values that differed.
pub const MIGRATION_VALUES_DIFFER: &str = "slotbridge_migration_values_differ_total";
/// Whether the end is held by a value that differed, until an operator resumes (0/1).
pub const MIGRATION_END_HELD: &str = "slotbridge_migration_end_held";
/// Message items the walker met that their chat's log does not list.
pub const MIGRATION_ORPHAN_ITEMS: &str = "slotbridge_migration_orphan_items_total";

/// Every migration series' name.
pub const MIGRATION_NAMES: [&str; 13] = [
    MIGRATION_KEYS_MOVED,
    MIGRATION_KEYS_ALREADY_MOVED,
    MIGRATION_KEYS_SCANNED,
    MIGRATION_ERRORS,
    MIGRATION_PASSES,
    MIGRATION_SOURCE_KEYS,
    MIGRATION_KEYS_LEFT,
    MIGRATION_STATE,
    MIGRATION_PAUSED,
    MIGRATION_VALUES_CHECKED,
    MIGRATION_VALUES_DIFFER,
    MIGRATION_END_HELD,
    MIGRATION_ORPHAN_ITEMS,
];

/// Appends the migration's series to `out`, in the Prometheus text format.
pub fn render_migration(status: &Status, out: &mut String) {
    let mut family = |name: &str, kind: &str, help: &str, samples: &[(&str, u64)]| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, value) in samples {
            let _ = writeln!(out, "{name}{labels} {value}");
        }
    };
    family(
        MIGRATION_KEYS_MOVED,
        "counter",
        "Keys this process moved to the target, by who asked",
        &[
            ("{by=\"touch\"}", status.moved_on_touch),
            ("{by=\"walker\"}", status.moved_by_walker),
        ],
    );
    let counters = [
        (
            MIGRATION_KEYS_ALREADY_MOVED,
            "Moves that found the key already moved or gone",
            status.already_moved,
        ),
        (
            MIGRATION_KEYS_SCANNED,
            "Source names the walker has seen",
            status.scanned,
        ),
        (MIGRATION_ERRORS, "Moves that failed", status.errors),
        (
            MIGRATION_PASSES,
            "Complete passes of the walker over the source",
            status.passes,
        ),
        (
            MIGRATION_VALUES_CHECKED,
            "Walker moves whose value was compared on both sides before the finish",
            status.values_checked,
        ),
        (
            MIGRATION_VALUES_DIFFER,
            "Checked values that differed between the source and the target",
            status.values_differ,
        ),
        (
            MIGRATION_ORPHAN_ITEMS,
            "Message items the walker met that their chat's log does not list",
            status.orphan_items,
        ),
    ];
    for (name, help, value) in counters {
        family(name, "counter", help, &[("", value)]);
    }
    let source = status.source_keys_at_start;
    let help = "The source's keys when the walker began";
    family(MIGRATION_SOURCE_KEYS, "gauge", help, &[("", source)]);
    let help = "Keys left to move, every proxy's moves counted once the source was looked at";
    family(
        MIGRATION_KEYS_LEFT,
        "gauge",
        help,
        &[("", status.remaining())],
    );
    let states: Vec<(String, u64)> = STATES
        .iter()
        .map(|state| {
            let current = u64::from(state.name() == status.state);
            (format!("{{state=\"{}\"}}", state.name()), current)
        })
        .collect();
    let states: Vec<(&str, u64)> = states.iter().map(|(l, v)| (l.as_str(), *v)).collect();
    let help = "1 for the migration's current state, 0 for the others";
    family(MIGRATION_STATE, "gauge", help, &states);
    let help = "Whether the migration's walker is told to pause";
    family(
        MIGRATION_PAUSED,
        "gauge",
        help,
        &[("", u64::from(status.paused))],
    );
    let help = "Whether the end is held by a value that differed, until an operator resumes";
    family(
        MIGRATION_END_HELD,
        "gauge",
        help,
        &[("", u64::from(status.end_held.is_some()))],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> Status {
        Status {
            state: "verifying".into(),
            paused: true,
            source_keys_at_start: 500,
            scanned: 510,
            moved_on_touch: 7,
            moved_by_walker: 480,
            already_moved: 13,
            errors: 2,
            last_error: Some("x".into()),
            passes: 1,
            elapsed_seconds: 3.0,
            rate: 162.3,
            eta_seconds: Some(0.0),
            max_keys_per_second: 0,
            source_keys_left: Some(4),
            source_rate: 100.0,
            values_checked: 9,
            values_differ: 1,
            end_held: Some("y".into()),
            counts: None,
            orphan_items: 4,
            orphan_item_names: Vec::new(),
        }
    }

    #[test]
    fn every_series_carries_its_counter() {
        let mut out = String::new();
        render_migration(&status(), &mut out);
        for line in [
            "slotbridge_migration_keys_moved_total{by=\"touch\"} 7\n",
            "slotbridge_migration_keys_moved_total{by=\"walker\"} 480\n",
            "slotbridge_migration_keys_already_moved_total 13\n",
            "slotbridge_migration_keys_scanned_total 510\n",
            "slotbridge_migration_errors_total 2\n",
            "slotbridge_migration_passes_total 1\n",
            "slotbridge_migration_source_keys 500\n",
            "slotbridge_migration_keys_left 4\n",
            "slotbridge_migration_state{state=\"walking\"} 0\n",
            "slotbridge_migration_state{state=\"paused\"} 0\n",
            "slotbridge_migration_state{state=\"verifying\"} 1\n",
            "slotbridge_migration_state{state=\"done\"} 0\n",
            "slotbridge_migration_paused 1\n",
            "slotbridge_migration_values_checked_total 9\n",
            "slotbridge_migration_values_differ_total 1\n",
            "slotbridge_migration_end_held 1\n",
            "slotbridge_migration_orphan_items_total 4\n",
            "# TYPE slotbridge_migration_keys_moved_total counter\n",
            "# TYPE slotbridge_migration_state gauge\n",
        ] {
            assert!(out.contains(line), "{line:?} missing in\n{out}");
        }
        // One HELP and one TYPE per family, nothing else unlabelled.
        for name in MIGRATION_NAMES {
            assert_eq!(out.matches(&format!("# TYPE {name} ")).count(), 1, "{name}");
        }
    }

    #[test]
    fn names_are_prometheus_names() {
        for name in MIGRATION_NAMES {
            let rest = name.strip_prefix("slotbridge_migration_").unwrap_or("");
            assert!(
                !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}"
            );
            let counter = name.ends_with("_total");
            let gauges = [
                MIGRATION_SOURCE_KEYS,
                MIGRATION_KEYS_LEFT,
                MIGRATION_STATE,
                MIGRATION_PAUSED,
                MIGRATION_END_HELD,
            ];
            let gauge = gauges.contains(&name);
            assert!(
                counter != gauge,
                "{name}: counters end in _total, gauges do not"
            );
        }
    }
}
