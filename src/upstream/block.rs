//! Transaction blocks on the nodes: running a transaction's queued commands at EXEC and
//! assembling the reply the client sees: one MULTI/EXEC block on one node, or (`cross_slot_transactions: split`) one
//! block per slot with the replies put back in command order.
//!
//! Invariants: EXEC's reply has one element per queued command, in queue order; the
//! index refreshes a layout adds inside a block are dropped from it, and key names in
//! it are reverse-rewritten as the single command's reply would be. The layout itself is
//! the dispatcher's: it comes in as a [`BlockLayout`].

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::future::join_all;
use smallvec::SmallVec;

use crate::backend::NodeConn;
use crate::route::NodeAddr;

use super::watch_check::{check_watches, WatchCheck, WatchedSlot};
use super::{watch_failed, Target, Upstream, WatchPin};
use crate::protocol::{encode, Proto, ReplyView};
use crate::reply;

/// Dedicated connections a client keeps for its next transactions, by node and protocol
/// (a block that is not pinned by WATCH runs on one, never on a shared connection).
#[derive(Default)]
pub struct ReusableConns(Vec<(NodeAddr, Proto, NodeConn)>);

impl ReusableConns {
    /// The kept connection to the node serving `target`, made on first use.
    pub fn get(&mut self, upstream: &Upstream, target: Target, proto: Proto) -> Option<NodeConn> {
        let addr = upstream.node_for(target)?;
        if let Some((_, _, conn)) = self.0.iter().find(|(a, p, _)| *a == addr && *p == proto) {
            return Some(conn.clone());
        }
        let conn = upstream.topology.dedicated(&addr, proto);
        self.0.push((addr, proto, conn.clone()));
        Some(conn)
    }
}

/// What a block needs from the key layout in force: the script its index upkeep calls
/// (loaded on the block's node first) and the reverse rewrite of a command's reply.
pub trait BlockLayout: Sync {
    /// The `SCRIPT LOAD` request of the layout's upkeep script.
    fn script_load_request(&self) -> Bytes;
    /// The reply of command `name` with its key names shown as the client wrote them;
    /// `None` when it names a key the client cannot see.
    fn reverse_reply(&self, name: &str, reply: Bytes) -> Option<Bytes>;
}

/// A command accepted between MULTI and EXEC.
pub struct Queued {
    /// What goes inside the backend MULTI; only the first request's reply is the
    /// command's (the others refresh index entries under a layout).
    pub requests: SmallVec<[Bytes; 2]>,
    pub slot: Option<u16>,
    /// The command's name when a layout is in force, for the reverse rewrite of its reply.
    pub reverse: Option<String>,
    /// Whether the block needs the layout's upkeep script on its node.
    pub needs_script: bool,
}

/// A transaction on one slot (or none): one MULTI/EXEC block on `target`'s master, on
/// the WATCH's pinned connection when there is one.
pub async fn run_single(
    upstream: &Upstream,
    layout: Option<&impl BlockLayout>,
    target: Target,
    commands: Vec<Queued>,
    pin: Option<WatchPin>,
    reusable: Option<NodeConn>,
    proto: Proto,
) -> Bytes {
    let block = Block::of(commands, layout);
    let reply = upstream
        .exec_block(
            target,
            &block.prelude,
            &block.requests,
            pin,
            reusable,
            proto,
        )
        .await;
    match block.client_elements(layout, &reply, proto) {
        Some(elements) => encode::array_frame(elements.len(), &elements),
        None => reply,
    }
}

