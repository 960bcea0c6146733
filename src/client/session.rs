//! One client connection: read, decode, dispatch, and write replies in request order.
//!
//! Requests are dispatched as soon as they are decoded, so a pipeline runs in parallel
//! across masters; the [`Pipeline`] sends plain forwards in one batch per master and
//! hands replies back in request order. As Redis answers the commands of one read with
//! one write, the replies of a read leave together: those in first wait for the plain
//! forwards of the same read (a round trip to their masters), never for a future, a retry
//! after a redirect or a later read, nor past 64 KiB. At most `max_pipeline` commands of
//! one client are in flight; past that the session stops reading (TCP back-pressure) until
//! replies drain.
//!
//! Sequence points run alone: EXEC, WATCH and WAIT (see `Transaction::is_sequence_point`),
//! commands that may block (BLPOP, XREAD BLOCK...) and clients' scripts (EVAL, FCALL...),
//! which run on connections of their own, SORT with patterns (several steps over several masters), and HELLO and RESET (after
//! a protocol switch requests go to the other protocol's connections). Each waits for every
//! earlier reply, and nothing after it starts until it is answered, so a pipeline takes
//! effect in order, as on one Redis, where a blocked client's next command waits for it.

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::{pin, Pin};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::auth;
use crate::buffer::Resizer;
use crate::command::CommandSpec;
use crate::dispatch::{BlockedOn, Route, BLOCKED_ON};
use crate::protocol::{FoldedName, Proto, RequestDecoder};
use crate::reload::Live;
use crate::reply;

use super::flow::{ClientFlow, Gate};
use super::limits::{ClientLimits, SoftWatch};
use super::local::{self, ConnState, ReplyMode};
use super::pipeline::{Pipeline, Running};
use super::pubsub::{self, Intercept, PubSub, Relay};
use super::registry::{ClientGuard, Registry, Signal, Subscriptions};
use super::stream::{ClientReader, ClientStream, ClientWriter};
use super::transaction::{splice_local_answers, LocalCommands, Step, Transaction};

const READ_BUFFER: usize = 16 * 1024;
/// Unsent replies past which the session stops reading new requests, so a client that
/// reads slowly is slowed down by TCP instead of growing the proxy's memory.
const OUTPUT_BACKPRESSURE: usize = 256 * 1024;
/// How long a closing connection keeps reading (and discarding) so the close is a FIN
/// after the last reply, not a reset that could destroy replies still in flight.
const CLOSE_LINGER: Duration = Duration::from_millis(500);
/// Undecoded input past which the session stops reading while a sequence point is in
/// flight (a BLPOP may wait forever; the requests behind it wait in TCP instead). Below
/// it, reading goes on, so a client that disconnects meanwhile is noticed.
const HELD_INPUT: usize = 1024 * 1024;
/// Replies waiting for the rest of their read leave anyway past this size: large replies
/// gain little from sharing a write, and the session need not hold them.
const HELD_OUTPUT: usize = 64 * 1024;
/// How long a draining session goes on answering requests (with an error) before it
/// closes, so a request sent just as the drain began gets a reply, not a silent close.
const DRAIN_GRACE: Duration = Duration::from_millis(250);

