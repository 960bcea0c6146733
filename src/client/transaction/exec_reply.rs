//! EXEC's reply, put together: the block's replies shown in the client's database, and the
//! answers of the commands the proxy answers itself spliced into their places.

use bytes::Bytes;

use super::LocalCommands;
use crate::dispatch::layout::{rename_reply_keys, ReplyKeys};
use crate::protocol::{encode, Proto, ReplyView, Request};
use crate::reply;
use crate::rewrite::database;

/// EXEC's reply of block commands with the key names in the replies of those at `shown`
/// (their places among the block's replies) shown as in database `db`: without its prefix,
/// as the same commands outside MULTI show them. A reply that is not the array of the
/// block's replies (EXEC aborted, an error) is left as it is.
pub(super) fn show_in_database(
    reply: Bytes,
    shown: &[(usize, ReplyKeys)],
    db: u32,
    databases: u32,
    proto: Proto,
) -> Bytes {
    let Some(frames) = ReplyView::element_frames(&reply) else {
        return reply;
    };
    let count = frames.len();
    let mut elements: Vec<Bytes> = frames.map(|frame| reply.slice_ref(frame)).collect();
    for &(at, keys) in shown {
        let Some(element) = elements.get_mut(at) else {
            continue;
        };
        let name_of =
            |key: &[u8]| database::name_in(key, db, databases).map(Bytes::copy_from_slice);
        *element = rename_reply_keys(keys, std::mem::take(element), name_of)
            .unwrap_or_else(|| encode::null_frame(proto));
    }
    encode::array_frame(count, &elements)
}

/// EXEC's reply with the answers of the commands the proxy answers itself put in their
/// places: `block_reply` is the backend block's reply (one element per other command),
/// `answer` answers one local command (called in queue order, after the block ran). A
/// block reply that is not an array (a failed WATCH, an error) is EXEC's whole reply, and
/// no local command runs, as none of a discarded transaction does.
pub fn splice_local_answers(
    block_reply: Bytes,
    locals: LocalCommands,
    mut answer: impl FnMut(&Request) -> Bytes,
) -> Bytes {
    let Some(mut block) = ReplyView::element_frames(&block_reply) else {
        return block_reply;
    };
    let total = block.len() + locals.len();
    let mut locals = locals.into_iter().peekable();
    let mut elements = Vec::with_capacity(total);
    for place in 0..total {
        let element = match locals.next_if(|(at, _)| *at == place) {
            Some((_, request)) => answer(&request),
            None => block.next().map_or_else(
                || reply::error(reply::text::NO_REPLY),
                |element| block_reply.slice_ref(element),
            ),
        };
        elements.push(element);
    }
    encode::array_frame(total, &elements)
}
