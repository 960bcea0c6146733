//! A snapshot of a live migration's progress, as `GET /migration`, `slotbridge migrate
//! status` and the `slotbridge_migration_*` metrics report it: the state, the counters, and
//! what follows from them (rate, estimated time left).
//!
//! Invariants: a snapshot is plain data read from the migration's atomics at one moment
//! (each counter read once, so the derived numbers agree with the ones shown); the JSON
//! form is the contract the CLI reads back ([`Status::from_json`]).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use serde::Deserialize;

use super::migration::{Migration, State};
use crate::migrate::report::json_string;

/// The states in the order metrics list them.
pub const STATES: [State; 4] = [State::Walking, State::Paused, State::Verifying, State::Done];

/// One migration's progress at one moment.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Status {
    /// `walking`, `paused`, `verifying` or `done` ([`State::name`]).
    pub state: String,
    /// Whether the walker is told to pause (by the config or an admin call).
    pub paused: bool,
    /// The source's keys when the walker began (`DBSIZE`, claim records included): the
    /// estimate of the work. 0 until the walker has measured it.
    pub source_keys_at_start: u64,
    /// Source names the walker has seen.
    pub scanned: u64,
    /// Keys this process moved because a command touched them.
    pub moved_on_touch: u64,
    /// Keys this process's walker moved.
    pub moved_by_walker: u64,
    /// Moves that found the key already moved (by another mover or proxy) or gone.
    pub already_moved: u64,
    /// Moves that failed (each is retried).
    pub errors: u64,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// Complete passes of the walker over the source.
    pub passes: u64,
    /// Seconds since the migration started in this process (until its end, once done).
    pub elapsed_seconds: f64,
    /// Keys moved per second since the start (both kinds of move, paused time included).
    pub rate: f64,
    /// Seconds left at that rate; `None` when unknown (nothing moved yet).
    pub eta_seconds: Option<f64>,
    /// The walker's pace limit, keys per second (0: none).
    pub max_keys_per_second: u64,
    /// The source's keys at the last look (once a second; claims of moves in flight
    /// included): what is left of the whole migration, every proxy's moves counted. `None`
    /// before the first look (and from a proxy that does not report it).
    #[serde(default)]
    pub source_keys_left: Option<u64>,
    /// How fast the source's keys fell over the last 10 s, every proxy's moves counted.
    #[serde(default)]
    pub source_rate: f64,
    /// Walker moves whose value was compared on both sides between seal and finish.
    #[serde(default)]
    pub values_checked: u64,
    /// Of those, the ones whose values differed.
    #[serde(default)]
    pub values_differ: u64,
    /// Why the end is held (a checked value differed) until an operator resumes; `None`
    /// when it is not.
    #[serde(default)]
    pub end_held: Option<String>,
    /// What the end's count check found (every key at the start moved or expired), once
    /// it passed in this proxy.
    #[serde(default)]
    pub counts: Option<String>,
    /// Message items this proxy's walker met that their chat's log does not list (moved
    /// all the same, under their own names' target names).
    #[serde(default)]
    pub orphan_items: u64,
    /// The first of them.
    #[serde(default)]
    pub orphan_item_names: Vec<String>,
}

impl Migration {
    /// Where the migration is now.
    pub fn status(&self) -> Status {
        let c = &self.counters;
        let last_error = self
            .last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let (source_keys_left, source_rate) = self.source_left();
        Status::derive(
            Status {
                state: self.state().name().to_owned(),
                paused: self.is_paused(),
                source_keys_at_start: c.source_keys_at_start.load(Ordering::Relaxed),
                scanned: c.scanned.load(Ordering::Relaxed),
                moved_on_touch: c.moved_on_touch.load(Ordering::Relaxed),
                moved_by_walker: c.moved_by_walker.load(Ordering::Relaxed),
                already_moved: c.already_moved.load(Ordering::Relaxed),
                errors: c.errors.load(Ordering::Relaxed),
                last_error,
                passes: c.passes.load(Ordering::Relaxed),
                elapsed_seconds: match self.finished.get() {
                    Some(end) => end.duration_since(self.started).as_secs_f64(),
                    None => self.started.elapsed().as_secs_f64(),
                },
                rate: 0.0,
                eta_seconds: None,
                max_keys_per_second: self.max_keys_per_second(),
                source_keys_left,
                source_rate,
                values_checked: c.values_checked.load(Ordering::Relaxed),
                values_differ: c.values_differ.load(Ordering::Relaxed),
                end_held: self.end_held(),
                counts: self
                    .counts
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone(),
                orphan_items: c.orphan_items.load(Ordering::Relaxed),
                orphan_item_names: self.orphan_names(),
            },
            self.state(),
        )
    }
}

