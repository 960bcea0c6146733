//! Texts of the replies about MULTI/EXEC transactions, worded as Redis 7's where Redis has
//! the case, and the proxy's own where a transaction cannot span the cluster.

/// EXEC after a command failed to queue, as Redis 7.
pub const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";
/// EXEC with arguments, as Redis 7.
pub const EXEC_ARITY_ABORT: &str =
    "EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command";
/// Redis's EXECABORT when EXEC itself is refused, before the refusal's text.
pub const EXECABORT_BECAUSE: &str = "EXECABORT Transaction discarded because of: ";
/// MULTI inside MULTI, as Redis 7.
pub const NESTED: &str = "ERR MULTI calls can not be nested";
/// EXEC outside a transaction, as Redis 7.
pub const EXEC_WITHOUT_MULTI: &str = "ERR EXEC without MULTI";
/// DISCARD outside a transaction, as Redis 7.
pub const DISCARD_WITHOUT_MULTI: &str = "ERR DISCARD without MULTI";
/// WATCH inside a transaction, as Redis 7.
pub const WATCH_IN_MULTI: &str = "ERR WATCH inside MULTI is not allowed";
/// A command Redis refuses to queue, as Redis 7.
pub const NOT_IN_MULTI: &str = "ERR Command not allowed inside a transaction";
/// A split transaction's part whose node did not run it.
pub const PART_DID_NOT_RUN: &str = "ERR proxy: this slot's part of the transaction did not run";
/// A split transaction's part that its master aborted because a key the part watched
/// changed after EXEC checked every WATCH, while other slots' parts were applied (not
/// EXECABORT, which says that nothing ran).
pub const WATCHED_PART_ABORTED: &str = "ERR proxy: a key watched in this slot changed after EXEC checked the watches: this slot's commands did not run, other slots' commands did (cross_slot_transactions: split)";
/// A master whose `CLIENT INFO` shows no `flags` field: WATCH across slots cannot be
/// checked there (it needs Redis 6.2 or later).
pub const WATCH_CHECK_UNAVAILABLE: &str = "ERR proxy: WATCH across slots needs CLIENT INFO with flags (Redis 6.2 or later) on every master; nothing ran";

/// A command the proxy cannot queue (it answers it alone, or it changes its connection).
pub fn not_in_multi(name: &str) -> String {
    format!("ERR proxy: '{name}' is not supported inside MULTI")
}

/// A command that runs on every master, queued.
pub fn spans_masters_in_multi(name: &str) -> String {
    format!(
        "ERR proxy: '{name}' is not supported inside MULTI: it runs on every master, which one transaction cannot span"
    )
}

/// SORT with BY or GET patterns, queued.
pub fn sort_steps_in_multi(name: &str) -> String {
    format!(
        "ERR proxy: '{name}' with BY or GET patterns is not supported inside MULTI: its pattern keys live on other masters, which one transaction cannot span"
    )
}
