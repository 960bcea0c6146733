//! An exhaustive check of the claim protocol: every interleaving of two movers, a writer
//! and a reader of one key, with movers crashing at any point, the claim lease lapsing at
//! any point and (in one run) the source key expiring at any point.
//!
//! The movers and the writer are driven by the real [`KeyMove`] machine; the three scripts
//! are modelled here step for step after `claim.lua`, `seal.lua` and `finish.lua` (each
//! script is atomic on its server, so each is one step). The writer moves the key, then
//! writes (or deletes) it on the target and counts as acknowledged; the reader follows the
//! read rule of `docs/live-migration.md` (target, then source, then target again).
//!
//! The walk's end compacts the key's moved-fence (`compact.lua`: one field for the whole
//! slot, which refuses every later seal) at any point after the source holds no key.
//!
//! Checked in every reachable state: an acknowledged write is what the target holds and
//! the source is clean (no lost write, no deleted key back, no second version); the two
//! copies never differ; every read returns a value the key held during the read. Checked
//! at the end, after a successor runs with every deadline past: the source holds neither
//! key nor claim. Variants without the fence, with the fence compacted while the source
//! still holds the key, with a claim that answers gone whenever the key
//! is missing, or without the read rule's third read must fail, so the check can fail.

use std::collections::HashSet;

use bytes::Bytes;

use super::claim::{Claim, Finish, KeyMove, Phase, Seal, Value};

/// The claim lease, in model ticks.
const LEASE: u8 = 2;
/// The last tick the clock reaches during the interleavings.
const LAST_TICK: u8 = 2 * LEASE + 1;
/// The value on the source at the start, and the one the writer writes.
const ORIGINAL: u8 = 0;
const WRITTEN: u8 = 1;

/// What the writer does once the key is moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Write,
    Delete,
}

/// The protocol's rules, with knobs to break them.
#[derive(Debug, Clone, Copy)]
struct Rules {
    op: Op,
    /// The source key may expire (at most once) at any point.
    expiry: bool,
    /// The seal refuses after the first (the real protocol); off: every seal writes.
    fence: bool,
    /// A read that missed on both sides reads the target again (the real read rule); off:
    /// it answers nil.
    third_read: bool,
    /// A claim answers gone while the source key is missing even if another claim exists
    /// (a broken rule); off: the real one.
    gone_on_missing_key: bool,
    /// When the walk's end may compact the fence.
    compaction: Compaction,
}

