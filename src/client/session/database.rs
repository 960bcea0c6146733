//! The session's part of `SELECT n` (see `dispatch::database`): the database stage of a
//! request, and the futures of the requests it takes (the emulated commands, and those
//! whose replies name keys to show without the database's prefix).

use std::sync::Arc;

use bytes::Bytes;

use crate::command::CommandSpec;
use crate::dispatch::database::{DbCommand, DbStage};
use crate::dispatch::layout::{rename_reply_keys, ReplyKeys};
use crate::dispatch::{Proxy, BLOCKED_ON};
use crate::protocol::{encode, Request};
use crate::rewrite::database;

use super::super::pipeline::Running;
use super::Session;

/// What the database stage decided about one request.
#[derive(Default)]
pub(super) struct InDatabase {
    /// The request as the client sent it, when the stage renamed its keys (the renamed
    /// one took its place).
    pub original: Option<Request>,
    /// Where the renamed request's reply names keys to show back.
    pub shown: Option<ReplyKeys>,
    /// The database layer carries the request out itself.
    pub emulated: Option<DbCommand>,
    /// The reply, now (a refusal).
    pub answer: Option<Bytes>,
}

impl InDatabase {
    /// The database stage of `request` (a `spec` command) for a client in database `db`:
    /// a renamed request takes the place of `request`.
    pub fn stage(
        proxy: &Proxy,
        db: u32,
        in_multi: bool,
        request: &mut Request,
        spec: Option<&CommandSpec>,
    ) -> InDatabase {
        let mut in_db = InDatabase::default();
        match proxy.database_stage(db, spec, request, in_multi) {
            DbStage::Unchanged => {}
            DbStage::Renamed {
                request: renamed,
                reply_keys,
            } => {
                in_db.original = Some(std::mem::replace(request, renamed));
                in_db.shown = reply_keys;
            }
            DbStage::Emulated(command) => in_db.emulated = Some(command),
            DbStage::Answer(reply) => in_db.answer = Some(reply),
        }
        in_db
    }

    /// Whether the stage renamed the request or takes it: the session forwards it with
    /// [`Session::forward_in_database`].
    pub fn is_taken(&self) -> bool {
        self.original.is_some() || self.emulated.is_some()
    }
}

impl Session<'_> {
    /// Forwards a request the database stage renamed or takes, once the user's ACL has
    /// allowed it under the names the client sent.
    pub(super) fn forward_in_database(
        &mut self,
        command: Option<usize>,
        request: &mut Request,
        in_db: InDatabase,
        alone: bool,
    ) -> Option<Running> {
        let proxy = self.ident.snapshot.clone();
        let user = self.user_arc();
        let db = self.ident.state.db;
        let proto = self.ident.state.proto;
        if let Some(command_run) = in_db.emulated {
            self.note_command(command);
            self.order.sequence_point = true;
            let request = std::mem::take(request);
            return Some(Box::pin(async move {
                proxy
                    .run_in_database(db, command_run, request, proto, user.as_deref())
                    .await
            }));
        }
        let original = in_db.original.as_ref()?;
        if !self.tx.transaction.in_multi() {
            if let Some(refusal) = proxy.admit(original, user.as_deref()) {
                self.note_command(command);
                self.order.in_flight.push_ready(refusal);
                return None;
            }
        }
        let Some(keys) = in_db.shown else {
            return self.forward(command, request, alone, true);
        };
        self.note_command(command);
        self.tx
            .transaction
            .note_write(&proxy, command, &request.args);
        self.order.sequence_point = alone;
        let databases = proxy.config.databases;
        let run = proxy.execute_indexed(command, std::mem::take(request), proto, None, None);
        let run = async move {
            let reply = run.await;
            let name_of =
                |key: &[u8]| database::name_in(key, db, databases).map(Bytes::copy_from_slice);
            rename_reply_keys(keys, reply, name_of).unwrap_or_else(|| encode::null_frame(proto))
        };
        Some(if alone {
            Box::pin(BLOCKED_ON.scope(self.client.blocked.clone(), run))
        } else {
            Box::pin(run)
        })
    }

    /// The client's user, to carry into a future.
    fn user_arc(&mut self) -> Option<Arc<crate::auth::User>> {
        let ident = &mut self.ident;
        super::admit::user_of(
            &mut ident.user,
            &ident.snapshot,
            ident.state.user.as_deref(),
        )
        .cloned()
    }
}
