//! Parsing a `COMMAND` reply into specs, and looking commands up.

use bytes::Bytes;
use smallvec::SmallVec;

use super::keys::KeyPos;

/// Command flags from `COMMAND` (the subset the proxy acts on).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CommandFlags(pub u32);

impl CommandFlags {
    pub const WRITE: u32 = 1 << 0;
    pub const READONLY: u32 = 1 << 1;
    pub const ADMIN: u32 = 1 << 2;
    pub const PUBSUB: u32 = 1 << 3;
    pub const NOSCRIPT: u32 = 1 << 4;
    pub const BLOCKING: u32 = 1 << 5;
    pub const MOVABLEKEYS: u32 = 1 << 6;
    pub const DENYOOM: u32 = 1 << 7;
    pub const LOADING: u32 = 1 << 8;
    pub const STALE: u32 = 1 << 9;
    pub const FAST: u32 = 1 << 10;
    pub const NO_MULTI: u32 = 1 << 11;

    pub fn has(self, flag: u32) -> bool {
        self.0 & flag != 0
    }
}

/// One command (or subcommand) of the table.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// Lower-case name; subcommands as `object|encoding`, as Redis names them.
    pub name: String,
    /// Redis arity: N exact, -N at least N (command name included).
    pub arity: i32,
    pub flags: CommandFlags,
}

impl CommandSpec {
    /// Whether `argc` arguments (command name included) fit the arity.
    pub fn arity_ok(&self, argc: usize) -> bool {
        let _ = argc;
        unimplemented!("command::table")
    }

    /// Key positions for this invocation, in argument order.
    pub fn keys(&self, args: &[Bytes], out: &mut SmallVec<[KeyPos; 4]>) {
        let _ = (args, out);
        unimplemented!("command::table")
    }
}

/// All commands the proxy knows.
#[derive(Debug, Clone, Default)]
pub struct CommandTable {}

impl CommandTable {
    /// The built-in table (a Redis 7 `COMMAND` reply shipped with the proxy).
    pub fn builtin() -> Self {
        unimplemented!("command::table")
    }

    /// Parses a `COMMAND` reply (one RESP2 or RESP3 frame, raw bytes).
    pub fn from_command_reply(frame: &[u8]) -> Result<Self, String> {
        let _ = frame;
        unimplemented!("command::table")
    }

    /// The spec for a request's arguments (resolving container commands such as
    /// `OBJECT ENCODING` to their subcommand). Case-insensitive, no allocation.
    pub fn lookup(&self, args: &[Bytes]) -> Option<&CommandSpec> {
        let _ = args;
        unimplemented!("command::table")
    }
}