/// When the fence may be compacted (`compact.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compaction {
    /// Once the source holds no key: the walker's end (the real rule).
    WhenSourceEmpty,
    /// At any point (a broken rule).
    Anytime,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Actor {
    Running(KeyMove),
    Crashed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Read {
    /// Not started; then after the first target read, after the source read, finished.
    Start,
    AfterTarget {
        acked_at_start: bool,
    },
    AfterSource {
        acked_at_start: bool,
    },
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct World {
    now: u8,
    source: Option<u8>,
    /// Holder token and deadline.
    claim: Option<(u8, u8)>,
    target: Option<u8>,
    fenced: bool,
    /// The fence holds the whole slot's field (compacted): every later seal is refused.
    compacted: bool,
    expired: bool,
    movers: [Actor; 2],
    writer: KeyMove,
    acked: bool,
    read: Read,
    /// A read returned a value the key never held while it ran.
    bad_read: bool,
}

impl World {
    fn start() -> World {
        World {
            now: 0,
            source: Some(ORIGINAL),
            claim: None,
            target: None,
            fenced: false,
            compacted: false,
            expired: false,
            movers: [
                Actor::Running(KeyMove::new()),
                Actor::Running(KeyMove::new()),
            ],
            writer: KeyMove::new(),
            acked: false,
            read: Read::Start,
            bad_read: false,
        }
    }

    /// claim.lua.
    fn claim(&mut self, token: u8, rules: Rules) -> Claim {
        if let Some((holder, deadline)) = self.claim {
            if holder != token && deadline > self.now {
                return Claim::Busy {
                    remaining_ms: u64::from(deadline - self.now),
                };
            }
        }
        if self.source.is_none() && (self.claim.is_none() || rules.gone_on_missing_key) {
            return Claim::Gone;
        }
        self.claim = Some((token, self.now + LEASE));
        match self.source {
            None => Claim::Absent,
            Some(v) => Claim::Claimed(Value {
                ttl_ms: 0,
                payload: Bytes::from(vec![v]),
            }),
        }
    }

    /// seal.lua.
    fn seal(&mut self, value: &Option<Value>, rules: Rules) -> Seal {
        if rules.fence && (self.fenced || self.compacted) {
            return Seal::AlreadyMoved;
        }
        self.target = value.as_ref().map(|v| v.payload[0]);
        self.fenced = true;
        Seal::Wrote
    }

    /// finish.lua.
    fn finish(&mut self, token: u8) -> Finish {
        match self.claim {
            Some((holder, _)) if holder == token => {
                self.source = None;
                self.claim = None;
                Finish::Released
            }
            _ => Finish::NotHolder,
        }
    }

    /// One step of a move with `token`; `lapse`: the mover's lease runs out instead.
    fn step_move(&mut self, mv: &mut KeyMove, token: u8, lapse: bool, rules: Rules) {
        match mv.phase().clone() {
            Phase::Claim => mv.on_claim(self.claim(token, rules)),
            Phase::Wait { .. } => mv.on_waited(),
            Phase::Seal(_) if lapse => mv.on_lease_lapsed(),
            Phase::Seal(value) => mv.on_seal(self.seal(&value, rules)),
            Phase::Finish => mv.on_finish(self.finish(token)),
            Phase::Done(_) => {}
        }
    }

    fn written(rules: Rules) -> Option<u8> {
        match rules.op {
            Op::Write => Some(WRITTEN),
            Op::Delete => None,
        }
    }

    /// Every state reachable in one step, each with a label for a failing trace.
    fn successors(&self, rules: Rules) -> Vec<(String, World)> {
        let mut out = Vec::new();
        for (i, actor) in self.movers.iter().enumerate() {
            let Actor::Running(mv) = actor else { continue };
            if matches!(mv.phase(), Phase::Done(_)) {
                continue;
            }
            for lapse in [false, true] {
                if lapse && !matches!(mv.phase(), Phase::Seal(_)) {
                    continue;
                }
                let mut next = self.clone();
                let mut mv = mv.clone();
                next.step_move(&mut mv, i as u8 + 1, lapse, rules);
                next.movers[i] = Actor::Running(mv);
                out.push((format!("mover {i} {:?} (lapse {lapse})", actor), next));
            }
            let mut crashed = self.clone();
            crashed.movers[i] = Actor::Crashed;
            out.push((format!("mover {i} crashes"), crashed));
        }
        self.writer_steps(rules, &mut out);
        self.read_step(rules, &mut out);
        if self.now < LAST_TICK {
            let mut next = self.clone();
            next.now += 1;
            out.push(("tick".to_owned(), next));
        }
        let may_compact = match rules.compaction {
            Compaction::WhenSourceEmpty => self.source.is_none(),
            Compaction::Anytime => true,
        };
        if !self.compacted && may_compact {
            let mut next = self.clone();
            next.compacted = true;
            out.push(("the walk's end compacts the fence".to_owned(), next));
        }
        if rules.expiry && !self.expired && self.source.is_some() {
            let mut next = self.clone();
            next.source = None;
            next.expired = true;
            out.push(("source key expires".to_owned(), next));
        }
        out
    }

    fn writer_steps(&self, rules: Rules, out: &mut Vec<(String, World)>) {
        if self.acked {
            return;
        }
        if let Phase::Done(_) = self.writer.phase() {
            let mut next = self.clone();
            next.target = World::written(rules);
            next.acked = true;
            out.push((format!("writer {:?} acknowledged", rules.op), next));
            return;
        }
        for lapse in [false, true] {
            if lapse && !matches!(self.writer.phase(), Phase::Seal(_)) {
                continue;
            }
            let mut next = self.clone();
            let mut mv = self.writer.clone();
            next.step_move(&mut mv, 3, lapse, rules);
            next.writer = mv;
            out.push((format!("writer moves {:?}", self.writer.phase()), next));
        }
    }

    fn read_step(&self, rules: Rules, out: &mut Vec<(String, World)>) {
        let mut next = self.clone();
        let answer = match self.read {
            Read::Done => return,
            Read::Start => match self.target {
                Some(v) => Some((Some(v), self.acked)),
                None => {
                    next.read = Read::AfterTarget {
                        acked_at_start: self.acked,
                    };
                    None
                }
            },
            Read::AfterTarget { acked_at_start } => match self.source {
                Some(v) => Some((Some(v), acked_at_start)),
                None if !rules.third_read => Some((None, acked_at_start)),
                None => {
                    next.read = Read::AfterSource { acked_at_start };
                    None
                }
            },
            Read::AfterSource { acked_at_start } => Some((self.target, acked_at_start)),
        };
        if let Some((value, acked_at_start)) = answer {
            next.read = Read::Done;
            next.bad_read = !self.read_is_possible(value, acked_at_start, rules);
        }
        out.push((format!("reader {:?}", self.read), next));
    }

    /// Whether `value` is one the key held between the read's start and now.
    fn read_is_possible(&self, value: Option<u8>, acked_at_start: bool, rules: Rules) -> bool {
        let before = value == Some(ORIGINAL) || (rules.expiry && value.is_none());
        let after = value == World::written(rules);
        if acked_at_start {
            after
        } else if self.acked {
            before || after
        } else {
            before
        }
    }

    /// The safety properties of one state.
    fn check(&self, rules: Rules) -> Result<(), String> {
        if self.bad_read {
            return Err("a read returned a value the key never held during it".to_owned());
        }
        if self.acked && self.target != World::written(rules) {
            return Err(format!(
                "acknowledged {:?} undone: target {:?}",
                rules.op, self.target
            ));
        }
        if self.acked && self.source.is_some() {
            return Err("source still holds the key after a write was acknowledged".to_owned());
        }
        if let (Some(s), Some(t)) = (self.source, self.target) {
            if s != t {
                return Err(format!("two versions: source {s}, target {t}"));
            }
        }
        Ok(())
    }

    fn quiescent(&self) -> bool {
        let moved = |mv: &KeyMove| matches!(mv.phase(), Phase::Done(_));
        self.movers.iter().all(|a| match a {
            Actor::Running(mv) => moved(mv),
            Actor::Crashed => true,
        }) && self.read == Read::Done
    }

    /// After every deadline, the writer (if not yet acknowledged) and then a successor
    /// mover run alone: both must finish, leaving the source clean.
    fn finish_with_successor(&self, rules: Rules) -> Result<(), String> {
        let mut world = self.clone();
        world.now = LAST_TICK + LEASE + 1;
        let mut writer = world.writer.clone();
        let mut successor = KeyMove::new();
        for (mv, token) in [(&mut writer, 3), (&mut successor, 4)] {
            for _ in 0..8 {
                if matches!(mv.phase(), Phase::Done(_)) {
                    break;
                }
                world.step_move(mv, token, false, rules);
            }
            if !matches!(mv.phase(), Phase::Done(_)) {
                return Err(format!("mover {token} stuck in {:?}", mv.phase()));
            }
            if token == 3 && !world.acked {
                world.target = World::written(rules);
                world.acked = true;
            }
        }
        if world.source.is_some() || world.claim.is_some() {
            return Err("source not clean after a successor's move".to_owned());
        }
        world.check(rules)
    }
}

/// Explores every interleaving; the number of states, or every kind of violation found,
/// each with the steps that first led to it.
fn explore(rules: Rules) -> Result<usize, String> {
    let mut seen = HashSet::new();
    let mut violations: Vec<(String, String)> = Vec::new();
    let mut stack = vec![(World::start(), Vec::<String>::new())];
    while let Some((world, trace)) = stack.pop() {
        if !seen.insert(world.clone()) {
            continue;
        }
        let verdict = world.check(rules).and_then(|()| {
            if world.quiescent() {
                world.finish_with_successor(rules)
            } else {
                Ok(())
            }
        });
        if let Err(e) = verdict {
            if !violations.iter().any(|(kind, _)| *kind == e) {
                let steps = trace.join("\n  then: ");
                violations.push((e, steps));
            }
            continue;
        }
        for (label, next) in world.successors(rules) {
            let mut longer = trace.clone();
            longer.push(label);
            stack.push((next, longer));
        }
    }
    if violations.is_empty() {
        return Ok(seen.len());
    }
    let found: Vec<String> = violations
        .into_iter()
        .map(|(kind, steps)| format!("{kind}\n  after: {steps}"))
        .collect();
    Err(found.join("\n"))
}

/// The real rules with a writer doing `op`, with and without the key expiring.
fn check_real_rules(op: Op) {
    for expiry in [false, true] {
        let rules = Rules {
            op,
            expiry,
            fence: true,
            third_read: true,
            gone_on_missing_key: false,
            compaction: Compaction::WhenSourceEmpty,
        };
        let states = explore(rules).unwrap_or_else(|e| panic!("{rules:?}: {e}"));
        assert!(states > 10_000, "{rules:?}: only {states} states explored");
    }
}

#[test]
fn two_movers_and_a_writing_client_keep_every_property_in_every_interleaving() {
    check_real_rules(Op::Write);
}

#[test]
fn two_movers_and_a_deleting_client_keep_every_property_in_every_interleaving() {
    check_real_rules(Op::Delete);
}

#[test]
fn without_the_fence_a_late_seal_undoes_an_acknowledged_write() {
    for op in [Op::Write, Op::Delete] {
        let rules = Rules {
            op,
            expiry: false,
            fence: false,
            third_read: true,
            gone_on_missing_key: false,
            compaction: Compaction::WhenSourceEmpty,
        };
        let violation = explore(rules).expect_err("an unfenced seal must break a property");
        assert!(
            violation.contains("undone") || violation.contains("two versions"),
            "{violation}"
        );
    }
}

#[test]
fn without_the_third_read_a_key_moved_between_two_reads_looks_missing() {
    let rules = Rules {
        op: Op::Write,
        expiry: false,
        fence: true,
        third_read: false,
        gone_on_missing_key: false,
        compaction: Compaction::WhenSourceEmpty,
    };
    let violation = explore(rules).expect_err("two reads must miss a key moved between them");
    assert!(violation.contains("a read returned"), "{violation}");
}

#[test]
fn answering_gone_for_a_missing_key_under_a_claim_lets_a_stalled_seal_undo_a_write() {
    let rules = Rules {
        op: Op::Write,
        expiry: true,
        fence: true,
        third_read: true,
        gone_on_missing_key: true,
        compaction: Compaction::WhenSourceEmpty,
    };
    let violation = explore(rules).expect_err("a stalled seal must land over the write");
    assert!(violation.contains("undone"), "{violation}");
}

#[test]
fn compacting_the_fence_before_the_source_is_empty_loses_a_key() {
    let rules = Rules {
        op: Op::Write,
        expiry: false,
        fence: true,
        third_read: true,
        gone_on_missing_key: false,
        compaction: Compaction::Anytime,
    };
    let violation = explore(rules).expect_err("an early compaction must refuse a first seal");
    assert!(violation.contains("a read returned"), "{violation}");
}
