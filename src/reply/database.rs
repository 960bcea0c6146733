//! Texts of the replies about databases (`SELECT n`), which the proxy emulates as key
//! prefixes: Redis's own where Redis has one, the proxy's refusals otherwise.

/// MOVE to the database the key is in, as Redis words it.
pub const SAME_OBJECT: &str = "ERR source and destination objects are the same";
/// SWAPDB: databases are key prefixes in one keyspace; swapping two would rename every
/// key of both, neither atomically nor in constant time.
pub const SWAPDB_REFUSED: &str = "ERR proxy: SWAPDB is not supported (databases other than 0 are key prefixes in the cluster's one keyspace; swapping two would rename every key of both)";
/// SELECT of another database inside MULTI: the commands queued after it would have been
/// renamed for the database in force when they were queued.
pub const SELECT_IN_MULTI: &str =
    "ERR proxy: SELECT of another database is not supported inside MULTI; SELECT before MULTI";
/// SELECT n > 0 while a key layout is configured: its rules name database 0's keys.
pub const SELECT_UNDER_LAYOUT: &str = "ERR proxy: SELECT of a database other than 0 is not supported with a key layout (layout.file); its rules apply to database 0";
