//! A command's shape: how the proxy carries it out, decided once per command when the
//! table is built (see [`Shape::of`]) and read per request with the spec, so no request
//! compares names. Pure.
//!
//! Every command the proxy treats differently from a plain keyed forward is named here
//! and nowhere else. To add a special command: give it an arm in [`Shape::of`] (a new
//! variant or sub-kind if none fits), then handle the new variant where the compiler says
//! (`dispatch::plan`, and the session's predicates below if it concerns them). The
//! predicates the client session and transactions need ([`Shape::checked_by_session`],
//! [`Shape::answered_at_exec`], [`Shape::refused_in_multi`]) read the shape only.

use bytes::Bytes;

use super::table::CommandFlags;

/// How the proxy carries out one command (or subcommand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Routed by its keys (any master when keyless) and sent as it came.
    Forward,
    /// Forwarded on one slot; split per slot and merged when its keys span slots.
    Split(SplitKind),
    /// Routed by its keys; may hold its connection while waiting (see [`Blocks`]).
    Blocking(Blocks),
    /// Answered by the proxy as one server would.
    Emulated(Emulated),
    /// Answered from every master.
    FanOut(FanOut),
    /// SCRIPT LOAD/FLUSH/EXISTS over every master.
    ScriptAdmin(ScriptAdmin),
    /// Runs a client's script, routed by its keys, on a connection of its own.
    Script(ScriptRun),
    /// SORT, SORT_RO: run in steps by the proxy when BY/GET patterns name other slots'
    /// keys, else forwarded.
    Sort,
    /// PUBLISH and the PUBSUB subcommands about ordinary channels: to the slot of the
    /// proxy's subscription home, where its subscribers are.
    Channels,
    /// SPUBLISH: to the slot of its shard channel (Redis 7 marks it `not_key`).
    ShardPublish,
    /// CLUSTER subcommands a node answers: to the master owning the slot they name
    /// (COUNTKEYSINSLOT, GETKEYSINSLOT), else any master (HELP).
    NodeCluster,
    /// SUBSCRIBE and its kin: on the client's own connections only.
    Subscribe,
    /// A connection command the client session answers or acts on (forwarded like
    /// [`Shape::Forward`] should one reach the planner).
    ConnectionLocal(Connection),
    /// MULTI, EXEC, DISCARD, WATCH, UNWATCH: the session's transaction handles them
    /// (forwarded like [`Shape::Forward`] should one reach the planner).
    Transaction,
    /// Turns the connection it arrives on into something else (script debugger,
    /// MONITOR, replication stream): refused on connections shared by many clients.
    Refused,
}

/// The multi-key commands that can be split by slot, and how their parts merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitKind {
    /// MGET: values in key order.
    Mget,
    /// MSET: OK only when every part is.
    Mset,
    /// DEL, UNLINK, EXISTS, TOUCH: counts summed.
    Count,
}

/// When a [`Shape::Blocking`] command blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocks {
    /// Always may (BLPOP and the other `blocking` commands, WAIT, WAITAOF).
    Always,
    /// Only with a `BLOCK` option (XREAD, XREADGROUP).
    WithBlockOption,
}

/// A command answered (at least partly) by the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Emulated {
    ClusterInfo,
    ClusterSlots,
    ClusterShards,
    ClusterNodes,
    ClusterMyId,
    ClusterKeySlot,
    /// Other CLUSTER subcommands address real nodes and make no sense through a proxy.
    ClusterOther,
    Info,
    /// CONFIG GET: a master's answer with `port` and `cluster-enabled` as the proxy's.
    ConfigGet,
    /// REPLICAOF, SLAVEOF: `NO ONE` is `+OK` from the proxy, which shows itself as a
    /// master already (a no-op there, as on such a Redis); a master's address is sent on.
    ReplicaOf,
}

