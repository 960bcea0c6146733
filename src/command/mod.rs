//! The command table: what each command is and where its keys are. Pure, no IO.
//!
//! The table is read from the backend's own `COMMAND` reply at start-up (Redis 7 key
//! specs), so every command of the server's version routes right, module commands
//! included. When no backend answers, a built-in copy of a Redis 7 `COMMAND` reply is
//! parsed by the same code. Lookups upper/lower-case into a stack buffer: no allocation.

mod keys;
mod table;

pub use keys::{KeyFlags, KeyPos};
pub use table::{CommandFlags, CommandSpec, CommandTable};
