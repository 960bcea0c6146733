//! The claim protocol of one key's move: its three scripts, their replies, and the pure
//! state machine a mover follows from reply to reply. No IO here; [`super::mover`] sends
//! the scripts, and the tests check the machine against a model of every interleaving.
//!
//! A move is claim (source), seal (target), finish (source):
//!
//! 1. [`CLAIM_SCRIPT`] on the source records the mover's token and a deadline in the key's
//!    claim record, refusing ([`Claim::Busy`]) while another mover's claim is live, and
//!    reads the value (DUMP, or the number of a counter) and its PTTL in the same step.
//! 2. [`SEAL_SCRIPT`] on the target writes the value with the offline copy's rules and
//!    marks the key moved in its slot's fence, unless the fence already says moved.
//! 3. [`FINISH_SCRIPT`] on the source deletes the key and the claim while the claim is
//!    still the mover's token.
//!
//! Invariants the machine keeps: it finishes only after a seal reply (so the source key is
//! deleted only once the target holds it); it reports a move complete only when the source
//! has neither key nor claim ([`Claim::Gone`]) or its own finish released the claim; a
//! finish refused (the claim was taken over) sends it back to claiming, never to done.

use bytes::Bytes;

/// The claim script, run on the source.
pub const CLAIM_SCRIPT: &str = include_str!("claim.lua");

/// The seal script, run on the target: the offline copy's restore-and-index and
/// set-if-greater scripts as functions, then the fence around them.
pub const SEAL_SCRIPT: &str = concat!(
    "local function restore_rule(KEYS, ARGV)\n",
    include_str!("../../lua/migrate_restore.lua"),
    "\nend\n",
    "local function raise_rule(KEYS, ARGV)\n",
    include_str!("../../lua/migrate_set_if_greater.lua"),
    "\nend\n",
    include_str!("seal.lua"),
);

/// The finish script, run on the source.
pub const FINISH_SCRIPT: &str = include_str!("finish.lua");

/// The compaction of a slot's moved-fence at the walk's end, run on the target.
pub const COMPACT_SCRIPT: &str = include_str!("compact.lua");

/// The claim script's answer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Claim {
    /// Another mover's claim is live for this many more milliseconds (source clock).
    Busy {
        /// Milliseconds until that claim's deadline.
        remaining_ms: u64,
    },
    /// Neither key nor claim on the source: nothing to move, the target is authoritative.
    Gone,
    /// The claim is ours, taken over from a lapsed one, but the key expired meanwhile.
    Absent,
    /// The claim is ours; the key's value as it is on the source.
    Claimed(Value),
}

/// A key's value read by the claim.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Value {
    /// Remaining TTL in ms, 0 when persistent.
    pub ttl_ms: u64,
    /// The DUMP payload, or a counter's number.
    pub payload: Bytes,
}

/// The seal script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Seal {
    /// This call wrote the target and set the fence.
    Wrote,
    /// The fence already said moved: another call wrote the target first.
    AlreadyMoved,
}

/// The finish script's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Finish {
    /// Source key and claim deleted.
    Released,
    /// The claim is another mover's (it took over) or gone: that mover finishes.
    NotHolder,
}

/// How a move ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// This mover sealed the target (it wrote the value) and released the source.
    Moved,
    /// Another mover had sealed the target; this one released the source.
    Finished,
    /// The source held neither key nor claim: the target is authoritative.
    NotOnSource,
}

/// What a mover does next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Send the claim script.
    Claim,
    /// Another claim is live: wait this long (or less, polling), then claim again.
    Wait {
        /// Milliseconds until the other claim's deadline.
        ms: u64,
    },
    /// Send the seal script with this (`None`: the key expired, delete the target's copy).
    Seal(Option<Value>),
    /// Send the finish script.
    Finish,
    /// The source is clean of the key; the target is authoritative.
    Done(Outcome),
}

/// One key's move as its mover sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyMove {
    phase: Phase,
    /// Whether this mover's seal wrote the target.
    wrote: bool,
}

impl Default for KeyMove {
    fn default() -> Self {
        KeyMove::new()
    }
}

impl KeyMove {
    /// A move about to claim.
    pub fn new() -> KeyMove {
        KeyMove {
            phase: Phase::Claim,
            wrote: false,
        }
    }

    /// Whether this mover's seal wrote the target.
    pub fn wrote(&self) -> bool {
        self.wrote
    }

    /// What to do next.
    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    /// Takes the claim script's answer.
    pub fn on_claim(&mut self, reply: Claim) {
        debug_assert_eq!(self.phase, Phase::Claim);
        self.phase = match reply {
            Claim::Busy { remaining_ms } => Phase::Wait { ms: remaining_ms },
            Claim::Gone => Phase::Done(self.outcome_when_gone()),
            Claim::Absent => Phase::Seal(None),
            Claim::Claimed(value) => Phase::Seal(Some(value)),
        };
    }