/// A command answered from every master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanOut {
    /// KEYS, PUBSUB SHARDCHANNELS: every master's array, concatenated (each master lists
    /// only what lives in its own slots).
    Keys,
    /// SCAN: one cursor over every master in turn.
    Scan,
    /// DBSIZE, SLOWLOG LEN: the sum.
    Sum,
    /// LASTSAVE: the oldest, the time by which every master had saved (a script that waits
    /// for LASTSAVE to change after BGSAVE waits for all of them).
    Oldest,
    /// SLOWLOG GET: every master's newest entries, merged newest first and cut to the
    /// count asked (entry ids are each master's own).
    SlowlogGet,
    /// RANDOMKEY: a key from a master that has any.
    RandomKey,
    /// FLUSHDB, FLUSHALL, CONFIG SET/RESETSTAT, FUNCTION DELETE/FLUSH/RESTORE, SLOWLOG
    /// RESET: sent to every master, `+OK` only when every master said so.
    AllOk,
    /// FUNCTION LOAD: sent to every master; the reply when every master gave the same one.
    AllSame,
    /// SCRIPT KILL, FUNCTION KILL: sent to every master; `+OK` when any master killed
    /// something, else the first master's error (NOTBUSY).
    AnyOk,
    /// PUBSUB SHARDNUMSUB: each shard channel asked of the master of its slot, where its
    /// subscribers are; the pairs in the order asked.
    ShardNumSub,
    /// LATENCY LATEST, HISTORY and HISTOGRAM: every master's samples as one monitor's.
    LatencyLatest,
    LatencyHistory,
    LatencyHistogram,
    /// MEMORY STATS: the masters' counts summed, what derives from them worked out again.
    MemoryStats,
}

/// SCRIPT subcommands the proxy answers over every master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptAdmin {
    /// SCRIPT LOAD: remember, load on every master, reply the SHA.
    Load,
    /// SCRIPT FLUSH: flush every master, forget every body.
    Flush,
    /// SCRIPT EXISTS: whether every master has it.
    Exists,
}

/// Script-running commands routed by key with script handling around them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptRun {
    /// EVAL, EVAL_RO: remember the body, then forward.
    Eval,
    /// EVALSHA, EVALSHA_RO: forward; reload a remembered body on `-NOSCRIPT`.
    EvalSha,
    /// FCALL, FCALL_RO: forward; copy the libraries to a master without the function.
    Fcall,
}

/// What the client session does with a [`Shape::ConnectionLocal`] command inside MULTI
/// and around its neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    /// PING, ECHO, QUIT, ASKING, ACL (but WHOAMI): queued like any other inside MULTI.
    Queued,
    /// SELECT, READONLY, READWRITE, ACL WHOAMI, CLIENT (but REPLY, KILL, UNBLOCK):
    /// answered by the proxy at EXEC, after the backend block.
    AnsweredAtExec,
    /// AUTH, CLIENT REPLY/KILL/UNBLOCK: their effect on the session (or a node's answer)
    /// cannot be carried by EXEC's reply, so refused inside MULTI.
    NotInMulti,
    /// HELLO: refused inside MULTI; runs alone, as it may switch the protocol.
    Hello,
    /// RESET: runs alone, as it may switch the protocol.
    Reset,
}

/// What the proxy does with a multi-key command whose keys span slots (see `crossslot`):
/// the class of emulation it belongs to, each turned on or off by its own
/// `cross_slot.<class>` setting, or why it is refused. Commands without one get
/// `-CROSSSLOT` naming their keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrossSlot {
    /// Each key read on its master, the reply computed by the proxy (`cross_slot.reads`).
    Read,
    /// Read as [`CrossSlot::Read`], then the destination replaced whole on its master;
    /// COPY restores the source's dump there (`cross_slot.stores`).
    Store,
    /// Copied to the destination's master first, then removed from the source's, so a
    /// failure in between duplicates and never loses (`cross_slot.moves`); the blocking
    /// forms wait on the source's master first.
    Move,
    /// MSETNX: all or nothing only on one node, so always refused with that reason.
    AllOrNothing,
    /// Multi-key blocking pops: the first key in order with data popped, else a wait on
    /// every key (`cross_slot.blocking`).
    Blocking,
    /// LMPOP, ZMPOP: the blocking pops' probe and pop, the null array when every key is
    /// empty. Governed by `cross_slot.blocking`, as they are those pops without the wait
    /// and keep the same guarantee.
    Pop,
    /// XREAD: every stream read on its master; with `BLOCK`, a wait on every stream when
    /// none has entries. A read (`cross_slot.reads`) without BLOCK, a blocking command
    /// (`cross_slot.blocking`) with it.
    Streams,
}

