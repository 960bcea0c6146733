//! One client's transaction state: MULTI/EXEC/DISCARD/WATCH/UNWATCH as a single Redis
//! behaves, carried out through the cluster, and the slot of the client's last write
//! (so WAIT goes to the master that took it).
//!
//! Invariants:
//! - Between MULTI and EXEC/DISCARD nothing reaches a backend: commands are checked
//!   (existence, arity, `no_multi`, slot) and answered `+QUEUED` here, and any refusal
//!   flags the transaction so EXEC answers `-EXECABORT`, as Redis does. Commands the
//!   proxy runs on every master (KEYS, DBSIZE, FLUSHALL, INFO...), or in steps across
//!   masters (SORT with BY/GET patterns), are refused: inside one node's MULTI they would
//!   act on, or see, that node only.
//! - Commands about the connection that the proxy answers itself (SELECT, CLIENT SETNAME
//!   and most of CLIENT, READONLY, ACL WHOAMI) are queued here, not in the backend block:
//!   once the block's EXEC reply is an array, the session answers them in queue order and
//!   puts each answer in its place ([`splice_local_answers`]). They touch only the
//!   connection's own state, which no other client sees inside the EXEC, so answering them
//!   after the block is as atomic as Redis; an aborted or failed EXEC runs none of them.
//! - Every key of a transaction (its WATCH included) hashes to one slot, unless
//!   `cross_slot_transactions: split` lets each slot run its own MULTI/EXEC.
//! - WATCH pins a dedicated backend connection per watched slot; the slot's EXEC goes on
//!   that connection, so the server's own WATCH check applies. EXEC, DISCARD, UNWATCH and
//!   RESET drop every pin, which closes the connections and with them the server-side
//!   watches. A pinned connection is never reopened: once it is lost, EXEC answers null.
//!   A split transaction after WATCH checks every watching connection before any slot
//!   runs (see `watch` and `upstream::watch_check`); a WATCH and transaction in one slot
//!   take the path of a single Redis, unchanged.
//! - Queued commands pass the command policy and the user's ACL (the session's access check,
//!   `Proxy::admit`) at queue time; a refusal answers its error and flags the transaction.
//! - Under a layout, a queued command (and a WATCH) is rewritten to cluster names when it
//!   is queued, and slot checks look at the rewritten keys; writes of index-backed keys
//!   run wrapped in the upkeep script inside the block (the script is loaded on the
//!   block's connection first), and EXEC's reply elements are reverse-rewritten as the
//!   single command's reply would be.
//! - A command queued for a master that may be busy with a client's script waits for
//!   that master's answer to a probe, and gets its `-BUSY` (flagging the transaction)
//!   as on Redis; so does the EXEC of a flagged transaction (see `busy`).
//! - EXEC and WATCH are sequence points: the session runs them only once every earlier
//!   reply is in, and runs nothing later until they are answered, because they use a
//!   different backend connection than the client's other commands.

mod admit;
mod busy;
mod exec_reply;
mod watch;

use exec_reply::show_in_database;
pub use exec_reply::splice_local_answers;

use std::sync::Arc;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use smallvec::SmallVec;

use crate::command::KeyList;
use crate::dispatch::layout::ReplyKeys;
use crate::dispatch::{Moves, Proxy, Target, WatchPin};
use crate::protocol::{FoldedName, Proto, Request};
use crate::reply;
use crate::rewrite::Forward;
use crate::route::key_slot;
use crate::upstream::block::{self, Queued, ReusableConns};

use super::step::Step;
use watch::Watch;

const OK: &[u8] = b"+OK\r\n";
const QUEUED: &[u8] = b"+QUEUED\r\n";
const EXECABORT: &str = reply::transaction::EXECABORT;
const EXEC_ARITY_ABORT: &str = reply::transaction::EXEC_ARITY_ABORT;
const NESTED: &str = reply::transaction::NESTED;
const EXEC_WITHOUT_MULTI: &str = reply::transaction::EXEC_WITHOUT_MULTI;
const DISCARD_WITHOUT_MULTI: &str = reply::transaction::DISCARD_WITHOUT_MULTI;
const WATCH_IN_MULTI: &str = reply::transaction::WATCH_IN_MULTI;
const NOT_IN_MULTI: &str = reply::transaction::NOT_IN_MULTI;

