//! `SELECT n`: databases other than 0 as key prefixes (the mapping is
//! `rewrite::database`'s), applied to requests and replies.
//!
//! One job: a client in database `n` sees the keys of database `n` only, and a client in
//! database 0 does not see the others'. The pieces, in the order a request meets them:
//!
//! - **The database stage** ([`Proxy::database_stage`]), once per request, before the
//!   session's order and access checks: in database `n > 0` every key position the
//!   command table knows (`CommandSpec::keys`, SORT's BY and GET patterns too) gets the
//!   database's prefix, so everything after it (transactions, routing, the cross-slot
//!   emulation, scripts' declared keys) works on the names stored. A client in database 0
//!   never reaches it for any command but those that list, count, empty or move across
//!   databases (KEYS, SCAN, RANDOMKEY, DBSIZE, FLUSHDB, MOVE, COPY ... DB, SWAPDB), so its
//!   plain GET and SET pay nothing.
//! - **Replies that name keys** (the list and sorted-set pops, XREAD's stream names) are
//!   shown without the prefix, by the same renaming the layout uses
//!   ([`super::layout::rename_reply_keys`]).
//! - **Emulated commands** (`run`): the listings, counts and flushes walk the keyspace by
//!   SCAN with the database's pattern and keep the database's keys; MOVE and COPY ... DB
//!   copy between prefixes. They run in steps, alone (a sequence point).
//!
//! Under a key layout, SELECT n > 0 is refused (see `client::local`): the layout's rules
//! name database 0's keys.

mod keyspace;
mod run;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::command::{CommandSpec, KeyList};
use crate::protocol::encode::encode_request;
use crate::protocol::{parse_i64, Request};
use crate::reply;
use crate::rewrite::database;

use super::layout::ReplyKeys;
use super::Proxy;

pub use run::DbCommand;

/// What the database stage makes of a request.
#[derive(Debug)]
pub enum DbStage {
    /// The request goes on as it is.
    Unchanged,
    /// The request with its keys in the stored names; `reply_keys`: where its reply names
    /// keys to show back without the prefix.
    Renamed {
        request: Request,
        reply_keys: Option<ReplyKeys>,
    },
    /// Carried out in steps by the database layer ([`Proxy::run_in_database`]).
    Emulated(DbCommand),
    /// Answered now (and, inside MULTI, a refusal that fails the EXEC).
    Answer(Bytes),
}

/// Whether a client in database 0 sends this command (a lower-case name) through the
/// database stage: the commands that list, count, empty or move across databases, INFO
/// (`INFO keyspace`) and SELECT (refused inside MULTI).
pub fn concerns_database_zero(name: &[u8]) -> bool {
    matches!(
        name,
        b"keys"
            | b"scan"
            | b"randomkey"
            | b"dbsize"
            | b"flushdb"
            | b"move"
            | b"copy"
            | b"swapdb"
            | b"select"
            | b"info"
    )
}

impl Proxy {
    /// Whether clients may select a database other than 0: `databases` above 1 and no key
    /// layout (whose rules name database 0's keys). Without, database 0's requests never
    /// meet the database stage and its listings are the cluster's, as before `SELECT n`.
    pub fn has_other_databases(&self) -> bool {
        self.config.databases > 1 && self.layout.is_none()
    }

    /// The databases keyspace notifications are shown for: `databases` when clients may
    /// select one other than 0, else 1 (the cluster's names, untouched).
    pub fn keyspace_databases(&self) -> u32 {
        if self.has_other_databases() {
            self.config.databases
        } else {
            1
        }
    }