impl CrossSlot {
    /// The class of the command named `name` (lower-case), if the proxy knows one.
    pub fn of(name: &str) -> Option<CrossSlot> {
        Some(match name {
            "sunion" | "sinter" | "sdiff" | "sintercard" | "zunion" | "zinter" | "zdiff"
            | "zintercard" | "lcs" | "pfcount" => CrossSlot::Read,
            "sunionstore" | "sinterstore" | "sdiffstore" | "zunionstore" | "zinterstore"
            | "zdiffstore" | "bitop" | "pfmerge" | "copy" | "zrangestore" | "geosearchstore"
            // Cross-slot only with STORE or STOREDIST: otherwise they name one key.
            | "georadius" | "georadiusbymember" => CrossSlot::Store,
            "rename" | "renamenx" | "smove" | "lmove" | "rpoplpush" | "blmove" | "brpoplpush" => {
                CrossSlot::Move
            }
            "msetnx" => CrossSlot::AllOrNothing,
            "blpop" | "brpop" | "blmpop" | "bzpopmin" | "bzpopmax" | "bzmpop" => {
                CrossSlot::Blocking
            }
            "lmpop" | "zmpop" => CrossSlot::Pop,
            "xread" => CrossSlot::Streams,
            _ => return None,
        })
    }

    /// Whether the proxy carries out such a command across slots in steps that write
    /// after the first reply (a store's destination, a move's copy and removal, a pop
    /// after its probe): the client session runs it alone, so the client's next commands
    /// see its writes and do not reach a key before its probe does.
    pub fn runs_in_steps(self) -> bool {
        matches!(self, CrossSlot::Store | CrossSlot::Move | CrossSlot::Pop)
    }
}

impl Shape {
    /// The shape of the command named `name` (lower-case, `container|sub`) with `flags`.
    pub fn of(name: &str, flags: CommandFlags) -> Shape {
        if let Some(shape) = special(name) {
            return shape;
        }
        match name {
            // Not flagged `blocking` by Redis, but they wait.
            "wait" | "waitaof" => Shape::Blocking(Blocks::Always),
            "xread" | "xreadgroup" => Shape::Blocking(Blocks::WithBlockOption),
            _ if flags.has(CommandFlags::BLOCKING) => Shape::Blocking(Blocks::Always),
            _ => connection(name).unwrap_or(Shape::Forward),
        }
    }

    /// Whether the planner sends a single-slot request of this shape on as it came,
    /// whatever its arguments.
    pub fn forwards_as_is(self) -> bool {
        matches!(
            self,
            Shape::Forward | Shape::Split(_) | Shape::ConnectionLocal(_) | Shape::Transaction
        )
    }

    /// Whether some arguments make this command block (see [`Shape::blocks`]).
    pub fn may_block(self) -> bool {
        matches!(self, Shape::Blocking(_))
    }

    /// Whether this invocation may hold its connection while waiting: BLPOP and the
    /// other `blocking` commands always, XREAD/XREADGROUP only with a `BLOCK` option,
    /// and WAIT / WAITAOF.
    pub fn blocks(self, args: &[Bytes]) -> bool {
        match self {
            Shape::Blocking(Blocks::Always) => true,
            Shape::Blocking(Blocks::WithBlockOption) => xread_has_block(args),
            _ => false,
        }
    }

