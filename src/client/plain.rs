//! Which commands the client session hands straight to routing: those none of its own
//! checks concern (the connection commands it answers, transactions, subscriptions, the
//! commands that run alone). Built once per command table, looked up by index per request.

use crate::command::{CommandSet, CommandTable, CrossSlot};
use crate::dispatch::database;

/// The commands of `table` none of the session's own checks concern (see
/// `CommandSpec::checked_by_session`; the stores and moves that may run in steps across
/// slots, see `CrossSlot::runs_in_steps`; and those a client in database 0 sends through
/// the database stage, see `database::concerns_database_zero`): outside MULTI and
/// subscriptions the session routes them at once, without folding their name for those
/// checks (a few percent of a pipelined GET's work).
pub fn plain_commands(table: &CommandTable) -> CommandSet {
    table.select(|spec| {
        let container = spec.name().split('|').next().unwrap_or_default();
        !spec.checked_by_session()
            && !spec.cross_slot.is_some_and(CrossSlot::runs_in_steps)
            && !database::concerns_database_zero(container.as_bytes())
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
        let table = CommandTable::builtin();
        let plain = plain_commands(&table);
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
            assert!(!is_plain(&table, &plain, name), "{name}");
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
            "config rewrite",
            "config resetstat",
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
            "config get",
            "CONFIG set",
            "monitor",
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