/// A transaction spanning slots: one MULTI/EXEC per slot (keyless commands go with the
/// first slot), run at once, and their replies put back in command order. A slot whose
/// block failed as a whole (`-EXECABORT`, a lost connection) shows that error in the
/// place of each of its commands. `pins`: the connections holding a WATCH, by slot (a
/// slot's block runs on its pin); pins of slots without commands are released when all
/// blocks are in. A slot whose master aborted its block on a watched key shows
/// [`reply::transaction::WATCHED_PART_ABORTED`] in its places; when every slot's block
/// aborted so, nothing ran and EXEC answers null, as Redis does.
pub async fn run_split(
    upstream: &Upstream,
    layout: Option<&impl BlockLayout>,
    commands: Vec<Queued>,
    slots: SmallVec<[u16; 4]>,
    mut pins: Vec<(u16, WatchPin)>,
    proto: Proto,
) -> Bytes {
    let total = commands.len();
    let mut groups: Vec<(Vec<usize>, Vec<Queued>)> = Vec::with_capacity(slots.len());
    groups.resize_with(slots.len(), Default::default);
    for (index, command) in commands.into_iter().enumerate() {
        let group = command
            .slot
            .and_then(|slot| slots.iter().position(|&s| s == slot))
            .unwrap_or(0);
        groups[group].0.push(index);
        groups[group].1.push(command);
    }
    let runs = groups
        .into_iter()
        .zip(slots.iter())
        .map(|((indices, queued), &slot)| {
            let pin = pins
                .iter()
                .position(|(s, _)| *s == slot)
                .map(|at| pins.swap_remove(at).1);
            async move {
                let watched = pin.is_some();
                let block = Block::of(queued, layout);
                let reply = upstream
                    .exec_block(
                        Target::Slot(slot),
                        &block.prelude,
                        &block.requests,
                        pin,
                        None,
                        proto,
                    )
                    .await;
                let elements = block.client_elements(layout, &reply, proto);
                let aborted = watched && reply == watch_failed(proto);
                SlotOutcome {
                    indices,
                    elements,
                    reply,
                    aborted,
                }
            }
        })
        .collect::<Vec<_>>();
    let outcomes = join_all(runs).await;
    drop(pins);
    if !outcomes.is_empty() && outcomes.iter().all(|outcome| outcome.aborted) {
        return watch_failed(proto);
    }
    if outcomes.iter().any(|outcome| outcome.aborted) {
        crate::metrics::split_transaction_partly_applied();
    }
    place_in_command_order(total, outcomes)
}

/// What one slot's block of a split transaction came to.
struct SlotOutcome {
    /// The places of the slot's commands among all queued commands.
    indices: Vec<usize>,
    /// The commands' replies, when the block ran.
    elements: Option<Vec<Bytes>>,
    /// EXEC's reply on the slot's master.
    reply: Bytes,
    /// The master aborted the block: a key the slot watched changed.
    aborted: bool,
}

/// EXEC's reply of a split transaction: every slot's replies in their places.
fn place_in_command_order(total: usize, outcomes: Vec<SlotOutcome>) -> Bytes {
    let mut placed: Vec<Option<Bytes>> = vec![None; total];
    for outcome in outcomes {
        match outcome.elements {
            Some(elements) => {
                for (&index, element) in outcome.indices.iter().zip(elements) {
                    placed[index] = Some(element);
                }
            }
            None => {
                let error = if outcome.aborted {
                    reply::error(reply::transaction::WATCHED_PART_ABORTED)
                } else if outcome.reply.first() == Some(&b'-') {
                    outcome.reply
                } else {
                    reply::error(reply::transaction::PART_DID_NOT_RUN)
                };
                for &index in &outcome.indices {
                    placed[index] = Some(error.clone());
                }
            }
        }
    }
    let mut out = BytesMut::new();
    encode::array_header(&mut out, total);
    for element in placed {
        match element {
            Some(element) => out.put_slice(&element),
            None => out.put_slice(&reply::error(reply::text::NO_REPLY)),
        }
    }
    out.freeze()
}

/// A split transaction after a WATCH spanning slots (see [`super::watch_check`]): every
/// watching connection is checked first, and a failed check answers null with nothing
/// run; then [`run_split`] runs each slot's block on its watching connection, so its
/// master still checks that slot's watched keys atomically with its commands. Keyless
/// commands of a transaction without keyed ones run with the first watched slot.
pub async fn run_split_watched(
    upstream: &Upstream,
    layout: Option<&impl BlockLayout>,
    commands: Vec<Queued>,
    mut slots: SmallVec<[u16; 4]>,
    watched: Vec<WatchedSlot>,
    proto: Proto,
) -> Bytes {
    match check_watches(&watched).await {
        WatchCheck::Clean => {}
        WatchCheck::Failed => return watch_failed(proto),
        WatchCheck::Unchecked(error) => return error,
    }
    if commands.is_empty() {
        // Redis's EXEC of an empty transaction whose watched keys did not change.
        return Bytes::from_static(b"*0\r\n");
    }
    if slots.is_empty() {
        slots.extend(watched.first().map(|part| part.slot));
    }
    let pins = watched
        .into_iter()
        .map(|part| (part.slot, part.pin))
        .collect();
    run_split(upstream, layout, commands, slots, pins, proto).await
}