/// Serves one client until it disconnects, sends QUIT, breaks the protocol, idles past
/// `timeout`, exceeds its output buffer limit, or the proxy drains.
pub async fn serve(stream: ClientStream, live: Arc<Live>, registry: Arc<Registry>) {
    let peer = stream
        .peer_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let local_addr = stream.local_addr().unwrap_or(peer);
    let _ = stream.socket().set_nodelay(true);
    // TCP keepalive is set at connect (as Redis's `tcp-keepalive`); the other limits
    // follow reloads (see `ClientLimits`).
    let mut limits_of_reload = live.reloads();
    // The configuration requests start on, replaced when a reload has served another.
    let mut snapshot = live.proxy();
    let config = &snapshot.config;
    if config.tcp_keepalive > 0 {
        let keepalive =
            socket2::TcpKeepalive::new().with_time(Duration::from_secs(config.tcp_keepalive));
        let _ = socket2::SockRef::from(stream.socket()).set_tcp_keepalive(&keepalive);
    }
    let mut limits = ClientLimits::of(config);
    let mut decoder = RequestDecoder::new(config.limits.protocol());
    let user = super::stream::initial_user(&stream, &snapshot);
    // Where a blocking command of the client waits (CLIENT UNBLOCK).
    let blocked = Arc::new(BlockedOn::default());
    let guard = registry.register(peer, local_addr, user.as_deref(), blocked.clone());
    let mut state = ConnState {
        id: guard.id,
        proto: Proto::Resp2,
        name: None,
        user,
        replies: ReplyMode::On,
    };
    let mut pubsub = PubSub::new(snapshot.clone(), state.id);
    let mut subscriptions = ShownSubscriptions::new(&registry, guard.id);
    // The client's user under `snapshot`; looked up again after a reload and when a local
    // command (AUTH, HELLO, RESET) logged the client in as someone else.
    let mut snapshot_user: Option<Option<Arc<auth::User>>> = None;
    let counted = crate::metrics::ClientConnection::opened();
    let (mut reader, mut writer) = stream.into_split();
    let mut input = BytesMut::with_capacity(READ_BUFFER);
    let mut output = BytesMut::new();
    // Give back what a burst of large requests or replies grew the two buffers to.
    let mut input_resizer = Resizer::new(READ_BUFFER);
    let mut output_resizer = Resizer::new(READ_BUFFER);
    let mut in_flight = Pipeline::default();
    // What the client owes, against its budget and the process's (see `flow`), and whether
    // it may send its next request.
    let mut flow = ClientFlow::new(registry.budget());
    let mut gate = Gate::Open;
    let mut soft_watch = SoftWatch::default();
    // Set once the connection must end after the replies already queued (QUIT, bad input).
    let mut closing = false;
    // Set once the client closed its side: what it sent before is answered, then it closes.
    let mut peer_closed = false;
    let mut draining = registry.is_draining();
    // When a draining session closes (see `DRAIN_GRACE`).
    let mut drain_until = draining.then(|| Instant::now() + DRAIN_GRACE);
    let signals = guard.signals();
    tokio::pin!(signals);
    // The last read from or write to the client: idle time counts from it, as in Redis.
    let mut last_active = Instant::now();
    // When the latest read completed, if no pass has started since.
    let mut read_at = None;
    let mut transaction = Transaction::default();
    // A decoded request waiting for the replies before it (a transaction sequence point),
    // and whether a sequence point is in flight, so nothing after it may start yet.
    let mut held = None;
    let mut sequence_point = false;
    // The topology's slot-move count when the oldest request in flight was routed.
    let mut routed_moves = 0;
    // An EXEC in flight whose queued connection commands the session answers once the
    // block's reply is in: the EXEC's sequence number, and those commands.
    let mut exec_locals: Option<(u64, LocalCommands)> = None;
    // The end of the CLIENT PAUSE that holds the request in `held`.
    let mut paused_until = None;
    // The routing snapshot of the current pass while no slot changes master: the requests
    // of a pipeline need not each load the shared one.
    let mut pass_routing = None;

    loop {
        // As in Redis, where CONFIG SET timeout (or proto-max-bulk-len) applies to every
        // client at once (a reload wakes every session, see `Registry::wake_all`).
        if live.reloads() != limits_of_reload {
            limits_of_reload = live.reloads();
            snapshot = live.proxy();
            // A subscriber that only listens still moves to a new upstream.
            pubsub.follow(&snapshot);
            snapshot_user = None;
            limits = ClientLimits::of(&snapshot.config);
            decoder.set_limits(snapshot.config.limits.protocol());
        }
        let ClientLimits {
            max_pipeline,
            max_owed,
            idle_timeout,
            output_limit,
            soft_limit,
        } = limits;
        // One clock read serves all requests of this pass: the read's, after a read.
        let mut pass_started = read_at.take();
        // Turn buffered bytes into dispatched requests, as far as the pipeline limit allows.
        while !closing && in_flight.len() < max_pipeline {
            if sequence_point && !in_flight.is_empty() {
                break;
            }
            if held.is_some() || !input.is_empty() {
                gate = flow.gate(in_flight.owed(output.len()), max_owed);
                if gate != Gate::Open {
                    break;
                }
            }
            sequence_point = false;
            let was_held = held.is_some();
            let decoded = match held.take() {
                Some(request) => Ok(Some(request)),
                None => decoder.decode(&mut input),
            };
            // One lookup of the command serves the checks below and the routing.
            let command = match &decoded {
                Ok(Some(request)) => snapshot.commands.lookup_index(&request.args),
                _ => None,
            };
            let spec = command.and_then(|command| snapshot.commands.spec(command));
            if let Ok(Some(request)) = &decoded {
                // As in Redis, a client that has not authenticated gets NOAUTH at once.
                let pause = (!draining && state.user.is_some())
                    .then(|| paused(&registry, &transaction, request, spec))
                    .flatten();
                if pause.is_some() {
                    if !was_held {
                        // As Redis shows a client its pause holds: blocked, on this command.
                        guard.held_by_pause(true);
                        note_command(&guard, command);
                    }
                    paused_until = pause;
                    held = decoded.ok().flatten();
                    break;
                }
                if was_held {
                    guard.held_by_pause(false);
                }
            }
            // Most commands concern none of the session's own checks (see `plain`)
            // and skip them; the others' name is folded once for the names they look for.
            let checked = !command.is_some_and(|command| snapshot.plain_commands.contains(command))
                || transaction.in_multi()
                || pubsub.is_used();
            let name = match &decoded {
                Ok(Some(request)) if checked => FoldedName::of(request),
                _ => FoldedName::default(),
            };
            let alone = match &decoded {
                Ok(Some(request)) if checked => runs_alone(request, &name, spec),
                _ => false,
            };
            // A slot changed master since the requests in flight were routed: they may
            // still be redirected to where this one would go at once, so it waits for them.
            let moved = !in_flight.is_empty()
                && matches!(&decoded, Ok(Some(_)))
                && snapshot.topology.moves() != routed_moves;
            match decoded {
                Ok(Some(request))
                    if !in_flight.is_empty()
                        && (alone || moved || Transaction::is_sequence_point(&name)) =>
                {
                    held = Some(request);
                    break;
                }
                Ok(Some(request)) => {
                    if in_flight.is_empty() {
                        routed_moves = snapshot.topology.moves();
                    }
                    let muted = state.replies.mutes() && !local::sets_reply_mode(&request);
                    if muted && (transaction.in_multi() || !pubsub::confirms_unmuted(&request)) {
                        in_flight.mute_next();
                    }
                    if draining {
                        in_flight.push_ready(reply::error(reply::text::SHUTTING_DOWN));
                        continue;
                    }
                    // A command runs to its end on the configuration it started with.
                    let proxy = &snapshot;
                    let user = snapshot_user
                        .get_or_insert_with(|| {
                            state
                                .user
                                .as_deref()
                                .and_then(|name| proxy.auth.user(name))
                                .cloned()
                        })
                        .as_ref();
                    if user.is_none() && !local::allowed_before_auth(&request) {
                        in_flight.push_ready(reply::error(auth::NOAUTH));
                        continue;
                    }
                    // Inside MULTI the transaction checks what it queues (a refusal there
                    // also fails the EXEC, as in Redis).
                    if !transaction.in_multi() {
                        let refusal = user
                            .and_then(|user| local::acl_refusal(&proxy.commands, user, &request));
                        if let Some(refusal) = refusal {
                            in_flight.push_ready(refusal);
                            continue;
                        }
                    }
                    if checked {
                        match transaction.handle(
                            proxy,
                            state.proto,
                            &request,
                            &name,
                            user.map(|user| &**user),
                        ) {
                            Step::Reply(reply) => {
                                note_command(&guard, command);
                                in_flight.push_ready(reply);
                                continue;
                            }
                            Step::Run(run) => {
                                note_command(&guard, command);
                                sequence_point = true;
                                in_flight.push_future(run).await;
                                continue;
                            }
                            Step::Exec { run, locals } => {
                                note_command(&guard, command);
                                sequence_point = true;
                                exec_locals = Some((in_flight.next_seq(), locals));
                                in_flight.push_future(run).await;
                                continue;
                            }
                            Step::Pass => {}
                        }
                        match pubsub.intercept(&request, &name, state.proto, muted, proxy) {
                            Intercept::Reply(reply) => {
                                note_command(&guard, command);
                                subscriptions.update(&pubsub);
                                in_flight.push_ready(reply);
                                continue;
                            }
                            Intercept::Pending(reply) => {
                                note_command(&guard, command);
                                subscriptions.update(&pubsub);
                                in_flight.push_future(reply).await;
                                continue;
                            }
                            Intercept::Pass => {}
                        }
                        // CLIENT LIST and INFO show the caller's own command as CLIENT's.
                        let client_command = name.as_bytes() == b"client";
                        if client_command {
                            note_command(&guard, command);
                        }
                        if let Some(answer) =
                            local::answer(&mut state, &registry, proxy, &request, &name)
                        {
                            if !client_command {
                                note_command(&guard, command);
                            }
                            closing |= answer.close;
                            forget_if_switched(&mut snapshot_user, state.user.as_deref());
                            if name.as_bytes() == b"reset" {
                                // RESET ended the subscriptions (see `PubSub::intercept`).
                                subscriptions.update(&pubsub);
                            }
                            if answer.silent {
                                in_flight.mute_next();
                            }
                            match answer.pending {
                                Some(pending) => in_flight.push_future(pending).await,
                                None => in_flight.push_ready(answer.reply),
                            }
                            continue;
                        }
                    }
                    let user = user.map(|user| &**user);
                    sequence_point = alone;
                    let moves = proxy.topology.moves();
                    let routing = match &pass_routing {
                        Some((since, routing)) if *since == moves => routing,
                        _ => &pass_routing.insert(proxy.topology.routing_since_moves()).1,
                    };
                    match proxy.route(command, &request, state.proto, user, routing) {
                        Route::Direct(direct, renamed) => {
                            guard.ran(direct.command);
                            if direct.writes {
                                transaction.note_write_slot(direct.slot);
                            }
                            let started = *pass_started.get_or_insert_with(std::time::Instant::now);
                            in_flight.push_direct(
                                proxy.clone(),
                                direct,
                                renamed.unwrap_or(request.raw),
                                state.proto,
                                started,
                            );
                        }
                        Route::Planned(command) => {
                            if let Some(command) = command {
                                guard.ran(command);
                            }
                            transaction.note_write(proxy, command, &request.args);
                            let run =
                                proxy
                                    .clone()
                                    .execute_indexed(command, request, state.proto, user);
                            // Only a command that runs alone may block (see `runs_alone`).
                            let run: Running = if alone {
                                Box::pin(BLOCKED_ON.scope(blocked.clone(), run))
                            } else {
                                Box::pin(run)
                            };
                            in_flight.push_future(run).await;
                        }
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    tracing::debug!(client = %peer, %error, "closing client after protocol error");
                    in_flight.push_ready(reply::error(&format!("ERR {error}")));
                    closing = true;
                }
            }
        }
        // Not held while waiting (see `Topology::routing_since_moves`).
        pass_routing = None;
        in_flight.send_staged();
        if input.is_empty() && held.is_none() {
            gate = Gate::Open;
        }
        flow.charge(in_flight.owed(output.len()), gate);
        if gate != Gate::Open {
            // A paused client may wait long: it keeps only what it has not read.
            output_resizer.compact_if_spent(&mut output);
        }
        in_flight.shrink_if_idle();
        input_resizer.shrink_if_idle(&mut input);
        output_resizer.shrink_if_idle(&mut output);
        let answered = in_flight.is_empty() && output.is_empty();
        if answered && peer_closed && held.is_none() && gate == Gate::Open {
            // Every complete request it sent before closing is answered, as Redis does.
            let _ = writer.shutdown().await;
            break;
        }
        let drained = drain_until.is_some_and(|until| Instant::now() >= until);
        if answered && (closing || drained) {
            // Boxed: its discard buffer would otherwise be part of every connected
            // client's session, most of which never get here before their peer closes.
            Box::pin(linger_close(reader, writer)).await;
            break;
        }
        if let Some(limit) = soft_limit {
            let held = in_flight.owed(output.len()).held;
            if soft_watch.exceeded(limit, held, Instant::now()) {
                tracing::info!(client = %peer, bytes = held, "closing client over its soft output buffer limit");
                crate::metrics::client_output_limit_disconnect();
                break;
            }
        }
        // Past its budget, a client's input waits in TCP, not here (a little is still read,
        // so a client that hangs up is noticed).
        let can_read = !closing
            && !peer_closed
            && held.is_none()
            && in_flight.len() < max_pipeline
            && output.len() < OUTPUT_BACKPRESSURE
            && (gate == Gate::Open || input.len() < READ_BUFFER)
            && !(sequence_point && input.len() >= HELD_INPUT);
        let subscribed = pubsub.is_used() && pubsub.is_subscribed();
        // As in Redis, a client waiting for a reply (a blocked one) or subscribed never
        // idles out.
        let idle_deadline = idle_timeout
            .filter(|_| answered && paused_until.is_none())
            .filter(|_| !subscribed)
            .map(|timeout| last_active + timeout);
        // The next moment a limit may close the client without any event of its own.
        let soft_deadline = soft_watch.deadline(soft_limit);
        let close_deadline = [
            idle_deadline,
            soft_deadline,
            drain_until.filter(|_| answered),
        ]
        .into_iter()
        .flatten()
        .min();
        let write_held = waits_for_its_read(&in_flight, &output);
        // Messages wait in the subscription's bounded buffer while the client is slow,
        // so `pubsub.max_buffer_bytes` is what limits a subscriber that does not read.
        let relaying = pubsub.is_used() && !closing && output.len() < OUTPUT_BACKPRESSURE;
        let woken = {
            // The rarely used sources are futures made only when they are used, the others
            // are polled in place: a `select!` over all of them, which built every branch's
            // future on each turn, cost 3 % of an unpipelined request's instructions.
            let listening = subscribed || relaying;
            let mut pubsub_event =
                pin!(listening.then(|| pubsub_event(&mut pubsub, subscribed, relaying)));
            let timed = paused_until.is_some() || close_deadline.is_some();
            let mut timer = pin!(timed.then(|| timer(&registry, paused_until, close_deadline)));
            // Made before the budget is looked at, so a release after the look wakes it.
            let budget = flow.shared();
            let mut freed = pin!((gate == Gate::Shared).then(|| budget.freed()));
            poll_fn(|cx| {
                // In this order: replies first, so they leave before more requests are
                // read; input last but for the signals and timers.
                if !in_flight.is_empty() && in_flight.poll_progress(cx).is_ready() {
                    return Poll::Ready(Woken::Progress);
                }
                if !output.is_empty() && !write_held {
                    if let Poll::Ready(written) = Pin::new(&mut writer).poll_write(cx, &output) {
                        return Poll::Ready(Woken::Wrote(written));
                    }
                }
                if let Some(Poll::Ready(woken)) = pubsub_event
                    .as_mut()
                    .as_pin_mut()
                    .map(|event| event.poll(cx))
                {
                    return Poll::Ready(woken);
                }
                if can_read {
                    // The read future holds only references: one made per poll keeps
                    // Tokio's own readiness bookkeeping (a short read needs no second
                    // read to learn the socket is drained).
                    let read = reader.read_buf(&mut input);
                    if let Poll::Ready(read) = pin!(read).poll(cx) {
                        return Poll::Ready(Woken::Read(read));
                    }
                }
                if let Poll::Ready(signal) = signals.as_mut().poll(cx) {
                    return Poll::Ready(Woken::Signal(signal));
                }
                if let Some(freed) = freed.as_mut().as_pin_mut() {
                    if freed.poll(cx).is_ready() || budget.has_room() {
                        return Poll::Ready(Woken::BudgetFreed);
                    }
                }
                timer
                    .as_mut()
                    .as_pin_mut()
                    .map_or(Poll::Pending, |timer| timer.poll(cx))
            })
            .await
        };
        match woken {
            Woken::Progress => {
                if let Some((seq, _)) = &exec_locals {
                    if let Some(reply) = in_flight.ready_reply_mut(*seq) {
                        let block_reply = std::mem::take(reply);
                        let (_, locals) = exec_locals.take().unwrap_or_default();
                        *reply = splice_local_answers(block_reply, locals, |request| {
                            let name = FoldedName::of(request);
                            local::answer(&mut state, &registry, &snapshot, request, &name)
                                .map(|answer| answer.reply)
                                .unwrap_or_else(|| reply::error("ERR proxy: no reply"))
                        });
                        forget_if_switched(&mut snapshot_user, state.user.as_deref());
                    }
                }
                // Everything answered, in order, leaves in the same write.
                in_flight.write_ready(&mut output);
                output_resizer.note(&output);
                let held = in_flight.owed(output.len()).held;
                if output_limit > 0 && held > output_limit {
                    tracing::info!(client = %peer, bytes = held, "closing client over its output buffer limit");
                    crate::metrics::client_output_limit_disconnect();
                    break;
                }
                // Written at once while the socket takes it: one turn of this loop less
                // per reply than waiting for the write branch below.
                if !output.is_empty() && !waits_for_its_read(&in_flight, &output) {
                    match writer.try_write(&output) {
                        Ok(n) if n > 0 => last_active = wrote(n, &mut output, &counted, &guard),
                        Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                        _ => break,
                    }
                }
            }
            Woken::Wrote(written) => match written {
                Ok(0) | Err(_) => break,
                Ok(n) => last_active = wrote(n, &mut output, &counted, &guard),
            },
            // A subscriber that stopped reading must not hold its messages forever.
            Woken::Overflowed => break,
            Woken::Relay(relay) => match relay {
                // Behind the replies already queued: never ahead of its own confirmation.
                Relay::Push(message) => {
                    subscriptions.update(&pubsub);
                    in_flight.push_ready(message);
                }
                Relay::Close => break,
                Relay::Idle => {}
            },
            Woken::Read(read) => {
                match read {
                    // As Redis, which frees a blocked client or a subscriber that hangs up.
                    Ok(0) if blocked.current().is_some() || pubsub.is_used() => break,
                    Ok(0) => {
                        peer_closed = true;
                        continue;
                    }
                    Err(_) => break,
                    Ok(n) => counted.received(n),
                }
                last_active = Instant::now();
                read_at = Some(last_active.into_std());
                guard.active_at(last_active.into_std());
                if input.capacity() - input.len() < 1024 {
                    input.reserve(READ_BUFFER);
                }
                input_resizer.note(&input);
            }
            // CLIENT KILL from another client: closed at once, as Redis frees it.
            Woken::Signal(Signal::Kill) => {
                tracing::debug!(client = %peer, "closing client killed by CLIENT KILL");
                break;
            }
            // The limits are read again at the top of the loop.
            Woken::Signal(Signal::Nudge) => {}
            Woken::Signal(Signal::Drain) => {
                draining = true;
                drain_until = Some(Instant::now() + DRAIN_GRACE);
            }
            // The process budget has room again: the loop looks at the gate.
            Woken::BudgetFreed => flow.woken(),
            // The pause ended or changed: the held request looks again.
            Woken::PauseChanged => paused_until = None,
            // The top of the loop tells which deadline passed.
            Woken::Deadline => {
                if idle_deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                    tracing::debug!(client = %peer, "closing idle client");
                    break;
                }
            }
        }
    }
}

