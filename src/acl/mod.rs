//! ACL management of the proxy's users, as Redis 7.0 manages its own: `ACL SETUSER`,
//! `DELUSER`, `GETUSER`, `LIST`, `USERS`, `CAT`, `LOG`, `DRYRUN`, `WHOAMI`, `SAVE`,
//! `LOAD`, and `CONFIG SET/GET requirepass`.

mod catalog;
mod commands;
mod describe;
mod file;
mod log;
mod set;
pub mod text;
mod user;

pub use catalog::Catalog;
pub use commands::{answer, deluser, merge_selectors, setuser, AclRequest};
pub use describe::{command_rules, getuser_reply, list_line};
pub use file::{parse as parse_users_file, render as render_users_file, user_from_config};
pub use log::{format_17g, AclLog, Context, Reason, ACLLOG_MAX_LEN};
pub use set::{Freshness, LiveUser, UserSet, Users};
pub use user::{sha256_hex, AclUser, RuleError, Sanitize};