    /// Whether the proxy runs this command on every master or answers it from all of them
    /// (KEYS, DBSIZE, FLUSHALL, INFO, SCRIPT LOAD...): such a command cannot join one
    /// node's MULTI block without acting on, or seeing, that node only. CONFIG GET is one
    /// master's answer: inside MULTI the transaction's node gives it.
    pub fn spans_masters(self) -> bool {
        match self {
            Shape::Emulated(local) => local != Emulated::ConfigGet,
            Shape::FanOut(_) | Shape::ScriptAdmin(_) => true,
            _ => false,
        }
    }

    /// Whether the client session's own checks act on this command before routing: the
    /// connection commands it answers, transactions and WAIT, subscriptions, and those
    /// that run alone (every command that may block, client scripts, SORT). The others it
    /// routes at once (`client::plain`).
    pub fn checked_by_session(self) -> bool {
        matches!(
            self,
            Shape::ConnectionLocal(_)
                | Shape::Transaction
                | Shape::Blocking(_)
                | Shape::Subscribe
                | Shape::Sort
                | Shape::Script(_)
        )
    }

    /// Whether, inside MULTI, the proxy answers this command itself at EXEC.
    pub fn answered_at_exec(self) -> bool {
        self == Shape::ConnectionLocal(Connection::AnsweredAtExec)
    }

    /// Whether this command is refused inside MULTI because the proxy answers it itself or
    /// it would change what the pinned backend connection is (protocol, user,
    /// subscriptions, CLUSTER, MONITOR and the other [`Shape::Refused`]).
    pub fn refused_in_multi(self) -> bool {
        match self {
            Shape::ConnectionLocal(connection) => {
                matches!(connection, Connection::NotInMulti | Connection::Hello)
            }
            Shape::Emulated(local) => local.is_cluster(),
            Shape::NodeCluster | Shape::Subscribe | Shape::Refused => true,
            _ => false,
        }
    }

    /// Whether a request of this shape switches the protocol of the session's backend
    /// connections (HELLO, RESET): the session runs it alone.
    pub fn may_switch_protocol(self) -> bool {
        matches!(
            self,
            Shape::ConnectionLocal(Connection::Hello | Connection::Reset)
        )
    }
}

impl Emulated {
    /// Whether this is a CLUSTER subcommand.
    pub fn is_cluster(self) -> bool {
        !matches!(
            self,
            Emulated::Info | Emulated::ConfigGet | Emulated::ReplicaOf
        )
    }
}

impl SplitKind {
    /// Arguments per key: a key, or a key and its value.
    pub fn stride(self) -> usize {
        match self {
            SplitKind::Mset => 2,
            SplitKind::Mget | SplitKind::Count => 1,
        }
    }
}