/// What ended a session's wait.
enum Woken {
    /// The oldest request in flight has its reply, or replies may leave without it.
    Progress,
    Wrote(std::io::Result<usize>),
    /// The subscriber exceeded its message buffer.
    Overflowed,
    Relay(Relay),
    Read(std::io::Result<usize>),
    Signal(Signal),
    /// The CLIENT PAUSE holding a request ended or changed.
    PauseChanged,
    /// The process budget the client waited for has room again.
    BudgetFreed,
    /// The idle timeout, the soft output limit's time or the drain's grace passed.
    Deadline,
}

/// The next event of a client's subscriptions: it overflowed (looked at only while
/// `subscribed`) or a message or reason to close arrived (only while `relaying`).
async fn pubsub_event(pubsub: &mut PubSub, subscribed: bool, relaying: bool) -> Woken {
    let overflowed = pubsub.overflowed();
    tokio::select! {
        biased;
        () = overflowed, if subscribed => Woken::Overflowed,
        relay = pubsub.next_event(), if relaying => Woken::Relay(relay),
    }
}

/// Waits for the end or a change of the pause ending at `paused_until`, or for
/// `deadline`, whichever comes first; never returns when both are `None`.
async fn timer(
    registry: &Registry,
    paused_until: Option<Instant>,
    deadline: Option<Instant>,
) -> Woken {
    tokio::select! {
        biased;
        () = wait_pause(registry, paused_until), if paused_until.is_some() => Woken::PauseChanged,
        () = sleep_until(deadline), if deadline.is_some() => Woken::Deadline,
    }
}

