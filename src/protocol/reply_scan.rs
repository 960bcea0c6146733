//! Finding the end of one reply frame (RESP2 or RESP3) in a backend byte stream.


use super::{Limits, ProtocolError};

/// Incremental scanner over a backend's reply stream; one per backend connection.
#[derive(Debug, Default)]
pub struct ReplyScanner {
    limits: Limits,
}

impl ReplyScanner {
    pub fn new(limits: Limits) -> Self {
        ReplyScanner { limits }
    }

    /// Length of the complete frame at the front of `buf`, if it is all buffered.
    /// Keeps its progress so that repeated calls on a growing buffer stay linear.
    /// The caller splits `len` bytes off `buf` and calls again for the next frame.
    pub fn next_frame_len(&mut self, buf: &[u8]) -> Result<Option<usize>, ProtocolError> {
        let _ = (buf, &self.limits);
        unimplemented!("protocol::reply_scan")
    }
}
