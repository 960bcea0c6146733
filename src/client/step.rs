//! The one answer every interceptor of the session's admit chain gives about a request
//! (see `session`): the transaction, Pub/Sub and the connection's own commands each
//! either take the request ([`Step::Reply`], [`Step::Pending`], ...) or pass it on
//! ([`Step::Next`]); what none takes is forwarded. (The first link, order, only tells
//! whether a request waits for its turn: a held request walks the chain again later.)

use bytes::Bytes;

use super::pipeline::Running;
use super::transaction::LocalCommands;

/// What the session does with a request, as one interceptor decided.
pub enum Step {
    /// Not this interceptor's matter: the next one looks (after the last, it is forwarded).
    Next,
    /// Answered here, now.
    Reply(Bytes),
    /// Answered by this future, in request order.
    Pending(Running),
    /// Answered by this future, a sequence point: nothing after it starts until it is
    /// answered.
    Alone(Running),
    /// An EXEC with commands the proxy answers itself: `run` gives EXEC's reply without
    /// their elements, which the session fills in (`splice_local_answers`) once it is in.
    /// A sequence point.
    Exec { run: Running, locals: LocalCommands },
}