/// Whether the replies in `output` wait for the rest of their read, a round trip away, to
/// leave with it in one write (see `Pipeline::waits_for_its_read`).
fn waits_for_its_read(in_flight: &Pipeline, output: &BytesMut) -> bool {
    output.len() < HELD_OUTPUT && in_flight.waits_for_its_read()
}

/// Drops the looked-up user when the client is now logged in as another (or as nobody).
fn forget_if_switched(looked_up: &mut Option<Option<Arc<auth::User>>>, now: Option<&str>) {
    let switched = looked_up
        .as_ref()
        .is_some_and(|user| user.as_ref().map(|user| user.name.as_str()) != now);
    if switched {
        *looked_up = None;
    }
}

/// Accounts for `n` bytes of `output` written to the client; returns the time of the
/// write (the client's last interaction).
fn wrote(
    n: usize,
    output: &mut BytesMut,
    counted: &crate::metrics::ClientConnection,
    guard: &ClientGuard,
) -> Instant {
    counted.sent(n);
    output.advance(n);
    let now = Instant::now();
    guard.active_at(now.into_std());
    now
}

/// Records `command` (a table index, `None` for an unknown one) as the client's latest
/// (CLIENT LIST's `cmd=`), for the paths that do not route it.
fn note_command(guard: &ClientGuard, command: Option<usize>) {
    if let Some(command) = command {
        guard.ran(command);
    }
}