/// The shape of a command the planner treats specially by name, if `name` is one.
fn special(name: &str) -> Option<Shape> {
    use FanOut::*;
    Some(match name {
        "script|debug" | "monitor" | "sync" | "psync" | "replconf" => Shape::Refused,
        "sort" | "sort_ro" => Shape::Sort,
        "cluster|info" => Shape::Emulated(Emulated::ClusterInfo),
        "cluster|slots" => Shape::Emulated(Emulated::ClusterSlots),
        "cluster|shards" => Shape::Emulated(Emulated::ClusterShards),
        "cluster|nodes" => Shape::Emulated(Emulated::ClusterNodes),
        "cluster|myid" => Shape::Emulated(Emulated::ClusterMyId),
        "cluster|keyslot" => Shape::Emulated(Emulated::ClusterKeySlot),
        "cluster|countkeysinslot" | "cluster|getkeysinslot" | "cluster|help" => Shape::NodeCluster,
        name if name.starts_with("cluster") => Shape::Emulated(Emulated::ClusterOther),
        "info" => Shape::Emulated(Emulated::Info),
        "config|get" => Shape::Emulated(Emulated::ConfigGet),
        "replicaof" | "slaveof" => Shape::Emulated(Emulated::ReplicaOf),
        "keys" | "pubsub|shardchannels" => Shape::FanOut(Keys),
        "pubsub|shardnumsub" => Shape::FanOut(ShardNumSub),
        "scan" => Shape::FanOut(Scan),
        "dbsize" | "slowlog|len" | "latency|reset" => Shape::FanOut(Sum),
        "lastsave" => Shape::FanOut(Oldest),
        "latency|latest" => Shape::FanOut(LatencyLatest),
        "latency|history" => Shape::FanOut(LatencyHistory),
        "latency|histogram" => Shape::FanOut(LatencyHistogram),
        "memory|stats" => Shape::FanOut(MemoryStats),
        "slowlog|get" => Shape::FanOut(SlowlogGet),
        "randomkey" => Shape::FanOut(RandomKey),
        "flushdb" | "flushall" | "config|set" | "config|resetstat" | "function|delete"
        | "function|flush" | "function|restore" | "slowlog|reset" => Shape::FanOut(AllOk),
        "function|load" => Shape::FanOut(AllSame),
        "script|kill" | "function|kill" => Shape::FanOut(AnyOk),
        "script|load" => Shape::ScriptAdmin(ScriptAdmin::Load),
        "script|flush" => Shape::ScriptAdmin(ScriptAdmin::Flush),
        "script|exists" => Shape::ScriptAdmin(ScriptAdmin::Exists),
        "publish" | "pubsub|channels" | "pubsub|numsub" | "pubsub|numpat" => Shape::Channels,
        "spublish" => Shape::ShardPublish,
        "subscribe" | "psubscribe" | "ssubscribe" | "unsubscribe" | "punsubscribe"
        | "sunsubscribe" => Shape::Subscribe,
        "mget" => Shape::Split(SplitKind::Mget),
        "mset" => Shape::Split(SplitKind::Mset),
        "del" | "unlink" | "exists" | "touch" => Shape::Split(SplitKind::Count),
        "eval" | "eval_ro" => Shape::Script(ScriptRun::Eval),
        "evalsha" | "evalsha_ro" => Shape::Script(ScriptRun::EvalSha),
        "fcall" | "fcall_ro" => Shape::Script(ScriptRun::Fcall),
        _ => return None,
    })
}

/// Whether the client session answers some invocations of `name` itself although its
/// shape says how routing carries out the others: `CONFIG SET/GET requirepass` (the
/// proxy's `default` user, `client::local::acl`), and MONITOR (the proxy's own traffic;
/// refused by routing, which only a MONITOR inside MULTI reaches).
pub(super) fn answered_by_session_too(name: &str) -> bool {
    matches!(name, "config|get" | "config|set" | "monitor")
}

/// The shape of a connection or transaction command the session handles, if `name` is one.
fn connection(name: &str) -> Option<Shape> {
    let container = name.split('|').next().unwrap_or(name);
    let kind = match (container, name) {
        ("multi" | "exec" | "discard" | "watch" | "unwatch", _) => return Some(Shape::Transaction),
        (_, "client|reply" | "client|kill" | "client|unblock" | "auth") => Connection::NotInMulti,
        (_, "acl|whoami") | ("select" | "readonly" | "readwrite" | "client", _) => {
            Connection::AnsweredAtExec
        }
        (_, "hello") => Connection::Hello,
        (_, "reset") => Connection::Reset,
        ("ping" | "echo" | "quit" | "asking" | "acl", _) => Connection::Queued,
        _ => return None,
    };
    Some(Shape::ConnectionLocal(kind))
}

