//! Moves across slots carried out (see `crate::crossslot::moves` for the steps, their
//! order and what a failure between them leaves): each step goes to its key's master
//! through the forward path (redirects, retries), except RENAME's WATCH and its final
//! DEL, which share a connection of their own so that EXEC deletes the source only if
//! nothing wrote it since the WATCH. Steps run one after the other: each depends on the
//! previous one's reply.

use bytes::Bytes;

use crate::crossslot::moves::{request_frame, MoveRequest, Mover, Next, Side};
use crate::dispatch::{watch_failed, Proxy, Target, WatchPin};
use crate::protocol::Proto;
use crate::reply;
use crate::route::key_slot;

/// The most steps a move takes (WATCH, read, copy, removal): a [`Mover`] asking for more
/// is a bug, answered as such rather than looped on.
const MAX_STEPS: usize = 4;

impl Proxy {
    /// Runs `request`'s steps and returns the client's reply.
    pub(super) async fn cross_slot_move(&self, request: &MoveRequest, proto: Proto) -> Bytes {
        let max_bytes = self.config.cross_slot.max_bytes;
        let mut mover = Mover::new(request.clone(), proto, max_bytes);
        let source = Target::Slot(key_slot(&request.source));
        let destination = Target::Slot(key_slot(&request.destination));
        // Helper commands speak RESP2; the mover builds the reply in the client's protocol.
        let wire = Proto::Resp2;
        let mut pin: Option<WatchPin> = None;
        let mut next = mover.start();
        for _ in 0..=MAX_STEPS {
            let answer = match next {
                Next::Reply(reply) => return reply,
                Next::Send(side, command) => {
                    let target = match side {
                        Side::Source => source,
                        Side::Destination => destination,
                    };
                    self.upstream
                        .forward(target, request_frame(&command), wire)
                        .await
                }
                Next::WatchSource => {
                    let watch = [Bytes::from_static(b"WATCH"), request.source.clone()];
                    let slot = key_slot(&request.source);
                    let (answer, watched) =
                        self.upstream.watch(slot, request_frame(&watch), wire).await;
                    pin = watched;
                    answer
                }
                Next::ExecWatched(commands) => match pin.take() {
                    Some(pin) => {
                        let commands: Vec<Bytes> =
                            commands.iter().map(|c| request_frame(c)).collect();
                        self.upstream
                            .exec_block(source, &[], &commands, Some(pin), None, wire)
                            .await
                    }
                    // Nothing watched: never run the block unchecked, keep the source.
                    None => watch_failed(wire),
                },
            };
            next = mover.step(&answer);
        }
        reply::error(reply::crossslot::MOVE_UNEXPECTED)
    }
}