/// Queued commands the proxy answers itself, with their places among all queued commands.
pub type LocalCommands = Vec<(usize, Request)>;

/// What [`Transaction::admit`] accepted.
enum Admitted {
    /// Runs inside the backend block; `writes`: it writes or may replicate (see
    /// `Queue::writes`).
    Block { queued: Queued, writes: bool },
    /// Answered by the proxy at EXEC.
    Local,
}

/// The state between MULTI and EXEC.
#[derive(Default)]
struct Queue {
    commands: Vec<Queued>,
    locals: LocalCommands,
    /// The transaction's slot and the key that set it (for error messages).
    slot: Option<(u16, Bytes)>,
    /// Whether a command was refused: EXEC will answer EXECABORT.
    failed: bool,
    /// Whether a command was refused `-BUSY` (known once its answer is in).
    busy: busy::BusyRefused,
    /// Whether a queued command writes or may replicate (CLIENT PAUSE WRITE holds EXEC).
    writes: bool,
    /// In a database other than 0: the block commands (by their place among them) whose
    /// replies name keys, shown without the database's prefix in EXEC's reply.
    shown: Vec<(usize, ReplyKeys)>,
    /// During a live migration: the queued commands' keys to move before the block runs.
    moves: Option<Moves>,
}

/// One client's transaction state.
#[derive(Default)]
pub struct Transaction {
    // Boxed: every connected client's session holds a `Transaction`, few use MULTI or WATCH
    // (see `client::session`'s test of the idle session's size).
    multi: Option<Box<Queue>>,
    watch: Option<Box<Watch>>,
    /// Dedicated connections kept for this client's next transactions.
    reusable: ReusableConns,
    last_write_slot: Option<u16>,
}

impl Transaction {
    /// Whether [`Transaction::handle`] answers a command of this name itself outside MULTI
    /// (SLOTBRIDGE EXPLAIN's "transaction" shape).
    pub fn handles(name: &[u8]) -> bool {
        [&b"multi"[..], b"exec", b"discard", b"watch", b"unwatch"]
            .iter()
            .any(|handled| name.eq_ignore_ascii_case(handled))
    }

    /// Whether the request must wait until every earlier reply of the client is in (and
    /// later requests until its own reply is in). Cheap: looks at the name only.
    pub fn is_sequence_point(name: &FoldedName) -> bool {
        matches!(name.as_bytes(), b"exec" | b"watch" | b"wait")
    }

    /// Whether the client is inside MULTI.
    pub fn in_multi(&self) -> bool {
        self.multi.is_some()
    }

    /// Whether EXEC will answer EXECABORT (a queued command was refused).
    pub fn aborted(&self) -> bool {
        self.multi.as_ref().is_some_and(|queue| queue.failed)
    }

    /// Whether the block EXEC would run writes or may replicate.
    pub fn queued_writes(&self) -> bool {
        self.multi.as_ref().is_some_and(|queue| queue.writes)
    }

    /// Leaves MULTI and drops every WATCH (RESET, and a client that goes away).
    pub fn reset(&mut self) {
        self.multi = None;
        self.watch = None;
        self.last_write_slot = None;
    }

    /// Whether [`Transaction::handle`] queues a request of this name and argument count:
    /// inside MULTI, everything but the transaction's own commands, RESET and QUIT. The
    /// session's access check gives such a request the full policy and ACL check (a
    /// refusal is noted with [`Transaction::refused`], as Redis fails the EXEC).
    pub fn queues(&self, name: &FoldedName, argc: usize) -> bool {
        self.multi.is_some()
            && match name.as_bytes() {
                b"exec" | b"multi" | b"discard" | b"watch" | b"reset" | b"quit" => false,
                b"unwatch" => argc == 1,
                _ => true,
            }
    }