    /// The wait is over: claim again.
    pub fn on_waited(&mut self) {
        debug_assert!(matches!(self.phase, Phase::Wait { .. }));
        self.phase = Phase::Claim;
    }

    /// The lease ran out before the seal was sent: a value read that long ago would carry
    /// a TTL that long too long, so read it again under a fresh claim. (Safety does not
    /// depend on this: the fence refuses any seal after the first.)
    pub fn on_lease_lapsed(&mut self) {
        if matches!(self.phase, Phase::Seal(_)) {
            self.phase = Phase::Claim;
        }
    }

    /// Takes the seal script's answer.
    pub fn on_seal(&mut self, reply: Seal) {
        debug_assert!(matches!(self.phase, Phase::Seal(_)));
        self.wrote |= reply == Seal::Wrote;
        self.phase = Phase::Finish;
    }

    /// Takes the finish script's answer.
    pub fn on_finish(&mut self, reply: Finish) {
        debug_assert_eq!(self.phase, Phase::Finish);
        self.phase = match reply {
            Finish::Released if self.wrote => Phase::Done(Outcome::Moved),
            Finish::Released => Phase::Done(Outcome::Finished),
            // Whoever holds the claim now finishes; claiming again waits for that (or
            // takes over when it lapses) until the source says gone.
            Finish::NotHolder => Phase::Claim,
        };
    }

    fn outcome_when_gone(&self) -> Outcome {
        // Gone after our own seal: a successor finished what we wrote.
        if self.wrote {
            Outcome::Moved
        } else {
            Outcome::NotOnSource
        }
    }
}

/// Why a script's reply could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unexpected {script} script reply: {reply}")]
pub struct BadReply {
    /// Which script.
    pub script: &'static str,
    /// The reply, printed.
    pub reply: String,
}

/// One element of a script reply, as the mover's connection decodes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Element {
    /// An integer.
    Int(i64),
    /// A bulk or simple string.
    Data(Bytes),
}

/// Reads the claim script's reply (an array).
pub fn read_claim(items: &[Element]) -> Result<Claim, BadReply> {
    let bad = || BadReply {
        script: "claim",
        reply: format!("{items:?}"),
    };
    let Some(Element::Data(status)) = items.first() else {
        return Err(bad());
    };
    match (status.as_ref(), &items[1..]) {
        (b"busy", [Element::Int(ms)]) => Ok(Claim::Busy {
            remaining_ms: u64::try_from(*ms).unwrap_or(0),
        }),
        (b"gone", []) => Ok(Claim::Gone),
        (b"absent", []) => Ok(Claim::Absent),
        (b"claimed", [Element::Int(pttl), Element::Data(payload)]) => Ok(match *pttl {
            -1 => Claim::Claimed(Value {
                ttl_ms: 0,
                payload: payload.clone(),
            }),
            ms if ms > 0 => Claim::Claimed(Value {
                ttl_ms: ms as u64,
                payload: payload.clone(),
            }),
            // Read in the same step as EXISTS, so only an expiry due this very ms: absent.
            _ => Claim::Absent,
        }),
        _ => Err(bad()),
    }
}

/// Reads the seal script's reply.
pub fn read_seal(reply: i64) -> Result<Seal, BadReply> {
    match reply {
        1 => Ok(Seal::Wrote),
        0 => Ok(Seal::AlreadyMoved),
        other => Err(BadReply {
            script: "seal",
            reply: other.to_string(),
        }),
    }
}