/// Keeps what others see of the client's subscriptions (the subscribers gauge, CLIENT
/// LIST's counts and type) in step with them; the registry is locked only on a change.
struct ShownSubscriptions<'a> {
    registry: &'a Registry,
    id: u64,
    shown: Subscriptions,
    // Counts this client in slotbridge_pubsub_subscribers while it is in subscribe mode.
    gauge: crate::metrics::Subscriber,
}

impl<'a> ShownSubscriptions<'a> {
    fn new(registry: &'a Registry, id: u64) -> Self {
        ShownSubscriptions {
            registry,
            id,
            shown: Subscriptions::default(),
            gauge: crate::metrics::Subscriber::default(),
        }
    }

    /// After a command or event that may have changed the subscriptions.
    fn update(&mut self, pubsub: &PubSub) {
        let now = pubsub.counts();
        if now != self.shown {
            self.shown = now;
            self.registry.update(self.id, |e| e.subscriptions = now);
            self.gauge.update(now.any());
        }
    }
}

/// Whether `request` is a sequence point of its own: it may wait for data on its own
/// backend connection (BLPOP, BZPOPMIN, XREAD with BLOCK, WAITAOF...; only names starting
/// with b, x or w are looked up), it is a SORT the proxy runs in steps (its lookups and
/// STORE must not overtake, or be overtaken by, the requests around it), or it may switch
/// the protocol (HELLO, RESET): the requests after it go to the backend connections of the
/// other protocol, where they could overtake those before it.
fn runs_alone(
    request: &crate::protocol::Request,
    name: &FoldedName,
    spec: Option<&CommandSpec>,
) -> bool {
    match name.as_bytes() {
        b"hello" | b"reset" => true,
        b"sort" | b"sort_ro" => crate::dispatch::sort_runs_in_steps(&request.args),
        _ => spec
            .is_some_and(|spec| spec.blocks(&request.args) || crate::dispatch::runs_a_script(spec)),
    }
}

/// The end of the CLIENT PAUSE that holds `request` now, if one does (under a WRITE
/// pause, commands that write or may replicate, and EXEC of a block with one).
fn paused(
    registry: &Registry,
    transaction: &Transaction,
    request: &crate::protocol::Request,
    spec: Option<&CommandSpec>,
) -> Option<Instant> {
    registry.pause().holds(|| {
        if request.name().eq_ignore_ascii_case(b"exec") {
            return transaction.queued_writes();
        }
        spec.is_some_and(CommandSpec::is_write_or_may_replicate)
    })
}

/// Returns when the pause ending at `end` ends or changes; never for `None`.
async fn wait_pause(registry: &Registry, end: Option<Instant>) {
    match end {
        Some(end) => registry.pause().wait(end).await,
        None => std::future::pending().await,
    }
}

/// Waits until `deadline`; never returns for `None` (the caller guards the branch anyway).
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Half-closes the connection after the last reply, then discards input for a moment,
/// so unread client bytes do not turn the close into a reset.
async fn linger_close(mut reader: ClientReader, mut writer: ClientWriter) {
    let _ = writer.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(CLOSE_LINGER, async {
        while let Ok(n) = reader.read(&mut sink).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}