    /// Notes a refusal of a command queued inside MULTI: EXEC will answer EXECABORT.
    pub fn refused(&mut self) {
        self.flag();
    }

    /// Handles `request` if it concerns the transaction; [`Step::Next`] otherwise. The
    /// session checked the policy and ACL of what it queues and of WATCH already.
    pub fn handle(
        &mut self,
        proxy: &Arc<Proxy>,
        proto: Proto,
        db: u32,
        request: &Request,
        name: &FoldedName,
    ) -> Step {
        let args = &request.args;
        let name = name.as_bytes();
        let argc = args.len();
        match (name, self.multi.is_some()) {
            // Redis aborts the transaction when it rejects the EXEC itself (and, outside
            // MULTI, still answers EXECABORT and forgets the WATCHed keys).
            (b"exec", _) if argc != 1 => {
                self.multi = None;
                self.watch = None;
                Step::Reply(reply::error(EXEC_ARITY_ABORT))
            }
            (b"multi" | b"exec" | b"discard" | b"unwatch", _) if argc != 1 => {
                self.flag();
                Step::Reply(reply::wrong_arity(&String::from_utf8_lossy(name)))
            }
            (b"watch", _) if argc < 2 => {
                self.flag();
                Step::Reply(reply::wrong_arity("watch"))
            }
            (b"multi", true) => Step::Reply(reply::error(NESTED)),
            (b"multi", false) => {
                self.multi = Some(Box::default());
                Step::Reply(Bytes::from_static(OK))
            }
            (b"exec", true) => self.exec(proxy, proto, db),
            (b"exec", false) => Step::Reply(reply::error(EXEC_WITHOUT_MULTI)),
            (b"discard", true) => {
                self.multi = None;
                self.watch = None;
                Step::Reply(Bytes::from_static(OK))
            }
            (b"discard", false) => Step::Reply(reply::error(DISCARD_WITHOUT_MULTI)),
            (b"watch", true) => Step::Reply(reply::error(WATCH_IN_MULTI)),
            (b"watch", false) => self.watch(proxy, proto, request),
            (b"unwatch", false) => {
                self.watch = None;
                Step::Reply(Bytes::from_static(OK))
            }
            (b"reset", _) => {
                self.reset();
                Step::Next
            }
            (b"quit", _) => Step::Next,
            (_, true) => self.queue(proxy, proto, db, request),
            (b"wait", false) => match self.last_write_slot {
                Some(slot) => {
                    let proxy = proxy.clone();
                    let request = request.clone();
                    Step::Alone(
                        async move { proxy.wait_for_replicas(slot, request, proto).await }.boxed(),
                    )
                }
                None => Step::Next,
            },
            // Writes are noted after routing (see `note_write`), which knows the command.
            (_, false) => Step::Next,
        }
    }

    fn flag(&mut self) {
        if let Some(queue) = &mut self.multi {
            queue.failed = true;
        }
    }

    /// Remembers the slot of a write sent straight to its master, for WAIT.
    pub fn note_write_slot(&mut self, slot: u16) {
        self.last_write_slot = Some(slot);
    }

    /// Remembers the slot of a write the planner runs (`command`: its table index), for WAIT.
    pub fn note_write(&mut self, proxy: &Proxy, command: Option<usize>, args: &[Bytes]) {
        let Some(spec) = command.and_then(|command| proxy.commands.spec(command)) else {
            return;
        };
        if !spec.is_write() || !spec.arity_ok(args.len()) {
            return;
        }
        let mut keys: KeyList = SmallVec::new();
        spec.keys(args, &mut keys);
        if let Some(first) = keys.first() {
            let key = &args[first.index];
            // Under a layout the write lands in the slot of the key's cluster name.
            let cluster_key = match proxy.layout.as_deref().map(|a| a.layout.forward(key)) {
                Some(Forward::Rewritten(rewritten)) => rewritten.key,
                _ => key.clone(),
            };
            self.last_write_slot = Some(key_slot(&cluster_key));
        }
    }

