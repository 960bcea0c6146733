//! RESP framing for both directions, with no IO.
//!
//! Requests: [`RequestDecoder`] turns client bytes into [`Request`]s (multibulk or inline),
//! checking that a whole frame is buffered and within [`Limits`] before it parses anything,
//! and keeping its scan position between calls so a large frame arriving in small reads
//! costs linear time. Replies: [`ReplyScanner`] finds where one complete reply frame ends
//! in a backend's byte stream, so replies can be forwarded as raw bytes; [`ReplyView`]
//! looks inside one such frame without copying it (the way every reader of a reply's
//! contents reads it), and [`parse_frame`] reads one into an owned tree. [`encode`] writes
//! replies the proxy builds itself.
//!
//! Nothing here does IO or panics on any input: malformed bytes become a [`ProtocolError`]
//! whose text is the one Redis 7 would reply.

pub mod encode;
mod frame;
mod inline;
mod number;
mod reply_scan;
mod reply_view;
mod request;

pub use frame::{parse_frame, BytesFrame};
pub(crate) use number::parse_i64;
pub use reply_scan::{reply_nesting, ReplyScanner};
pub use reply_view::{double_text, AggregateKind, ElementFrames, Elements, Pairs, ReplyView};
pub use request::{FoldedName, Request, RequestDecoder};

/// Size limits on client input. Defaults are Redis's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest bulk string, as Redis's `proto-max-bulk-len` (512 MB).
    pub max_bulk_len: usize,
    /// Most elements in one multibulk request (Redis 6: 1024*1024; Redis 7 accepts up to
    /// 2^31-1). A larger count is `Protocol error: invalid multibulk length`.
    pub max_multibulk_len: usize,
    /// Longest inline command line (Redis: `PROTO_INLINE_MAX_SIZE`, 64 KiB).
    pub max_inline_len: usize,
}

/// Deepest reply handed to a reader that recurses once per level (redis-protocol's
/// decoders, the value readers of `command` and `route`): far more than any reply they are
/// for (a `COMMAND` reply nests 6), far less than overflows a thread's stack (a level can
/// take 20 KiB of it in a debug build). A deeper reply is refused before it is read;
/// replies that are only forwarded or split into elements have no such limit.
pub const MAX_PARSED_NESTING: usize = 32;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: 1024 * 1024,
            max_inline_len: 64 * 1024,
        }
    }
}

/// A client sent something Redis would refuse with `-ERR Protocol error: ...` and then close
/// the connection. The text is Redis's, without the `ERR ` prefix
/// (e.g. `Protocol error: invalid multibulk length`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ProtocolError(pub String);

/// Which RESP version a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Proto {
    /// RESP2, the default until a client sends `HELLO 3`.
    #[default]
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}
