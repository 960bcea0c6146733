//! The admit step: each decoded request walks one chain of interceptors, in this order,
//! and the first that takes it decides (see [`Step`]):
//!
//! 1. order: a request waits (held, and admitted again later) for the replies before it
//!    when it is a sequence point or a slot moved since they were routed, or for a CLIENT
//!    PAUSE that holds it;
//! 2. access: draining, NOAUTH, then the one policy and ACL check of the session;
//! 3. the transaction (MULTI/EXEC/WATCH, queueing, WAIT);
//! 4. Pub/Sub (subscription commands, subscribed mode);
//! 5. the connection's own commands (`local`);
//! 6. what none took is forwarded: staged in the client's batch for its master, or run as
//!    a future by the dispatcher.
//!
//! Most commands concern none of steps 3-5 (see `plain`) and skip them; only those
//! steps fold the command's name.

use std::ops::ControlFlow;
use std::sync::Arc;

use tokio::time::Instant;

use crate::acl::LiveUser;
use crate::auth;
use crate::command::CommandSpec;
use crate::dispatch::database;
use crate::dispatch::{Proxy, Route, BLOCKED_ON};
use crate::protocol::{FoldedName, Request};
use crate::reply;

use super::super::flow::Gate;
use super::super::local;
use super::super::pipeline::{Micros, Running};
use super::super::pubsub;
use super::super::step::Step;
use super::super::transaction::Transaction;
use super::database::InDatabase;
use super::Session;

