//! ACL management of the proxy's users, as Redis 7.0 manages its own: `ACL SETUSER`,
//! `DELUSER`, `GETUSER`, `LIST`, `USERS`, `CAT`, `LOG`, `DRYRUN`, `WHOAMI`, `SAVE`,
//! `LOAD`, and `CONFIG SET/GET requirepass`. The users clients authenticate against are
//! the proxy's; nothing here reaches the masters.
//!
//! Layout: [`user`](AclUser) is Redis's user model and `ACL SETUSER`'s rules applied to it
//! (`ACLSetUser`, errors included); `describe` prints it as Redis does (GETUSER, LIST, the
//! category approximation of `ACLDescribeSelectorCommandRules`); `set` is the live
//! [`UserSet`]; `file` the users file (Redis's ACL file format); `log` the [`AclLog`];
//! `commands` the replies. Every user also carries the proxy's own checks
//! ([`crate::auth::User`]), rebuilt from its Redis description on every change.
//!
//! Invariants:
//! - A change is all-or-nothing: SETUSER stages every rule on a copy, LOAD parses the whole
//!   file first; a refused change leaves the set as it was.
//! - What Redis accepts but the proxy cannot enforce is refused, naming the rule, never
//!   approximated: selectors `(...)`, read-only / write-only key patterns (`%R~`, `%W~`;
//!   `%RW~` is `~`), first-arg grants (`+select|0`), `skip-sanitize-payload`, key or
//!   channel patterns that are not UTF-8.
//!   `sanitize-payload` is kept and shown (RESTORE payloads are checked by the masters'
//!   own setting either way).
//! - The proxy's `scripts: trusted|refused` of a configured user has no Redis rule: it
//!   survives ACL SETUSER of that user but is not written by ACL SAVE.
//!
//! # Wiring (for the connection-local command handler)
//!
//! Shared state: one [`UserSet`] (`UserSet::from_config(&config, users_file)`, replacing
//! `auth::Auth` for AUTH/HELLO: [`UserSet::check`], [`UserSet::open_default`]) and one
//! [`AclLog`], both in the proxy's shared state; a session holds the
//! `Arc<`[`LiveUser`]`>` it authenticated as instead of a user name.
//!
//! - Every `ACL <subcommand>`: `acl::answer(&AclRequest { users, log, commands, proto,
//!   whoami }, &request.args)`, the reply as is. `whoami` is the held user's name (`None`
//!   before authentication). SETUSER, DELUSER, GETUSER, LIST, USERS, CAT, LOG, DRYRUN,
//!   WHOAMI, SAVE, LOAD, GENPASS, HELP; anything else gets Redis's subcommand error.
//! - `CONFIG SET requirepass <x>` (that one pair): [`UserSet::set_requirepass`], `+OK`;
//!   `CONFIG GET requirepass`: [`UserSet::config_get_requirepass`]. A CONFIG SET or GET
//!   naming other parameters as well is split by the handler, or refused.
//! - Denials and failed AUTH/HELLO: [`AclLog::record`] with [`Reason`] (`Command` for a
//!   script refusal too), [`Context::Multi`] inside MULTI, `object` the command name
//!   (`config|set`), key or channel (for `Auth`, the command as sent), the user name, and
//!   the client's CLIENT LIST line.
//! - Before each command a session calls [`UserSet::refresh`] with its held user (one
//!   atomic load when nothing changed): `Changed(new)` -> hold `new` and check this
//!   command with it; also, as Redis's `ACLKillPubsubClientsIfNeeded`, if a channel or
//!   pattern the session is subscribed to is no longer allowed, close the connection;
//!   `Deleted` (ACL DELUSER; after ACL LOAD every user but `default`, as Redis frees
//!   them all and closes their clients) -> close the connection without running the
//!   command. `off` does not end sessions (Redis: it only stops new logins). A subscribed session that sends nothing is checked
//!   when its next message is relayed.
//! - Policy: the ACL commands stay refused by the command policy unless the operator
//!   allows them (`commands.allow`), as today, and the caller's own ACL must allow the
//!   subcommand (`acl|setuser`...) like any other command. WHOAMI stays answered for
//!   everyone as now. CONFIG SET requirepass needs `config|set` allowed by both.

mod catalog;
mod commands;
mod describe;
mod file;
mod log;
mod set;
mod shared;
pub use crate::reply::acl as text;
mod user;

pub use catalog::Catalog;
pub use commands::{answer, deluser, load_users_file, merge_selectors, setuser, AclRequest};
pub use describe::{command_rules, getuser_reply, list_line};
pub use file::{parse as parse_users_file, render as render_users_file, user_from_config};
pub use log::{format_17g, AclLog, Context, Reason, ACLLOG_MAX_LEN};
pub use set::{Freshness, LiveUser, UserSet, Users};
pub use shared::Shared;
pub use user::{sha256_hex, AclUser, RuleError, Sanitize};

#[cfg(test)]
mod tests;