impl Status {
    /// Fills in the rate and the estimated time left from the counters of `status`.
    fn derive(mut status: Status, state: State) -> Status {
        status.rate = match status.elapsed_seconds > 0.0 {
            true => status.moved() as f64 / status.elapsed_seconds,
            false => 0.0,
        };
        let remaining = status.remaining();
        // The source's fall counts every proxy's moves; this process's rate only its own.
        let rate = match status.source_rate > 0.0 {
            true => status.source_rate,
            false => status.rate,
        };
        status.eta_seconds = if state == State::Done || remaining == 0 {
            Some(0.0)
        } else if rate > 0.0 {
            Some(remaining as f64 / rate)
        } else {
            None
        };
        status
    }

    /// Keys this process moved, by touch and by the walker.
    pub fn moved(&self) -> u64 {
        self.moved_on_touch + self.moved_by_walker
    }

    /// Keys left to move: the source's at the last look once there was one (every proxy's
    /// moves counted), else the start estimate less what this process moved or found moved.
    pub fn remaining(&self) -> u64 {
        match (self.is_done(), self.source_keys_left) {
            (true, _) => 0,
            (false, Some(left)) => left,
            (false, None) => self
                .source_keys_at_start
                .saturating_sub(self.moved() + self.already_moved),
        }
    }

    /// (done, total) for a progress bar: of the start estimate, what has left the source
    /// (every proxy's moves), or what this process accounted for before the first look. The
    /// total is never below what is done.
    pub fn progress(&self) -> (u64, u64) {
        let done = match self.source_keys_left {
            Some(left) => self.source_keys_at_start.saturating_sub(left),
            None => self.moved() + self.already_moved,
        };
        let done = match self.is_done() {
            true => self.source_keys_at_start.max(done),
            false => done,
        };
        (done, self.source_keys_at_start.max(done))
    }

    /// Whether the migration is over: the source is no longer consulted.
    pub fn is_done(&self) -> bool {
        self.state == State::Done.name()
    }

    /// The snapshot as one JSON object (the body of `GET /migration`).
    pub fn to_json(&self) -> String {
        let mut out = String::from("{");
        let _ = write!(
            out,
            "\"state\":{},\"paused\":{},\"source_keys_at_start\":{},\"scanned\":{},\
             \"moved_on_touch\":{},\"moved_by_walker\":{},\"already_moved\":{},\
             \"errors\":{},\"last_error\":{},\"passes\":{},\"elapsed_seconds\":{:.3},\
             \"rate\":{:.1},\"eta_seconds\":{},\"max_keys_per_second\":{},\
             \"source_keys_left\":{},\"source_rate\":{:.1},\"values_checked\":{},\
             \"values_differ\":{},\"end_held\":{},\"counts\":{},\"orphan_items\":{},\
             \"orphan_item_names\":[{}]}}",
            json_string(&self.state),
            self.paused,
            self.source_keys_at_start,
            self.scanned,
            self.moved_on_touch,
            self.moved_by_walker,
            self.already_moved,
            self.errors,
            self.last_error
                .as_deref()
                .map_or_else(|| "null".to_owned(), json_string),
            self.passes,
            self.elapsed_seconds,
            self.rate,
            self.eta_seconds
                .map_or_else(|| "null".to_owned(), |eta| format!("{eta:.1}")),
            self.max_keys_per_second,
            self.source_keys_left
                .map_or_else(|| "null".to_owned(), |left| left.to_string()),
            self.source_rate,
            self.values_checked,
            self.values_differ,
            self.end_held
                .as_deref()
                .map_or_else(|| "null".to_owned(), json_string),
            self.counts
                .as_deref()
                .map_or_else(|| "null".to_owned(), json_string),
            self.orphan_items,
            self.orphan_item_names
                .iter()
                .map(|name| json_string(name))
                .collect::<Vec<_>>()
                .join(","),
        );
        out
    }

    /// Reads a snapshot back from [`Status::to_json`]'s form (what the CLI gets over HTTP).
    pub fn from_json(text: &str) -> Result<Status, String> {
        serde_json::from_str(text).map_err(|e| format!("not a migration status: {e}"))
    }