impl Session<'_> {
    /// Turns buffered bytes (and a held request) into admitted requests, as far as the
    /// pipeline limit and the client's budget allow; then sends the staged batches and
    /// ends the pass (`None`). Stops early with the future of a request that must start
    /// before the next is admitted (see `Pipeline::push_future`); the caller starts it and
    /// calls again. Not itself async: most passes start no future, and an async step
    /// would cost them the making and dropping of one.
    pub(super) fn admit_buffered(&mut self) -> Option<Running> {
        let max_pipeline = self.flow.limits.max_pipeline;
        if self.order.held.is_none() && self.conn.input.is_empty() {
            // Nothing to admit (a pass after a write, say): no place to make and drop.
            if self.order.in_flight.is_empty() {
                self.order.sequence_point = false;
            }
            return self.end_pass();
        }
        // The place requests are decoded into, one after the other, and that the chain
        // borrows: it moves out only what it keeps (each move of a request copies its
        // inline arguments).
        let mut request = Request::default();
        while !self.end.closing && self.order.in_flight.len() < max_pipeline {
            if self.order.sequence_point && !self.order.in_flight.is_empty() {
                break;
            }
            if self.order.held.is_some() || !self.conn.input.is_empty() {
                let owed = self.order.in_flight.owed(self.conn.output.len());
                self.flow.gate = self.flow.budget.gate(owed, self.flow.limits.max_owed);
                if self.flow.gate != Gate::Open {
                    break;
                }
            }
            self.order.sequence_point = false;
            let was_held = self.order.held.is_some();
            match self.order.held.take() {
                Some(held) => request = *held,
                // Nothing to decode (the decoder would say so, at the cost of a call).
                None if self.conn.input.is_empty() => break,
                None => match self
                    .conn
                    .decoder
                    .decode_into(&mut self.conn.input, &mut request)
                {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(error) => {
                        tracing::debug!(client = %self.conn.peer, %error, "closing client after protocol error");
                        let reply = reply::error(&format!("ERR {error}"));
                        self.order.in_flight.push_ready(reply);
                        self.end.closing = true;
                        continue;
                    }
                },
            }
            match self.admit(&mut request, was_held) {
                ControlFlow::Break(()) => break,
                ControlFlow::Continue(None) => {}
                ControlFlow::Continue(Some(run)) => return Some(run),
            }
        }
        self.end_pass()
    }

    /// Ends a pass of [`Session::admit_buffered`]: sends the staged batches and lets go of
    /// what the pass's requests shared.
    fn end_pass(&mut self) -> Option<Running> {
        self.order.pass_routing = None;
        self.conn.pass_started = None;
        self.order.in_flight.send_staged();
        None
    }

    /// Runs `request` through the chain: `Break` when it is held, else the future that
    /// answers it, if it is not answered or staged already. What the chain keeps of
    /// `request` it moves out; the caller drops the rest.
    fn admit(&mut self, request: &mut Request, was_held: bool) -> ControlFlow<(), Option<Running>> {
        if !self.ident.refresh_user(self.subs.pubsub.is_subscribed()) {
            // As Redis's ACL DELUSER, which disconnects the user's clients.
            self.end.closing = true;
            return ControlFlow::Continue(None);
        }
        let snapshot = &self.ident.snapshot;
        // One lookup of the command serves the checks below and the routing.
        let command = snapshot.commands.lookup_index(&request.args);
        let spec = command.and_then(|command| snapshot.commands.spec(command));
        let checked = !command.is_some_and(|command| snapshot.plain_commands.contains(command))
            || self.tx.transaction.in_multi()
            || self.subs.pubsub.is_used();
        let name = match checked {
            true => FoldedName::of(request),
            false => FoldedName::default(),
        };
        // Database 0's plain requests skip the database stage: one comparison.
        let mut in_db = match self.ident.state.db {
            0 if !checked
                || !database::concerns_database_zero(name.as_bytes())
                || !self.ident.snapshot.has_other_databases() =>
            {
                InDatabase::default()
            }
            db => {
                let in_multi = self.tx.transaction.in_multi();
                InDatabase::stage(&self.ident.snapshot, db, in_multi, request, spec)
            }
        };
        let snapshot = &self.ident.snapshot;
        let alone = in_db.emulated.is_some()
            || checked
                && (runs_alone(request, &name, spec)
                    || spec.is_some_and(|spec| {
                        snapshot.runs_in_steps_across_slots(spec, &request.args)
                    }))
            || spec.is_some_and(|spec| snapshot.moves_first(spec, &request.args));
        let pause = self.pause_holding(request, spec);
        if self.waits(&name, command, pause, was_held, alone) {
            // Held as the client sent it: the stage runs again when it is admitted.
            self.order.held = Some(Box::new(in_db.original.unwrap_or_else(|| spent(request))));
            return ControlFlow::Break(());
        }
        let muted = self.admitted(request);
        // Access and MONITOR see the names the client sent.
        let sent = in_db.original.as_ref().unwrap_or(request);
        let step = match self.checks(sent, &name, command, checked) {
            Step::Next if in_db.answer.is_some() => {
                self.note_command(command);
                self.tx.transaction.refused();
                Step::Reply(in_db.answer.take().unwrap_or_default())
            }
            Step::Next if checked => self.intercept(request, &name, command, muted),
            step => step,
        };
        let run = match step {
            Step::Next if in_db.is_taken() => {
                self.forward_in_database(command, request, in_db, alone)
            }
            Step::Next => self.forward(command, request, alone, false),
            Step::Reply(reply) => {
                self.order.in_flight.push_ready(reply);
                None
            }
            Step::Pending(run) => Some(run),
            Step::Alone(run) => {
                self.order.sequence_point = true;
                Some(run)
            }
            Step::Exec { run, locals } => {
                self.order.sequence_point = true;
                self.tx.exec_locals = Some((self.order.in_flight.next_seq(), locals));
                Some(run)
            }
        };
        ControlFlow::Continue(run)
    }

    /// The first interceptor: whether the request waits (is held), while a CLIENT PAUSE
    /// holds it, or while replies are in flight before a request that must not overtake
    /// them. `pause`: the end of the CLIENT PAUSE that holds the request, if one does.
    fn waits(
        &mut self,
        name: &FoldedName,
        command: Option<usize>,
        pause: Option<Instant>,
        was_held: bool,
        alone: bool,
    ) -> bool {
        if pause.is_some() {
            if !was_held {
                // As Redis shows a client its pause holds: blocked, on this command.
                self.client.guard.held_by_pause(true);
                self.note_command(command);
            }
            self.order.paused_until = pause;
            return true;
        }
        if was_held {
            self.client.guard.held_by_pause(false);
        }
        let in_flight = &self.order.in_flight;
        // A slot changed master since the requests in flight were routed: they may
        // still be redirected to where this one would go at once, so it waits for them.
        let moved = !in_flight.is_empty()
            && self.ident.snapshot.topology.moves() != self.order.routed_moves;
        !in_flight.is_empty() && (alone || moved || Transaction::is_sequence_point(name))
    }

    /// The end of the CLIENT PAUSE that holds `request` (of `spec`) now, if one does: under
    /// a WRITE pause, commands that write or may replicate, and EXEC of a block with one.
    /// As in Redis, a client that has not authenticated is not held: it gets NOAUTH at
    /// once. Inlined: asked for every request, and without a pause it is one load.
    #[inline(always)]
    fn pause_holding(&self, request: &Request, spec: Option<&CommandSpec>) -> Option<Instant> {
        if self.end.draining || self.ident.state.user.is_none() {
            return None;
        }
        let transaction = &self.tx.transaction;
        self.client.registry.pause().holds(|| {
            if request.name().eq_ignore_ascii_case(b"exec") {
                return transaction.queued_writes();
            }
            spec.is_some_and(CommandSpec::is_write_or_may_replicate)
        })
    }

    /// Notes a request that is not held: the topology its batch is routed by, when it is
    /// the first in flight, and its reply muted by CLIENT REPLY OFF/SKIP. Whether replies
    /// are muted for it.
    #[inline(always)]
    fn admitted(&mut self, request: &Request) -> bool {
        let in_flight = &mut self.order.in_flight;
        if in_flight.is_empty() {
            self.order.routed_moves = self.ident.snapshot.topology.moves();
        }
        let muted = self.ident.state.replies.mutes() && !local::sets_reply_mode(request);
        if muted && (self.tx.transaction.in_multi() || !pubsub::confirms_unmuted(request)) {
            in_flight.mute_next();
        }
        muted
    }

    /// The interceptors that act on some commands only: the transaction, Pub/Sub, then
    /// the connection's own commands.
    fn intercept(
        &mut self,
        request: &Request,
        name: &FoldedName,
        command: Option<usize>,
        muted: bool,
    ) -> Step {
        let proxy = &self.ident.snapshot;
        let proto = self.ident.state.proto;
        let db = self.ident.state.db;
        let step = self.tx.transaction.handle(proxy, proto, db, request, name);
        if !matches!(step, Step::Next) {
            self.note_command(command);
            return step;
        }
        let pubsub = &mut self.subs.pubsub;
        let step = pubsub.intercept(request, name, proto, muted, proxy);
        if !matches!(step, Step::Next) {
            self.note_command(command);
            self.subs.shown.update(&self.subs.pubsub);
            return step;
        }
        self.local_step(request, name, command)
    }

    /// The connection's own commands (`local`): PING, SELECT, AUTH, HELLO, CLIENT...
    fn local_step(&mut self, request: &Request, name: &FoldedName, command: Option<usize>) -> Step {
        // CLIENT LIST and INFO show the caller's own command as CLIENT's.
        let client_command = name.as_bytes() == b"client";
        if client_command {
            self.note_command(command);
        }
        let ident = &mut self.ident;
        let Some(answer) = local::answer(
            &mut ident.state,
            self.client.registry,
            &ident.snapshot,
            request,
            name,
        ) else {
            return Step::Next;
        };
        if !client_command {
            self.note_command(command);
        }
        self.end.closing |= answer.close;
        self.ident.forget_if_switched();
        if name.as_bytes() == b"reset" {
            // RESET ended the subscriptions (see `PubSub::intercept`).
            self.subs.shown.update(&self.subs.pubsub);
        }
        if answer.silent {
            self.order.in_flight.mute_next();
        }
        match answer.pending {
            Some(pending) => Step::Pending(pending),
            None => Step::Reply(answer.reply),
        }
    }

    /// The end of the chain: routes the request; stages it in the client's batch for its
    /// master (`None`) or returns the future that runs it.
    /// `keys_checked`: the user's ACL already allowed the request's keys under the names
    /// the client sent (the database stage renamed them since).
    pub(super) fn forward(
        &mut self,
        command: Option<usize>,
        request: &mut Request,
        alone: bool,
        keys_checked: bool,
    ) -> Option<Running> {
        self.order.sequence_point = alone;
        let Session {
            ident,
            order,
            tx,
            conn,
            ..
        } = self;
        // A command runs to its end on the configuration it started with.
        let proxy = &ident.snapshot;
        let proto = ident.state.proto;
        let user = user_of(&mut ident.user, proxy, ident.state.user.as_deref());
        let user = user.map(|user| &**user).filter(|_| !keys_checked);
        let moves = proxy.topology.moves();
        let routing = match &order.pass_routing {
            Some((since, routing)) if *since == moves => routing,
            _ => {
                &order
                    .pass_routing
                    .insert(proxy.topology.routing_since_moves())
                    .1
            }
        };
        match proxy.route(command, request, proto, user, routing) {
            Route::Direct(direct, renamed) => {
                self.client.ran(usize::from(direct.command));
                if direct.writes {
                    tx.transaction.note_write_slot(direct.slot);
                }
                let started = *conn
                    .pass_started
                    .get_or_insert_with(|| Micros::of(std::time::Instant::now()));
                let frame = renamed.unwrap_or_else(|| std::mem::take(&mut request.raw));
                order
                    .in_flight
                    .push_direct(proxy.clone(), direct, frame, proto, started);
                None
            }
            Route::Planned(command, staged) => {
                if let Some(command) = command {
                    self.client.ran(command);
                }
                tx.transaction.note_write(proxy, command, &request.args);
                let run =
                    proxy
                        .clone()
                        .execute_indexed(command, spent(request), proto, user, staged);
                // Only a command that runs alone may block (see `runs_alone`).
                Some(if alone {
                    Box::pin(BLOCKED_ON.scope(self.client.blocked.clone(), run))
                } else {
                    Box::pin(run)
                })
            }
        }
    }

    /// Records `command` (a table index, `None` for an unknown one) as the client's latest
    /// (CLIENT LIST's `cmd=`), for the paths that do not route it.
    pub(super) fn note_command(&mut self, command: Option<usize>) {
        if let Some(command) = command {
            self.client.ran(command);
        }
    }
}

