//! Per-command series: the outcome of each reply and its latency, by command name.
//!
//! Invariants: the `command` label takes only names of the command table (or `unknown`),
//! and each command's handles are created once, on its first use, so recording a command
//! allocates nothing.

use std::fmt::Write;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use metrics::{counter, Counter};

use super::histogram::{escape_label, LatencyHistogram};
use super::{crossslot_refusals, COMMANDS, COMMAND_DURATION, COMMAND_DURATION_HELP};
use crate::command::CommandTable;

/// How a command ended, as the `outcome` label says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Any non-error reply.
    Ok,
    /// An error reply (from a node or the proxy).
    Error,
    /// Refused because the keys span slots.
    CrossSlot,
    /// The connection failed after the command was sent; its outcome is unknown.
    Lost,
}

/// Marks the proxy's "outcome unknown" error (see `reply::outcome_unknown`).
const LOST_MARKER: &[u8] = b"failed after the command was sent";

impl Outcome {
    /// Classifies a complete reply frame by its first bytes (and, for the proxy's own
    /// lost-reply error, its text).
    pub fn of_reply(reply: &[u8]) -> Outcome {
        match reply.first() {
            Some(b'-') | Some(b'!') => {
                let body = reply.get(1..).unwrap_or_default();
                if body.starts_with(b"CROSSSLOT") {
                    Outcome::CrossSlot
                } else if body.starts_with(b"ERR proxy: connection")
                    && body
                        .windows(LOST_MARKER.len())
                        .any(|window| window == LOST_MARKER)
                {
                    Outcome::Lost
                } else {
                    Outcome::Error
                }
            }
            _ => Outcome::Ok,
        }
    }

    fn index(self) -> usize {
        match self {
            Outcome::Ok => 0,
            Outcome::Error => 1,
            Outcome::CrossSlot => 2,
            Outcome::Lost => 3,
        }
    }
}

/// Label values of [`Outcome`], in [`Outcome::index`] order.
const OUTCOME_LABELS: [&str; 4] = ["ok", "error", "crossslot", "lost"];

/// One command's series: a counter per outcome and its latency histogram.
struct CommandHandles {
    outcomes: [Counter; 4],
    duration: LatencyHistogram,
}

impl CommandHandles {
    fn new(command: &str) -> CommandHandles {
        let counter_for = |outcome: &'static str| counter!(COMMANDS, "command" => command.to_string(), "outcome" => outcome);
        CommandHandles {
            outcomes: OUTCOME_LABELS.map(counter_for),
            duration: LatencyHistogram::default(),
        }
    }
}

/// Per-command metric handles for every name of the command table, each created on the
/// command's first use (so unused commands export no series).
pub struct CommandMetrics {
    /// `false` when metrics are disabled: recording does nothing.
    enabled: bool,
    /// By command-table index (the table's `iter` order).
    by_index: Vec<OnceLock<CommandHandles>>,
    names: Vec<Box<str>>,
    unknown: OnceLock<CommandHandles>,
}

impl CommandMetrics {
    /// Slots for every command of `table` (the label set is the table, so it is bounded);
    /// `enabled: false` records nothing.
    pub fn new(table: &CommandTable, enabled: bool) -> CommandMetrics {
        CommandMetrics {
            enabled,
            by_index: table.iter().map(|_| OnceLock::new()).collect(),
            names: table.iter().map(|spec| spec.name.as_str().into()).collect(),
            unknown: OnceLock::new(),
        }
    }

    /// Records one finished command. `command` is its index in the command table the
    /// metrics were built from (`None` counts as `unknown`); `started` is when it was
    /// dispatched.
    pub fn record(&self, command: Option<usize>, reply: &[u8], started: Instant) {
        self.record_elapsed(command, reply, started.elapsed());
    }

    /// Like [`CommandMetrics::record`], with the latency measured by the caller (who may
    /// time many commands with one pair of clock reads).
    pub fn record_elapsed(&self, command: Option<usize>, reply: &[u8], elapsed: Duration) {
        if self.enabled {
            self.record_many(command, Outcome::of_reply(reply), elapsed, 1);
        }
    }

    /// Records `count` finished commands alike: one command, one outcome, one latency (the
    /// replies of a pipeline that arrive together), with one update of each series.
    pub fn record_many(
        &self,
        command: Option<usize>,
        outcome: Outcome,
        elapsed: Duration,
        count: u64,
    ) {
        if !self.enabled {
            return;
        }
        let known = command.and_then(|i| Some((self.names.get(i)?, self.by_index.get(i)?)));
        let (name, slot) = match known {
            Some((name, slot)) => (&**name, slot),
            None => ("unknown", &self.unknown),
        };
        let handles = slot.get_or_init(|| CommandHandles::new(name));
        handles.outcomes[outcome.index()].increment(count);
        handles.duration.record_many(elapsed, count);
        if outcome == Outcome::CrossSlot {
            crossslot_refusals(count);
        }
    }

    /// Whether recording does anything.
    pub fn is_enabled(&self) -> bool {
        self.enabled
    }

    /// Appends the latency histograms of the commands used so far to `out`, in the
    /// Prometheus text format (nothing when none was used).
    pub fn render_durations(&self, out: &mut String) {
        let used = self
            .names
            .iter()
            .map(|name| &**name)
            .zip(&self.by_index)
            .chain(std::iter::once(("unknown", &self.unknown)))
            .filter_map(|(name, slot)| Some((name, slot.get()?)));
        let mut described = false;
        for (name, handles) in used {
            if !described {
                let _ = writeln!(out, "# HELP {COMMAND_DURATION} {COMMAND_DURATION_HELP}");
                let _ = writeln!(out, "# TYPE {COMMAND_DURATION} histogram");
                described = true;
            }
            let labels = format!("command=\"{}\"", escape_label(name));
            handles.duration.render(out, COMMAND_DURATION, &labels);
        }
    }
}