    /// The snapshot as lines for a person.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let paused = match self.paused && self.state != State::Paused.name() {
            true => " (walker told to pause)",
            false => "",
        };
        let _ = writeln!(out, "state: {}{paused}", self.state);
        let (done, total) = self.progress();
        let whose = match self.source_keys_left {
            Some(_) => "on the source, every proxy's moves counted",
            None => "by this process's count",
        };
        let _ = writeln!(
            out,
            "progress: {done} of about {total} source keys ({} left {whose})",
            self.remaining()
        );
        let _ = writeln!(
            out,
            "moved: {} by the walker, {} on touch; {} found already moved",
            self.moved_by_walker, self.moved_on_touch, self.already_moved
        );
        let _ = writeln!(
            out,
            "walker: {} names scanned, {} passes, pace limit {}",
            self.scanned,
            self.passes,
            match self.max_keys_per_second {
                0 => "none".to_owned(),
                n => format!("{n} keys/s"),
            }
        );
        let eta = self
            .eta_seconds
            .map_or_else(|| "unknown".to_owned(), |s| format!("{s:.0} s"));
        let _ = writeln!(
            out,
            "rate: {:.1} keys/s by this process over {:.0} s; the source falls by {:.1} keys/s \
             (last 10 s); time left: {eta}",
            self.rate, self.elapsed_seconds, self.source_rate
        );
        let _ = writeln!(
            out,
            "values checked: {}, {} differed",
            self.values_checked, self.values_differ
        );
        if let Some(why) = &self.end_held {
            let _ = writeln!(
                out,
                "end held: {why}; `slotbridge migrate resume` accepts it and lets the end come"
            );
        }
        if self.orphan_items > 0 {
            let _ = writeln!(
                out,
                "orphan message items: {} (no chat log lists them; moved under their own \
                 names), e.g. {}",
                self.orphan_items,
                self.orphan_item_names
                    .iter()
                    .take(5)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        if let Some(counts) = &self.counts {
            let _ = writeln!(out, "counts verified: {counts}");
        }
        let _ = writeln!(out, "errors: {}", self.errors);
        if let Some(error) = &self.last_error {
            let _ = writeln!(out, "last error: {error}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(elapsed: f64, source: u64, walker: u64, touch: u64, already: u64) -> Status {
        Status {
            state: "walking".into(),
            paused: false,
            source_keys_at_start: source,
            scanned: walker + already,
            moved_on_touch: touch,
            moved_by_walker: walker,
            already_moved: already,
            errors: 0,
            last_error: None,
            passes: 0,
            elapsed_seconds: elapsed,
            rate: 0.0,
            eta_seconds: None,
            max_keys_per_second: 0,
            source_keys_left: None,
            source_rate: 0.0,
            values_checked: 0,
            values_differ: 0,
            end_held: None,
            counts: None,
            orphan_items: 0,
            orphan_item_names: Vec::new(),
        }
    }

    #[test]
    fn once_the_source_was_looked_at_what_is_left_counts_every_proxys_moves() {
        // This process moved 100 of 1,000 in 10 s; other proxies moved 500 more meanwhile:
        // the source holds 400, and fell by 50 keys/s lately.
        let mut s = status(10.0, 1000, 100, 0, 0);
        s.source_keys_left = Some(400);
        s.source_rate = 50.0;
        let s = Status::derive(s, State::Walking);
        assert_eq!(s.rate, 10.0);
        assert_eq!(s.remaining(), 400);
        assert_eq!(s.eta_seconds, Some(8.0));
        assert_eq!(s.progress(), (600, 1000));
        // Before the source falls measurably, the eta rests on this process's rate.
        let mut still = status(10.0, 1000, 100, 0, 0);
        still.source_keys_left = Some(900);
        let still = Status::derive(still, State::Walking);
        assert_eq!(still.eta_seconds, Some(90.0));
        // Done: nothing left, the bar full, whatever the last look said.
        let mut done = status(10.0, 1000, 100, 0, 0);
        done.state = "done".into();
        done.source_keys_left = Some(3);
        assert_eq!((done.remaining(), done.progress()), (0, (1000, 1000)));
    }

    #[test]
    fn progress_before_a_look_is_this_processs_count_and_never_past_the_total() {
        assert_eq!(status(1.0, 1000, 200, 100, 100).progress(), (400, 1000));
        assert_eq!(status(1.0, 10, 8, 0, 4).progress(), (12, 12));
    }

    #[test]
    fn rate_counts_both_kinds_of_move_and_eta_the_rest_of_the_estimate() {
        // 300 moved in 10 s: 30 keys/s; 1000 - 300 - 100 already moved = 600 left: 20 s.
        let s = Status::derive(status(10.0, 1000, 200, 100, 100), State::Walking);
        assert_eq!(s.rate, 30.0);
        assert_eq!(s.remaining(), 600);
        assert_eq!(s.eta_seconds, Some(20.0));
    }

    #[test]
    fn eta_is_unknown_before_a_move_and_zero_when_nothing_is_left() {
        let idle = Status::derive(status(5.0, 500, 0, 0, 0), State::Paused);
        assert_eq!((idle.rate, idle.eta_seconds), (0.0, None));
        let at_start = Status::derive(status(0.0, 500, 0, 0, 0), State::Walking);
        assert_eq!((at_start.rate, at_start.eta_seconds), (0.0, None));
        // More accounted for than the estimate (keys added to DBSIZE's count by claims).
        let over = Status::derive(status(2.0, 10, 8, 0, 4), State::Verifying);
        assert_eq!((over.remaining(), over.eta_seconds), (0, Some(0.0)));
        let done = Status::derive(status(2.0, 10, 3, 0, 0), State::Done);
        assert_eq!(done.eta_seconds, Some(0.0));
    }

    #[test]
    fn json_has_every_field_and_reads_back() {
        let mut s = Status::derive(status(4.0, 100, 30, 10, 0), State::Walking);
        s.last_error = Some("target \"x\"\nrefused".into());
        let json = s.to_json();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let object = value.as_object().unwrap();
        for field in [
            "state",
            "paused",
            "source_keys_at_start",
            "scanned",
            "moved_on_touch",
            "moved_by_walker",
            "already_moved",
            "errors",
            "last_error",
            "passes",
            "elapsed_seconds",
            "rate",
            "eta_seconds",
            "max_keys_per_second",
            "source_keys_left",
            "source_rate",
            "values_checked",
            "values_differ",
            "end_held",
            "counts",
            "orphan_items",
            "orphan_item_names",
        ] {
            assert!(object.contains_key(field), "{field} missing in {json}");
        }
        assert_eq!(object.len(), 22, "{json}");
        assert_eq!(value["rate"], 10.0);
        assert_eq!(value["eta_seconds"], 6.0);
        assert_eq!(value["last_error"], "target \"x\"\nrefused");
        assert_eq!(Status::from_json(&json).unwrap(), s);
        let unknown = Status::derive(status(1.0, 100, 0, 0, 0), State::Paused).to_json();
        assert!(unknown.contains("\"eta_seconds\":null,"), "{unknown}");
        assert!(unknown.contains("\"last_error\":null,"), "{unknown}");
        assert!(Status::from_json("{\"state\":1}").is_err());
        // A proxy of the release before reports neither of the source's figures.
        let mut older: serde_json::Value = serde_json::from_str(&json).unwrap();
        let fields = older.as_object_mut().unwrap();
        for field in [
            "source_keys_left",
            "source_rate",
            "values_checked",
            "end_held",
        ] {
            fields.remove(field);
        }
        let older = Status::from_json(&older.to_string()).unwrap();
        assert_eq!((older.source_keys_left, older.source_rate), (None, 0.0));
        assert_eq!((older.values_checked, older.end_held), (0, None));
        s.source_keys_left = Some(7);
        s.source_rate = 2.5;
        s.values_checked = 3;
        s.values_differ = 1;
        s.end_held = Some("the value of \"k\" differs".into());
        s.counts = Some("3 keys at the start: 3 moved, 0 expired or evicted".into());
        s.orphan_items = 2;
        s.orphan_item_names = vec!["p:msg:c:\"m\"".into(), "p:msg:d:n".into()];
        assert_eq!(Status::from_json(&s.to_json()).unwrap(), s);
    }

    #[test]
    fn text_names_the_state_the_counts_and_the_last_error() {
        let mut s = Status::derive(status(10.0, 1000, 200, 100, 100), State::Walking);
        s.errors = 2;
        s.last_error = Some("source timed out".into());
        let text = s.to_text();
        assert!(text.starts_with("state: walking\n"), "{text}");
        assert!(text.contains("400 of about 1000 source keys (600 left by this process's count)"));
        assert!(text.contains("200 by the walker, 100 on touch; 100 found already moved"));
        assert!(text.contains("30.0 keys/s by this process over 10 s; the source falls by 0.0"));
        assert!(text.contains("time left: 20 s"));
        s.source_keys_left = Some(250);
        assert!(s
            .to_text()
            .contains("750 of about 1000 source keys (250 left on the source, every proxy's"));
        assert!(text.contains("errors: 2\nlast error: source timed out\n"));
        s.paused = true;
        assert!(s
            .to_text()
            .starts_with("state: walking (walker told to pause)\n"));
    }
}