/// Moves `request` out of its place, which is left empty (to decode the next into).
fn spent(request: &mut Request) -> Request {
    std::mem::take(request)
}

/// The client's user under `proxy`, looked up once per snapshot and login (`cache`), by
/// the name it is logged in as.
pub(super) fn user_of<'u>(
    cache: &'u mut Option<Option<Arc<LiveUser>>>,
    proxy: &Proxy,
    name: Option<&str>,
) -> Option<&'u Arc<auth::User>> {
    cache
        .get_or_insert_with(|| name.and_then(|name| proxy.acl.users.get(name)))
        .as_ref()
        .map(|live| &live.user)
}

/// Whether `request` is a sequence point of its own: it may wait for data on its own
/// backend connection (BLPOP, BZPOPMIN, XREAD with BLOCK, WAITAOF...), it is a SORT the
/// proxy runs in steps (its lookups and STORE must not overtake, or be overtaken by, the
/// requests around it), or it may switch the protocol (HELLO, RESET): the requests after
/// it go to the backend connections of the other protocol, where they could overtake
/// those before it.
fn runs_alone(request: &Request, name: &FoldedName, spec: Option<&CommandSpec>) -> bool {
    match name.as_bytes() {
        b"hello" | b"reset" => true,
        // Nothing after it starts before the masters report (see `tracking`).
        b"client" => request
            .args
            .get(1)
            .is_some_and(|sub| sub.eq_ignore_ascii_case(b"tracking")),
        b"sort" | b"sort_ro" => crate::dispatch::sort_runs_in_steps(&request.args),
        _ => spec
            .is_some_and(|spec| spec.blocks(&request.args) || crate::dispatch::runs_a_script(spec)),
    }
}