/// The backend side of queued commands: what runs inside the MULTI block and before it.
struct Block {
    /// Sent before MULTI on the block's connection (the layout's upkeep script).
    prelude: Vec<Bytes>,
    /// Every request inside the block, in order.
    requests: Vec<Bytes>,
    /// Per queued command: its number of backend replies, and its name when its reply
    /// must be reverse-rewritten.
    shapes: Vec<(usize, Option<String>)>,
}

impl Block {
    fn of(commands: Vec<Queued>, layout: Option<&impl BlockLayout>) -> Block {
        let mut block = Block {
            prelude: Vec::new(),
            requests: Vec::with_capacity(commands.len()),
            shapes: Vec::with_capacity(commands.len()),
        };
        if let Some(layout) = layout.filter(|_| commands.iter().any(|c| c.needs_script)) {
            block.prelude.push(layout.script_load_request());
        }
        for command in commands {
            block.shapes.push((command.requests.len(), command.reverse));
            block.requests.extend(command.requests);
        }
        block
    }

    /// EXEC's elements as the client must see them: one per queued command (index
    /// refreshes dropped), key names reverse-rewritten. `None` when there is nothing to
    /// change, or `reply` is not the array of the block's replies (a failed WATCH, an
    /// error): then `reply` goes to the client as it is.
    fn client_elements(
        &self,
        layout: Option<&impl BlockLayout>,
        reply: &Bytes,
        proto: Proto,
    ) -> Option<Vec<Bytes>> {
        let elements: Vec<Bytes> = ReplyView::element_frames(reply)
            .filter(|frames| frames.len() == self.requests.len())?
            .map(|element| reply.slice_ref(element))
            .collect();
        if self
            .shapes
            .iter()
            .all(|(n, name)| *n == 1 && name.is_none())
        {
            return Some(elements);
        }
        let mut out = Vec::with_capacity(self.shapes.len());
        let mut at = 0;
        for (count, name) in &self.shapes {
            let element = elements.get(at)?.clone();
            at += count;
            let shown = match (layout, name) {
                (Some(layout), Some(name)) => layout
                    .reverse_reply(name, element)
                    .unwrap_or_else(|| encode::null_frame(proto)),
                _ => element,
            };
            out.push(shown);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(
        indices: &[usize],
        elements: Option<&[&str]>,
        reply: &str,
        aborted: bool,
    ) -> SlotOutcome {
        SlotOutcome {
            indices: indices.to_vec(),
            elements: elements.map(|e| {
                e.iter()
                    .map(|s| Bytes::copy_from_slice(s.as_bytes()))
                    .collect()
            }),
            reply: Bytes::copy_from_slice(reply.as_bytes()),
            aborted,
        }
    }

    #[test]
    fn an_aborted_slot_answers_its_own_error_in_its_places_beside_the_applied_ones() {
        let aborted_error = format!("-{}\r\n", reply::transaction::WATCHED_PART_ABORTED);
        let placed = place_in_command_order(
            5,
            vec![
                outcome(
                    &[0, 3],
                    Some(&["+OK\r\n", ":2\r\n"]),
                    "*2\r\n+OK\r\n:2\r\n",
                    false,
                ),
                outcome(&[1, 4], None, "*-1\r\n", true),
                outcome(&[2], None, "-EXECABORT Transaction discarded\r\n", false),
            ],
        );
        let want = format!(
            "*5\r\n+OK\r\n{aborted_error}-EXECABORT Transaction discarded\r\n:2\r\n{aborted_error}"
        );
        assert_eq!(String::from_utf8_lossy(&placed), want);
    }

    #[test]
    fn a_slot_whose_reply_is_neither_array_nor_error_did_not_run() {
        let placed = place_in_command_order(1, vec![outcome(&[0], None, "*-1\r\n", false)]);
        assert_eq!(
            String::from_utf8_lossy(&placed),
            format!("*1\r\n-{}\r\n", reply::transaction::PART_DID_NOT_RUN)
        );
    }
}
