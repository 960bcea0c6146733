//! Which commands the client session hands straight to routing: those none of its own
//! checks concern (the connection commands it answers, transactions, subscriptions, the
//! commands that run alone). Built once per command table, looked up by index per request.

use crate::command::{CommandSet, CommandTable, CrossSlot};

/// The commands of `table` none of the session's own checks concern (see
/// `CommandSpec::checked_by_session`; and the stores and moves that may run in steps
/// across slots, see `CrossSlot::runs_in_steps`): outside MULTI and subscriptions the
/// session routes them at once, without folding their name for those checks (a few
/// percent of a pipelined GET's work).
pub fn plain_commands(table: &CommandTable) -> CommandSet {
    table.select(|spec| {
        !spec.checked_by_session() && !spec.cross_slot.is_some_and(CrossSlot::runs_in_steps)
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
            "info",
            "keys",
            "scan",
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
