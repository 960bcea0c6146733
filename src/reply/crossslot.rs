//! Error texts of the commands the proxy computes or moves itself across slots (see
//! `crate::crossslot`), worded exactly as Redis 7.0 words them, plus the proxy's own
//! refusals: an input too large to compute in memory, and the commands it does not
//! emulate across slots.

/// A key holding another type than the command reads.
pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
/// A string that is not a HyperLogLog, for PFCOUNT and PFMERGE.
pub const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
/// A HyperLogLog whose sparse encoding does not decode to 16384 registers.
pub const CORRUPT_HLL: &str = "INVALIDOBJ Corrupted HLL object detected";
/// Arguments that do not fit the command's syntax.
pub const SYNTAX: &str = "ERR syntax error";
/// An argument that must be an integer.
pub const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
/// A ZUNION/ZINTER weight that is not a float as Redis's `strtod` reads one.
pub const WEIGHT_NOT_FLOAT: &str = "ERR weight value is not a float";
/// SINTERCARD's numkeys below 1 or not an integer.
pub const NUMKEYS_POSITIVE: &str = "ERR numkeys should be greater than 0";
/// SINTERCARD's numkeys above the number of arguments left.
pub const NUMKEYS_TOO_MANY: &str = "ERR Number of keys can't be greater than number of args";
/// SINTERCARD/ZINTERCARD's LIMIT below 0 or not an integer.
pub const LIMIT_NEGATIVE: &str = "ERR LIMIT can't be negative";
/// LCS of a key that holds something other than a string.
pub const LCS_NOT_STRING: &str = "ERR The specified keys must contain string values";
/// LCS with both LEN and IDX.
pub const LCS_LEN_AND_IDX: &str =
    "ERR If you want both the length and indexes, please just use IDX.";
/// BITOP NOT with other than one source key.
pub const BITOP_NOT_ONE_KEY: &str = "ERR BITOP NOT must be called with a single source key.";

/// `ERR at least 1 input key is needed for 'zunion' command`, as the Z* algebra words it.
pub fn at_least_one_key(command: &str) -> String {
    format!("ERR at least 1 input key is needed for '{command}' command")
}

/// The proxy's refusal of a cross-slot command whose inputs exceed what it computes in
/// memory; the client can run the command on keys that share a hash tag instead.
pub fn too_large(command: &str, what: &str, size: u64, limit: u64) -> String {
    format!(
        "ERR proxy: cross-slot {command} reads {size} {what}, more than the limit of {limit}; \
         use keys with a common hash tag to run it on one node"
    )
}

/// Redis Cluster's `-CROSSSLOT` for a command the proxy could compute across slots but whose
/// class `setting` (`cross_slot.reads`, `.stores`, `.moves` or `.blocking`) is set
/// to `refuse`.
pub fn emulation_off(setting: &str) -> String {
    format!("CROSSSLOT Keys in request don't hash to the same slot (emulation off: {setting})")
}

/// A STORE's writes were not applied (EXEC answered null, or an element was an error).
pub const STORE_NOT_APPLIED: &str =
    "ERR proxy: the cross-slot result was not written to its destination";

/// RENAME or RENAMENX of a key that does not exist.
pub const NO_SUCH_KEY: &str = "ERR no such key";
/// COPY's `DB` above the server's number of databases, or below 0.
pub const DB_OUT_OF_RANGE: &str = "ERR DB index is out of range";
/// COPY's `DB` other than 0, as a cluster node answers it.
pub const COPY_OTHER_DB: &str = "ERR Copying to another database is not allowed in cluster mode";
/// MSETNX whose keys span slots: refused whatever the settings (see the README).
pub const MSETNX_ACROSS_SLOTS: &str = "CROSSSLOT Keys in request don't hash to the same slot \
     (MSETNX is all or nothing only on one node: use keys with a common hash tag)";
/// A node answered a blocking pop's length probe with something other than a number.
pub const UNEXPECTED_PROBE: &str =
    "ERR proxy: unexpected reply to a cross-slot blocking pop's probe";
/// A node answered a step of a cross-slot move with something the proxy did not ask for.
pub const MOVE_UNEXPECTED: &str = "ERR proxy: unexpected reply during a cross-slot move";