    /// Checks one command at queue time, as Redis does, and queues it.
    fn queue(&mut self, proxy: &Proxy, proto: Proto, db: u32, request: &Request) -> Step {
        let admitted = match self.admit(proxy, proto, request) {
            Ok(admitted) => admitted,
            Err(error) => {
                self.flag();
                return Step::Reply(error);
            }
        };
        let Some(queue) = &mut self.multi else {
            return Step::Reply(Bytes::from_static(QUEUED));
        };
        let slot = match admitted {
            Admitted::Block { queued, writes } => {
                queue.writes |= writes;
                let slot = queued.slot;
                if db != 0 {
                    let spec = proxy.commands.lookup(&request.args);
                    if let Some(keys) = spec.and_then(|spec| ReplyKeys::of(&spec.name)) {
                        queue.shown.push((queue.commands.len(), keys));
                    }
                }
                queue.commands.push(queued);
                // During a live migration: the keys this block must move first.
                if proxy.migration.is_some() {
                    let spec = proxy.commands.lookup(&request.args);
                    if let Some(moves) = proxy.moves_of(spec, &request.args) {
                        match &mut queue.moves {
                            Some(queued) => queued.extend(moves),
                            None => queue.moves = Some(moves),
                        }
                    }
                }
                slot
            }
            Admitted::Local => {
                let place = queue.commands.len() + queue.locals.len();
                queue.locals.push((place, request.clone()));
                None
            }
        };
        // The transaction's slot: its first key's, or the watched one.
        let slot = slot
            .or(queue.slot.as_ref().map(|(slot, _)| *slot))
            .or(self.watch.as_ref().and_then(|watch| watch.first_slot()));
        match busy::queued_or_busy(proxy, request, slot, &queue.busy) {
            Some(answer) => Step::Alone(answer),
            None => Step::Reply(Bytes::from_static(QUEUED)),
        }
    }

    fn exec(&mut self, proxy: &Arc<Proxy>, proto: Proto, db: u32) -> Step {
        let queue = self.multi.take().unwrap_or_default();
        // EXEC always ends the WATCH, whatever its outcome.
        let watch = self.watch.take();
        if queue.failed || queue.busy.happened() {
            let slot = (queue.slot.as_ref().map(|(slot, _)| *slot))
                .or(watch.as_deref().and_then(Watch::first_slot));
            return match busy::exec_abort(proxy, slot) {
                Some(abort) => Step::Alone(abort),
                None => Step::Reply(reply::error(EXECABORT)),
            };
        }
        let Queue {
            commands,
            locals,
            shown,
            moves,
            ..
        } = *queue;
        let slots = command_slots(&commands);
        let run = match &watch {
            Some(watch) if watch.spans_slots_with(&slots) => {
                // Only under `split` (see `watch`): checked on every slot, then split.
                let Some(watched) = watch.watched_slots() else {
                    return Step::Reply(crate::dispatch::watch_failed(proto));
                };
                crate::metrics::split_transaction();
                let proxy = proxy.clone();
                async move {
                    let layout = proxy.layout.as_deref();
                    block::run_split_watched(
                        &proxy.upstream,
                        layout,
                        commands,
                        slots,
                        watched,
                        proto,
                    )
                    .await
                }
                .boxed()
            }
            Some(watch) => match watch.single_pin() {
                Ok(pin) => self.run_block(proxy, proto, commands, slots, pin, watch.first_slot()),
                Err(()) => return Step::Reply(crate::dispatch::watch_failed(proto)),
            },
            None => self.run_block(proxy, proto, commands, slots, None, None),
        };
        let run = match shown.is_empty() {
            true => run,
            false => {
                let databases = proxy.config.databases;
                run.map(move |reply| show_in_database(reply, &shown, db, databases, proto))
                    .boxed()
            }
        };
        // The block's keys are moved before it runs (see `dispatch::live`).
        let run = match moves {
            Some(moves) => moves.before(run).boxed(),
            None => run,
        };
        if locals.is_empty() {
            Step::Alone(run)
        } else {
            Step::Exec { run, locals }
        }
    }

