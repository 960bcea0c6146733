//! The admit chain's checks before any interceptor: access (a draining proxy, NOAUTH, the
//! policy and the ACL), then what MONITOR and CLIENT TRACKING see of the request.

use crate::auth;
use crate::protocol::{FoldedName, Request};
use crate::reply;

use super::super::local;
use super::super::monitor;
use super::super::step::Step;
use super::admit::user_of;
use super::Session;

impl Session<'_> {
    /// The checks every request passes before the interceptors: access, then what the
    /// monitors and the client's tracking see (`request` as the client sent it).
    #[inline(always)]
    pub(super) fn checks(
        &mut self,
        request: &Request,
        name: &FoldedName,
        command: Option<usize>,
        checked: bool,
    ) -> Step {
        let mut access = self.access_step(request, name, command, checked);
        // MONITOR: one relaxed load while nobody monitors.
        if self.client.registry.monitors().watched() {
            access = self.monitor_step(access, request, name, command);
        }
        // CLIENT TRACKING: a field test while the client does not track.
        if self.ident.state.tracking.is_some() && matches!(access, Step::Next) {
            self.track_step(request, name, command);
        }
        access
    }

    /// The chain's one access check: a draining proxy's refusal, NOAUTH, then the command
    /// policy and the user's ACL, as far as this request needs them before it runs.
    ///
    /// Outside MULTI, the ACL's command rules (the dispatcher adds the key patterns as it
    /// plans; the commands answered by the session never reach it); for WATCH, and for a
    /// command the transaction queues, the policy and the whole ACL, key patterns
    /// included, as Redis checks them at queue time (a refusal fails the EXEC).
    fn access_step(
        &mut self,
        request: &Request,
        name: &FoldedName,
        command: Option<usize>,
        checked: bool,
    ) -> Step {
        if self.end.draining {
            return Step::Reply(reply::error(reply::text::SHUTTING_DOWN));
        }
        let ident = &mut self.ident;
        let proxy = &ident.snapshot;
        let user = user_of(&mut ident.user, proxy, ident.state.user.as_deref());
        if user.is_none() && !local::allowed_before_auth(request) {
            return Step::Reply(reply::error(auth::NOAUTH));
        }
        let transaction = &mut self.tx.transaction;
        let whole = checked
            && (transaction.queues(name, request.args.len())
                || !transaction.in_multi() && name.as_bytes() == b"watch");
        if !whole && transaction.in_multi() {
            return Step::Next;
        }
        let mut refusal = match user {
            Some(user) if !whole || !transaction.in_multi() => {
                let (state, registry) = (&ident.state, self.client.registry);
                local::acl_refusal(&proxy.commands, user, request, |reason, object| {
                    let info = local::client_info(state, registry, proxy);
                    let name = state.user.as_deref().unwrap_or("default");
                    local::log_denial(&proxy.acl.log, reason, false, object, name, &info);
                })
            }
            _ => None,
        };
        if refusal.is_none() && whole {
            refusal = proxy.admit(request, user.map(|user| &**user));
            if refusal.is_some() {
                transaction.refused();
                self.note_command(command);
            }
        }
        match refusal {
            Some(refusal) => Step::Reply(refusal),
            None => Step::Next,
        }
    }

    /// Shows the request to the monitors (see `monitor::observe`).
    fn monitor_step(
        &mut self,
        access: Step,
        request: &Request,
        name: &FoldedName,
        command: Option<usize>,
    ) -> Step {
        let origin = monitor::Origin {
            peer: &self.conn.peer,
            db: self.ident.state.db,
            state: &mut self.ident.state,
            transaction: &self.tx.transaction,
        };
        let spec = command.and_then(|command| self.ident.snapshot.commands.spec(command));
        monitor::observe(self.client.registry, origin, access, request, name, spec)
    }

    /// Records what a tracking client reads (see `tracking::Enabled::observe`), before
    /// the request is sent.
    #[cold]
    fn track_step(&mut self, request: &Request, name: &FoldedName, command: Option<usize>) {
        let ident = &mut self.ident;
        let Some(enabled) = ident.state.tracking.as_deref_mut() else {
            return;
        };
        let proxy = &ident.snapshot;
        let spec = command.and_then(|command| proxy.commands.spec(command));
        let in_multi = self.tx.transaction.in_multi();
        let mailboxes = self.client.registry.mailboxes();
        enabled.observe(proxy, &mailboxes, request, spec, name.as_bytes(), in_multi);
    }
}