/// Reads the finish script's reply.
pub fn read_finish(reply: i64) -> Result<Finish, BadReply> {
    match reply {
        1 => Ok(Finish::Released),
        0 => Ok(Finish::NotHolder),
        other => Err(BadReply {
            script: "finish",
            reply: other.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(text: &str) -> Element {
        Element::Data(Bytes::copy_from_slice(text.as_bytes()))
    }

    #[test]
    fn claim_replies_read_as_redis_sends_them() {
        assert_eq!(
            read_claim(&[data("busy"), Element::Int(250)]),
            Ok(Claim::Busy { remaining_ms: 250 })
        );
        assert_eq!(read_claim(&[data("gone")]), Ok(Claim::Gone));
        assert_eq!(read_claim(&[data("absent")]), Ok(Claim::Absent));
        let claimed = |pttl| read_claim(&[data("claimed"), Element::Int(pttl), data("v")]);
        assert_eq!(
            claimed(-1),
            Ok(Claim::Claimed(Value {
                ttl_ms: 0,
                payload: Bytes::from_static(b"v")
            }))
        );
        assert_eq!(
            claimed(1500),
            Ok(Claim::Claimed(Value {
                ttl_ms: 1500,
                payload: Bytes::from_static(b"v")
            }))
        );
        assert_eq!(claimed(0), Ok(Claim::Absent));
        assert!(read_claim(&[data("claimed"), Element::Int(5)]).is_err());
        assert!(read_claim(&[]).is_err());
        assert!(read_seal(7).is_err() && read_finish(-1).is_err());
    }

    #[test]
    fn a_move_finishes_only_after_its_seal() {
        let mut m = KeyMove::new();
        m.on_claim(Claim::Claimed(Value {
            ttl_ms: 0,
            payload: Bytes::from_static(b"v"),
        }));
        assert!(matches!(m.phase(), Phase::Seal(Some(_))));
        m.on_lease_lapsed();
        assert_eq!(m.phase(), &Phase::Claim);
        m.on_claim(Claim::Absent);
        assert_eq!(m.phase(), &Phase::Seal(None));
        m.on_seal(Seal::Wrote);
        assert_eq!(m.phase(), &Phase::Finish);
        m.on_finish(Finish::NotHolder);
        assert_eq!(m.phase(), &Phase::Claim, "a refused finish is not done");
        m.on_claim(Claim::Busy { remaining_ms: 40 });
        assert_eq!(m.phase(), &Phase::Wait { ms: 40 });
        m.on_waited();
        m.on_claim(Claim::Gone);
        assert_eq!(m.phase(), &Phase::Done(Outcome::Moved));
    }

    #[test]
    fn outcomes_say_who_wrote_the_target() {
        let mut other = KeyMove::new();
        other.on_claim(Claim::Absent);
        other.on_seal(Seal::AlreadyMoved);
        other.on_finish(Finish::Released);
        assert_eq!(other.phase(), &Phase::Done(Outcome::Finished));
        let mut nothing = KeyMove::new();
        nothing.on_claim(Claim::Gone);
        assert_eq!(nothing.phase(), &Phase::Done(Outcome::NotOnSource));
    }

    /// One answer of each script, picked by index, for whatever phase the machine is in.
    fn answer(mv: &mut KeyMove, pick: u8) -> &'static str {
        let value = Value {
            ttl_ms: 0,
            payload: Bytes::from_static(b"v"),
        };
        match mv.phase() {
            Phase::Claim => match pick % 4 {
                0 => {
                    mv.on_claim(Claim::Busy { remaining_ms: 5 });
                    "busy"
                }
                1 => {
                    mv.on_claim(Claim::Gone);
                    "gone"
                }
                2 => {
                    mv.on_claim(Claim::Absent);
                    "claimed"
                }
                _ => {
                    mv.on_claim(Claim::Claimed(value));
                    "claimed"
                }
            },
            Phase::Wait { .. } => {
                mv.on_waited();
                "waited"
            }
            Phase::Seal(_) => match pick % 3 {
                0 => {
                    mv.on_lease_lapsed();
                    "lapsed"
                }
                1 => {
                    mv.on_seal(Seal::Wrote);
                    "wrote"
                }
                _ => {
                    mv.on_seal(Seal::AlreadyMoved);
                    "sealed"
                }
            },
            Phase::Finish if pick % 2 == 0 => {
                mv.on_finish(Finish::Released);
                "released"
            }
            Phase::Finish => {
                mv.on_finish(Finish::NotHolder);
                "not holder"
            }
            Phase::Done(_) => "done",
        }
    }

    proptest::proptest! {
        #[test]
        fn any_run_of_answers_keeps_the_machines_promises(picks in proptest::collection::vec(0u8..12, 1..60)) {
            let mut mv = KeyMove::new();
            let (mut claimed, mut sealed, mut wrote) = (false, false, false);
            for pick in picks {
                let before = mv.phase().clone();
                let what = answer(&mut mv, pick);
                match what {
                    "claimed" => (claimed, sealed) = (true, false),
                    "lapsed" => claimed = false,
                    "wrote" | "sealed" => {
                        proptest::prop_assert!(claimed, "sealed without a claim");
                        sealed = true;
                        wrote |= what == "wrote";
                    }
                    "released" | "not holder" => {
                        proptest::prop_assert!(sealed, "finished without a seal");
                        (claimed, sealed) = (false, false);
                    }
                    _ => {}
                }
                match mv.phase() {
                    Phase::Done(outcome) if !matches!(before, Phase::Done(_)) => {
                        proptest::prop_assert!(matches!(what, "gone" | "released"), "done on {what}");
                        proptest::prop_assert_eq!(*outcome == Outcome::Moved, wrote);
                    }
                    Phase::Finish => proptest::prop_assert!(sealed),
                    _ => {}
                }
            }
        }
    }

    #[test]
    fn the_seal_script_wraps_the_offline_copy_rules() {
        assert!(SEAL_SCRIPT.contains("local function restore_rule(KEYS, ARGV)"));
        assert!(SEAL_SCRIPT.contains(include_str!("../../lua/migrate_restore.lua")));
        assert!(SEAL_SCRIPT.contains(include_str!("../../lua/migrate_set_if_greater.lua")));
    }
}