    /// The database stage of `request` (a `spec` command, `None` when unknown) sent by a
    /// client in database `db`, inside MULTI or not. Pure: builds the renamed request, or
    /// says which emulation answers it. Inside MULTI the emulated commands pass unchanged
    /// (the transaction refuses what spans masters; MOVE and COPY ... DB are refused by
    /// the node at EXEC) and replies keep the stored names.
    pub fn database_stage(
        &self,
        db: u32,
        spec: Option<&CommandSpec>,
        request: &Request,
        in_multi: bool,
    ) -> DbStage {
        let Some(spec) = spec.filter(|spec| spec.arity_ok(request.args.len())) else {
            return DbStage::Unchanged;
        };
        let args = &request.args;
        let databases = self.config.databases;
        let emulated = match spec.name.as_str() {
            // Another valid database: refused at once. The same one, or a bad index,
            // is queued and answered at EXEC as Redis answers it.
            "select" if in_multi => {
                return match parse_i64(&args[1]) {
                    Some(n) if n != i64::from(db) && (0..i64::from(databases)).contains(&n) => {
                        DbStage::Answer(reply::error(reply::database::SELECT_IN_MULTI))
                    }
                    _ => DbStage::Unchanged,
                }
            }
            "select" => return DbStage::Unchanged,
            _ if in_multi => None,
            "keys" => Some(DbCommand::Keys),
            "scan" => Some(DbCommand::Scan),
            "randomkey" => Some(DbCommand::RandomKey),
            "dbsize" => Some(DbCommand::DbSize),
            "flushdb" => Some(DbCommand::FlushDb),
            "move" => Some(DbCommand::Move),
            "swapdb" => Some(DbCommand::SwapDb),
            "info" if keyspace::asks_keyspace(args) => Some(DbCommand::InfoKeyspace),
            "copy" => match copy_target(args, databases) {
                Ok(None) => None,
                Ok(Some(to)) => Some(DbCommand::CopyTo(to)),
                Err(text) => return DbStage::Answer(reply::error(text)),
            },
            _ => None,
        };
        if let Some(command) = emulated {
            return DbStage::Emulated(command);
        }
        if db == 0 {
            return DbStage::Unchanged;
        }
        let reply_keys = ReplyKeys::of(&spec.name).filter(|_| !in_multi);
        DbStage::Renamed {
            request: renamed(spec, request, &database::prefix(db)),
            reply_keys,
        }
    }
}

/// The database COPY's `DB` option names (`Ok(None)` without one; the last one counts, as
/// in Redis), or the error text for a bad one. Other options are left to COPY itself.
fn copy_target(args: &[Bytes], databases: u32) -> Result<Option<u32>, &'static str> {
    let mut target = None;
    let mut i = 3;
    while i < args.len() {
        if args[i].eq_ignore_ascii_case(b"db") && i + 1 < args.len() {
            let db = parse_i64(&args[i + 1]).ok_or(reply::text::NOT_AN_INTEGER)?;
            let db = u32::try_from(db)
                .ok()
                .filter(|&db| db < databases)
                .ok_or(reply::text::SELECT_RANGE)?;
            target = Some(db);
            i += 1;
        }
        i += 1;
    }
    Ok(target)
}

/// `request` (a `spec` command) with every key position, and SORT's BY and GET patterns,
/// under `prefix`.
fn renamed(spec: &CommandSpec, request: &Request, prefix: &[u8]) -> Request {
    let mut args: SmallVec<[Bytes; 4]> = request.args.clone();
    let mut keys = KeyList::new();
    spec.keys(&request.args, &mut keys);
    for key in &keys {
        args[key.index] = database::in_database(prefix, &request.args[key.index]);
    }
    if matches!(spec.name.as_str(), "sort" | "sort_ro") {
        prefix_sort_patterns(&mut args, prefix);
    }
    request_of(args)
}

/// SORT's `BY pattern` and `GET pattern` under `prefix` (`GET #`, the element itself,
/// stays): the keys the patterns form are the database's.
fn prefix_sort_patterns(args: &mut [Bytes], prefix: &[u8]) {
    let mut i = 2;
    while i + 1 < args.len() {
        let option = &args[i];
        if option.eq_ignore_ascii_case(b"limit") {
            i += 3;
            continue;
        }
        let pattern = option.eq_ignore_ascii_case(b"by")
            || option.eq_ignore_ascii_case(b"get") && &args[i + 1][..] != b"#";
        let store = option.eq_ignore_ascii_case(b"store");
        if pattern {
            args[i + 1] = database::in_database(prefix, &args[i + 1]);
        }
        i += if pattern || store { 2 } else { 1 };
    }
}

/// A request of `args`, with its frame.
pub(super) fn request_of(args: SmallVec<[Bytes; 4]>) -> Request {
    let refs: SmallVec<[&[u8]; 8]> = args.iter().map(|arg| &arg[..]).collect();
    let raw = encode_request(&refs);
    drop(refs);
    Request { raw, args }
}

#[cfg(test)]
mod tests;
