//! Which commands the client session hands straight to routing: those none of its own
//! checks concern (the connection commands it answers, transactions, subscriptions, the
//! commands that run alone). Built once per command table, looked up by index per request.

use crate::command::{CommandSet, CommandTable, CrossSlot};

/// The commands (a subcommand by its container's name) the session's own checks act on
/// before routing: the connection's commands it answers itself (`local::answer`,
/// `local::sets_reply_mode`), transactions and WAIT (`Transaction::handle`,
/// `Transaction::is_sequence_point`), subscriptions (`PubSub::intercept`) and those that
/// run alone (the session's `runs_alone`, which also takes every command that may block
/// and every client's script), and the database stage's commands of a client in database 0
/// (`dispatch::database::concerns_database_zero`).
/// A name one of them comes to act on joins this list, or its command skips that check.
const CHECKED_NAMES: &[&str] = &[
    "ping",
    "echo",
    "quit",
    "select",
    "readonly",
    "readwrite",
    "asking",
    "auth",
    "hello",
    "acl",
    "config",
    "reset",
    "monitor",
    "client",
    "multi",
    "exec",
    "discard",
    "watch",
    "unwatch",
    "wait",
    "subscribe",
    "unsubscribe",
    "psubscribe",
    "punsubscribe",
    "ssubscribe",
    "sunsubscribe",
    "sort",
    "sort_ro",
    "eval",
    "eval_ro",
    "evalsha",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
    // The database stage (`dispatch::database`) of a client in database 0.
    "keys",
    "scan",
    "randomkey",
    "dbsize",
    "flushdb",
    "move",
    "copy",
    "swapdb",
    "info",
];

/// The commands of `table` none of the session's own checks concern (see
/// `CHECKED_NAMES`; and the stores and moves that may run in steps across slots, see
/// `CrossSlot::runs_in_steps`): outside MULTI and subscriptions the session routes them at
/// once, without folding their name for those checks (a few percent of a pipelined GET's
/// work).
pub fn plain_commands(table: &CommandTable) -> CommandSet {
    table.select(|spec| {
        let container = spec.name().split('|').next().unwrap_or_default();
        !spec.may_block()
            && !CHECKED_NAMES.contains(&container)
            && !spec.cross_slot.is_some_and(CrossSlot::runs_in_steps)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_plain(table: &CommandTable, plain: &CommandSet, command: &str) -> bool {
        let args: Vec<bytes::Bytes> = command
            .split(' ')
            .map(|word| bytes::Bytes::copy_from_slice(word.as_bytes()))
            .collect();
        plain.contains(table.lookup_index(&args).expect(command))
    }

    #[test]
    fn the_database_stages_commands_are_checked() {
        for name in [
            "keys",
            "scan",
            "randomkey",
            "dbsize",
            "flushdb",
            "move",
            "copy",
            "swapdb",
            "select",
            "info",
        ] {
            assert!(
                crate::dispatch::database::concerns_database_zero(name.as_bytes()),
                "{name}"
            );
            assert!(CHECKED_NAMES.contains(&name), "{name}");
        }
        assert!(!crate::dispatch::database::concerns_database_zero(b"get"));
    }

    #[test]
    fn only_commands_no_session_check_concerns_are_plain() {
        let table = CommandTable::builtin();
        let plain = plain_commands(&table);
        for command in [
            "get",
            "set",
            "mset",
            "mget",
            "zadd",
            "xadd",
            "xrange",
            "publish",
            "object encoding",
            "script load",
            "flushall",
        ] {
            assert!(is_plain(&table, &plain, command), "{command}");
        }
        // Those `local::answer`, `Transaction::handle`, `PubSub::intercept` and `runs_alone`
        // act on, in any case, subcommands with their container.
        for command in [
            "keys",
            "scan",
            "dbsize",
            "PING",
            "echo",
            "quit",
            "select",
            "readonly",
            "readwrite",
            "asking",
            "auth",
            "hello",
            "acl whoami",
            "ACL cat",
            "reset",
            "client",
            "client list",
            "CLIENT reply",
            "multi",
            "exec",
            "discard",
            "watch",
            "unwatch",
            "wait",
            "subscribe",
            "unsubscribe",
            "psubscribe",
            "punsubscribe",
            "ssubscribe",
            "sunsubscribe",
            "sort",
            "sort_ro",
            "eval",
            "EVALSHA",
            "eval_ro",
            "evalsha_ro",
            "fcall",
            "fcall_ro",
            "blpop",
            "brpoplpush",
            "bzpopmin",
            "blmpop",
            "xread",
            "xreadgroup",
        ] {
            assert!(!is_plain(&table, &plain, command), "{command}");
        }
    }
}
