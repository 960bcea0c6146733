//! The command table: what each command is and where its keys are. Pure, no IO.
//!
//! The table is read from the backend's own `COMMAND` reply at start-up (Redis 7 key
//! specs), so every command of the server's version routes right, module commands
//! included. When no backend answers, a built-in copy of a Redis 7 `COMMAND` reply is
//! parsed by the same code. Lookups lower-case into a stack buffer: no allocation.
//!
//! Key positions follow Redis's own rules exactly (key specs, then the command's own
//! routine where the specs are incomplete), so the proxy routes a command to the slot
//! the server will check.
//!
//! Each command's [`Shape`] (how the proxy carries it out: forward, split, blocking,
//! emulated, fan-out, script, SORT, subscription, connection-local, transaction, refused)
//! is decided once, as the table is built, in `shape.rs`: the one place to name a command
//! the proxy treats specially.

mod getkeys;
mod keys;
mod name_hash;
mod parse;
mod shape;
mod table;

pub use getkeys::GetKeysProc;
pub use keys::{BeginSearch, FindKeys, KeyFlags, KeyList, KeyPos, KeyRule, KeySpec};
pub use name_hash::{NameHasher, NameMap};
pub use shape::{
    Blocks, Connection, CrossSlot, Emulated, FanOut, ScriptAdmin, ScriptRun, Shape, SplitKind,
};
pub use table::{
    acl_category_bit, CommandFlags, CommandSet, CommandSpec, CommandTable, ACL_CATEGORIES,
    MAX_NAME_LEN,
};

#[cfg(test)]
mod tests;