/// Whether the options before `STREAMS` include `BLOCK`.
fn xread_has_block(args: &[Bytes]) -> bool {
    let mut i = 1;
    while i < args.len() {
        let arg = &args[i];
        if arg.eq_ignore_ascii_case(b"block") {
            return true;
        } else if arg.eq_ignore_ascii_case(b"count") {
            i += 1;
        } else if arg.eq_ignore_ascii_case(b"group") {
            i += 2;
        } else if !arg.eq_ignore_ascii_case(b"noack") {
            // STREAMS or a syntax error: no option after this point.
            return false;
        }
        i += 1;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::CommandTable;

    /// The client session's own name lists these predicates stand for, as the session
    /// kept them (a subcommand by its container's name where a container is listed).
    const CHECKED_BY_SESSION: &[&str] = &[
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
        "reset",
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
    ];
    const ANSWERED_AT_EXEC: &[&str] = &["select", "client", "readonly", "readwrite", "acl|whoami"];
    const CLIENT_NOT_QUEUED: &[&str] = &["client|reply", "client|kill", "client|unblock"];
    const LOCAL_ONLY: &[&str] = &[
        "hello",
        "auth",
        "client",
        "cluster",
        "subscribe",
        "psubscribe",
        "ssubscribe",
        "unsubscribe",
        "punsubscribe",
        "sunsubscribe",
        "monitor",
    ];
    const CHANGES_ITS_CONNECTION: &[&str] =
        &["script|debug", "monitor", "sync", "psync", "replconf"];

    fn shape(table: &CommandTable, name: &str) -> Shape {
        table.get(name).expect(name).shape
    }

    fn args(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|word| Bytes::copy_from_slice(word.as_bytes()))
            .collect()
    }

    #[test]
    fn every_command_of_redis_7_has_the_shape_its_lists_gave_it() {
        let table = CommandTable::builtin();
        for spec in table.iter() {
            let name = spec.name.as_str();
            let container = name.split('|').next().unwrap_or(name);
            let may_block = matches!(name, "xread" | "xreadgroup" | "wait" | "waitaof")
                || spec.flags.has(CommandFlags::BLOCKING);
            let shape = spec.shape;
            assert_eq!(shape.may_block(), may_block, "{name}");
            assert_eq!(
                shape.checked_by_session(),
                may_block || CHECKED_BY_SESSION.contains(&container),
                "{name}"
            );
            let at_exec = (ANSWERED_AT_EXEC.contains(&container)
                || ANSWERED_AT_EXEC.contains(&name))
                && !CLIENT_NOT_QUEUED.contains(&name);
            assert_eq!(shape.answered_at_exec(), at_exec, "{name}");
            let refused = !at_exec
                && (LOCAL_ONLY.contains(&container) || CHANGES_ITS_CONNECTION.contains(&name));
            assert_eq!(shape.refused_in_multi(), refused, "{name}");
            assert_eq!(
                shape == Shape::Refused,
                CHANGES_ITS_CONNECTION.contains(&name),
                "{name}"
            );
            assert_eq!(
                shape.may_switch_protocol(),
                matches!(name, "hello" | "reset"),
                "{name}"
            );
        }
    }

    #[test]
    fn special_commands_have_their_shape() {
        let table = CommandTable::builtin();
        for (name, expected) in [
            ("get", Shape::Forward),
            ("mget", Shape::Split(SplitKind::Mget)),
            ("unlink", Shape::Split(SplitKind::Count)),
            ("blpop", Shape::Blocking(Blocks::Always)),
            ("wait", Shape::Blocking(Blocks::Always)),
            ("xreadgroup", Shape::Blocking(Blocks::WithBlockOption)),
            ("cluster|nodes", Shape::Emulated(Emulated::ClusterNodes)),
            ("cluster|failover", Shape::Emulated(Emulated::ClusterOther)),
            ("cluster|countkeysinslot", Shape::NodeCluster),
            ("config|get", Shape::Emulated(Emulated::ConfigGet)),
            ("pubsub|shardchannels", Shape::FanOut(FanOut::Keys)),
            ("flushall", Shape::FanOut(FanOut::AllOk)),
            ("script|kill", Shape::FanOut(FanOut::AnyOk)),
            ("script|load", Shape::ScriptAdmin(ScriptAdmin::Load)),
            ("evalsha_ro", Shape::Script(ScriptRun::EvalSha)),
            ("sort_ro", Shape::Sort),
            ("pubsub|numpat", Shape::Channels),
            ("spublish", Shape::ShardPublish),
            ("ssubscribe", Shape::Subscribe),
            (
                "client|list",
                Shape::ConnectionLocal(Connection::AnsweredAtExec),
            ),
            (
                "client|kill",
                Shape::ConnectionLocal(Connection::NotInMulti),
            ),
            ("acl|setuser", Shape::ConnectionLocal(Connection::Queued)),
            ("hello", Shape::ConnectionLocal(Connection::Hello)),
            ("watch", Shape::Transaction),
            ("psync", Shape::Refused),
        ] {
            assert_eq!(shape(&table, name), expected, "{name}");
        }
    }

    #[test]
    fn only_what_acts_on_one_node_spans_no_masters() {
        let table = CommandTable::builtin();
        for name in [
            "info",
            "cluster|info",
            "keys",
            "dbsize",
            "flushall",
            "script|exists",
        ] {
            assert!(shape(&table, name).spans_masters(), "{name}");
        }
        for name in [
            "config|get",
            "get",
            "eval",
            "cluster|countkeysinslot",
            "publish",
        ] {
            assert!(!shape(&table, name).spans_masters(), "{name}");
        }
    }

    #[test]
    fn only_plain_keyed_shapes_forward_as_is() {
        let table = CommandTable::builtin();
        for name in ["get", "set", "mget", "del", "ping", "multi", "client|list"] {
            assert!(shape(&table, name).forwards_as_is(), "{name}");
        }
        for name in [
            "eval",
            "blpop",
            "xread",
            "wait",
            "keys",
            "scan",
            "info",
            "sort",
            "spublish",
            "subscribe",
            "monitor",
            "publish",
            "cluster|getkeysinslot",
            "script|load",
        ] {
            assert!(!shape(&table, name).forwards_as_is(), "{name}");
        }
    }

    #[test]
    fn cross_slot_classes_are_given_with_the_table() {
        let table = CommandTable::builtin();
        for (name, class) in [
            ("sunion", Some(CrossSlot::Read)),
            ("zunionstore", Some(CrossSlot::Store)),
            ("copy", Some(CrossSlot::Store)),
            ("zrangestore", Some(CrossSlot::Store)),
            ("georadius", Some(CrossSlot::Store)),
            ("rename", Some(CrossSlot::Move)),
            ("rpoplpush", Some(CrossSlot::Move)),
            ("brpoplpush", Some(CrossSlot::Move)),
            ("msetnx", Some(CrossSlot::AllOrNothing)),
            ("blpop", Some(CrossSlot::Blocking)),
            ("bzmpop", Some(CrossSlot::Blocking)),
            ("lmpop", Some(CrossSlot::Pop)),
            ("zmpop", Some(CrossSlot::Pop)),
            ("blmove", Some(CrossSlot::Move)),
            ("xread", Some(CrossSlot::Streams)),
            ("xreadgroup", None),
            ("get", None),
        ] {
            assert_eq!(table.get(name).expect(name).cross_slot, class, "{name}");
        }
    }

    #[test]
    fn xread_blocks_only_with_a_block_option() {
        let xread = Shape::Blocking(Blocks::WithBlockOption);
        assert!(xread.blocks(&args("XREAD COUNT 2 BLOCK 0 STREAMS s 0")));
        assert!(xread.blocks(&args("XREADGROUP GROUP g c NOACK BLOCK 10 STREAMS s >")));
        assert!(!xread.blocks(&args("XREAD COUNT 2 STREAMS s 0")));
        assert!(!xread.blocks(&args("XREAD STREAMS block 0")));
        assert!(Shape::Blocking(Blocks::Always).blocks(&args("BLPOP l 0")));
        assert!(!Shape::Forward.blocks(&args("GET k")));
    }
}
