//! Client request decoding: multibulk (`*N\r\n$len\r\n...`) and inline commands.

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;

use super::{Limits, ProtocolError};

/// One command as the client sent it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The request as a RESP multibulk frame, byte-exact when the client sent multibulk
    /// (re-encoded for inline commands), so an untouched command is forwarded as is.
    pub raw: Bytes,
    /// The arguments, command name first; each a slice of `raw` (no copy).
    pub args: SmallVec<[Bytes; 4]>,
}

impl Request {
    /// The command name as sent (any case).
    pub fn name(&self) -> &[u8] {
        &self.args[0]
    }
}

/// Incremental request decoder; one per client connection.
#[derive(Debug, Default)]
pub struct RequestDecoder {
    limits: Limits,
}

impl RequestDecoder {
    pub fn new(limits: Limits) -> Self {
        RequestDecoder { limits }
    }

    /// Takes the next whole request off the front of `buf`.
    ///
    /// `Ok(None)`: more bytes are needed (nothing consumed that matters). Empty requests
    /// (`*0`, negative counts, blank inline lines) are consumed silently, as Redis does.
    /// `Err`: the connection must be answered `-ERR <text>` and closed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Request>, ProtocolError> {
        let _ = (buf, &self.limits);
        unimplemented!("protocol::request")
    }
}
