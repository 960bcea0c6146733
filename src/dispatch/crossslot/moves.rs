//! Moves across slots carried out (see `crate::crossslot::moves` for the steps, their
//! order and what a failure between them leaves): each step goes to its key's master
//! through the forward path (redirects, retries), except RENAME's WATCH and its final
//! DEL, which share a connection of their own so that EXEC deletes the source only if
//! nothing wrote it since the WATCH, and a blocking move's wait, which runs on a
//! connection of its own as any blocking command does. Steps run one after the other:
//! each depends on the previous one's reply.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};

use crate::crossslot::moves::{request_frame, MoveRequest, Mover, Next, Side};
use crate::dispatch::{watch_failed, Proxy, Target, WatchPin};
use crate::protocol::{encode, Proto};
use crate::reply;
use crate::route::key_slot;

/// The most steps a move takes between two waits (WATCH, read, copy, removal): a
/// [`Mover`] asking for more is a bug, answered as such rather than looped on.
const MAX_STEPS: usize = 4;

/// A blocking move's wait, and the time it may still wait in all.
struct Wait {
    /// When the client's timeout ends; `None`: no end (0), or a timeout the node reads but
    /// this proxy does not (it is then sent as it came every time).
    deadline: Option<Instant>,
    /// Whether the proxy waited once already.
    waited: bool,
}

impl Wait {
    fn new() -> Wait {
        Wait {
            deadline: None,
            waited: false,
        }
    }

    /// The wait command with what is left of the timeout, or `None` when nothing is.
    fn command(&mut self, mut command: Vec<Bytes>) -> Option<Vec<Bytes>> {
        if !self.waited {
            self.waited = true;
            // The node has not checked the timeout yet: it gets it as the client sent it.
            let seconds = command
                .last()
                .and_then(|timeout| std::str::from_utf8(timeout).ok()?.parse::<f64>().ok());
            self.deadline = seconds
                .filter(|seconds| *seconds > 0.0)
                .and_then(|seconds| Duration::try_from_secs_f64(seconds).ok())
                .and_then(|timeout| Instant::now().checked_add(timeout));
            return Some(command);
        }
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left < Duration::from_millis(1) {
                return None;
            }
            if let Some(timeout) = command.last_mut() {
                *timeout = Bytes::from(format!("{:.3}", left.as_secs_f64()));
            }
        }
        Some(command)
    }
}

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
        let mut wait = Wait::new();
        let mut steps = 0;
        let mut next = mover.start();
        loop {
            steps += 1;
            if steps > MAX_STEPS + 1 {
                return reply::error(reply::crossslot::MOVE_UNEXPECTED);
            }
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
                Next::Block(command) => {
                    steps = 0;
                    match wait.command(command) {
                        Some(command) => {
                            let request = request_frame(&command);
                            Box::pin(self.upstream.run_blocking(source, request, proto)).await
                        }
                        None => timed_out(proto),
                    }
                }
            };
            next = mover.step(&answer);
        }
    }
}

/// The null a blocking move answers when its timeout ends.
fn timed_out(proto: Proto) -> Bytes {
    let mut out = BytesMut::with_capacity(4);
    encode::null_array(&mut out, proto);
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|word| Bytes::copy_from_slice(word.as_bytes()))
            .collect()
    }

    #[test]
    fn the_first_wait_sends_the_timeout_as_it_came_and_later_ones_what_is_left() {
        let mut wait = Wait::new();
        let first = wait.command(words("BLMOVE s s LEFT LEFT 30.5"));
        assert_eq!(first, Some(words("BLMOVE s s LEFT LEFT 30.5")));
        let again = wait
            .command(words("BLMOVE s s LEFT LEFT 30.5"))
            .expect("time left");
        let left: f64 = std::str::from_utf8(&again[5]).unwrap().parse().unwrap();
        assert!(left > 29.0 && left <= 30.5, "{left}");
        // Over: the proxy answers the timeout's null itself.
        wait.deadline = Some(Instant::now());
        assert_eq!(wait.command(words("BLMOVE s s LEFT LEFT 30.5")), None);
    }

    #[test]
    fn no_timeout_or_one_the_proxy_cannot_read_is_sent_as_it_came() {
        for timeout in ["0", "0x10"] {
            let mut wait = Wait::new();
            let command = words(&format!("BLMOVE s s RIGHT RIGHT {timeout}"));
            assert_eq!(wait.command(command.clone()).as_ref(), Some(&command));
            assert_eq!(wait.command(command.clone()).as_ref(), Some(&command));
        }
        assert_eq!(&timed_out(Proto::Resp2)[..], b"*-1\r\n");
        assert_eq!(&timed_out(Proto::Resp3)[..], b"_\r\n");
    }
}