    /// The future of EXEC's backend block: its reply, with one element per command that
    /// ran inside it. `slots`: the commands' slots; `pin` and `watched_slot`: a WATCH of
    /// one slot, which `slots` do not leave.
    fn run_block(
        &mut self,
        proxy: &Arc<Proxy>,
        proto: Proto,
        commands: Vec<Queued>,
        slots: SmallVec<[u16; 4]>,
        pin: Option<WatchPin>,
        watched_slot: Option<u16>,
    ) -> BoxFuture<'static, Bytes> {
        if commands.is_empty() && pin.is_none() {
            return futures_util::future::ready(Bytes::from_static(b"*0\r\n")).boxed();
        }
        let proxy = proxy.clone();
        if slots.len() <= 1 {
            let target = match (slots.first(), watched_slot) {
                (Some(&slot), _) => Target::Slot(slot),
                (None, Some(slot)) => Target::Slot(slot),
                (None, None) => Target::AnyMaster,
            };
            let reusable = if pin.is_none() {
                self.reusable.get(&proxy.upstream, target, proto)
            } else {
                None
            };
            return async move {
                let layout = proxy.layout.as_deref();
                block::run_single(
                    &proxy.upstream,
                    layout,
                    target,
                    commands,
                    pin,
                    reusable,
                    proto,
                )
                .await
            }
            .boxed();
        }
        crate::metrics::split_transaction();
        async move {
            let layout = proxy.layout.as_deref();
            block::run_split(&proxy.upstream, layout, commands, slots, Vec::new(), proto).await
        }
        .boxed()
    }
}

/// The distinct slots of `commands`, in queue order.
fn command_slots(commands: &[Queued]) -> SmallVec<[u16; 4]> {
    let mut slots: SmallVec<[u16; 4]> = SmallVec::new();
    for slot in commands.iter().filter_map(|c| c.slot) {
        if !slots.contains(&slot) {
            slots.push(slot);
        }
    }
    slots
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::encode;

    fn request(word: &str) -> Request {
        Request {
            raw: Bytes::new(),
            args: SmallVec::from_elem(Bytes::copy_from_slice(word.as_bytes()), 1),
        }
    }

    fn answer_with_name(request: &Request) -> Bytes {
        encode::bulk_frame(&request.args[0])
    }

    #[test]
    fn local_answers_go_to_their_places_in_queue_order() {
        let block = Bytes::from_static(b"*2\r\n:1\r\n:2\r\n");
        let locals = vec![
            (0, request("first")),
            (2, request("middle")),
            (4, request("last")),
        ];
        let mut asked = Vec::new();
        let spliced = splice_local_answers(block, locals, |request| {
            asked.push(request.args[0].clone());
            answer_with_name(request)
        });
        assert_eq!(
            &spliced[..],
            b"*5\r\n$5\r\nfirst\r\n:1\r\n$6\r\nmiddle\r\n:2\r\n$4\r\nlast\r\n"
        );
        assert_eq!(asked, ["first", "middle", "last"]);
    }

    #[test]
    fn a_block_reply_that_is_no_array_runs_no_local_command() {
        for reply in [
            &b"*-1\r\n"[..],
            b"_\r\n",
            b"-EXECABORT Transaction discarded\r\n",
        ] {
            let spliced = splice_local_answers(
                Bytes::copy_from_slice(reply),
                vec![(0, request("setname"))],
                |_| panic!("a local command ran after {reply:?}"),
            );
            assert_eq!(&spliced[..], reply);
        }
    }
}
