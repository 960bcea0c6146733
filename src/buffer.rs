//! I/O buffers give back what a burst grew them to.
//!
//! A read or write buffer grows to hold the largest request or reply of a burst (a
//! pipeline of 100 KB values grows one to megabytes) and would keep that allocation for
//! the rest of its connection's life, as Redis's query buffers would without the shrinking
//! its `clientsCron` does. Once such a buffer is empty it is replaced by one of its usual
//! size. The size has to be watched while the buffer is full: an emptied `BytesMut` is a
//! view at the end of its allocation and no longer shows how large that is.

use bytes::BytesMut;

/// Capacity past which a buffer counts as grown, as a multiple of its usual size: far above
/// what ordinary traffic grows one to, so the hot path only compares.
const OVERSIZED: usize = 4;

/// Watches one buffer for growth past its usual size, `USUAL` bytes. Eight bytes: every
/// client's session holds two.
#[derive(Debug)]
pub struct Resizer<const USUAL: usize> {
    /// The largest capacity noted since the buffer was last replaced, where it had grown
    /// past its usual size; 0 while it has not.
    peak: usize,
}

impl<const USUAL: usize> Resizer<USUAL> {
    /// For a buffer whose usual capacity is `USUAL`.
    pub const fn new() -> Resizer<USUAL> {
        Resizer { peak: 0 }
    }

    fn grown(&self) -> bool {
        self.peak > 0
    }

    /// Notes how large `buf` is now: called where it may have grown (after a reserve or
    /// after bytes were added).
    pub fn note(&mut self, buf: &BytesMut) {
        if buf.capacity() > OVERSIZED * USUAL {
            self.peak = self.peak.max(buf.capacity());
        }
    }

    /// Copies what is left of `buf` into a buffer of its own size when it has grown and
    /// less than half its allocation is still in use: a client that stopped reading partway
    /// through a large reply would otherwise pin the whole allocation while it waits.
    pub fn compact_if_spent(&mut self, buf: &mut BytesMut) {
        if self.grown() && !buf.is_empty() && buf.len() <= self.peak / 2 {
            let mut fresh = BytesMut::with_capacity(buf.len().max(USUAL));
            fresh.extend_from_slice(buf);
            *buf = fresh;
            self.peak = 0;
            self.note(buf);
        }
    }

    /// Gives `buf`'s allocation back (capacity 0) when it is empty: for a connection that
    /// went idle, which takes a buffer again when it next has bytes to hold.
    pub fn release_if_empty(&mut self, buf: &mut BytesMut) {
        if buf.is_empty() {
            *buf = BytesMut::new();
            self.peak = 0;
        }
    }

    /// Replaces `buf` by a buffer of the usual capacity when it has grown and is empty now.
    /// Slices split off it earlier keep the old allocation alive until they are dropped.
    // Inlined: a session asks on every pass, and the answer is nearly always "nothing".
    #[inline]
    pub fn shrink_if_idle(&mut self, buf: &mut BytesMut) {
        if self.grown() && buf.is_empty() {
            *buf = BytesMut::with_capacity(USUAL);
            self.peak = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grown_buffer_returns_to_its_usual_size_once_empty() {
        let mut resizer = Resizer::<{ 16 * 1024 }>::new();
        let mut buf = BytesMut::with_capacity(16 * 1024);
        buf.extend_from_slice(&vec![b'x'; 1 << 20]);
        resizer.note(&buf);
        // Emptied by splitting its bytes off: the view left shows almost no capacity.
        let taken = buf.split();
        assert!(buf.capacity() < 16 * 1024);
        resizer.shrink_if_idle(&mut buf);
        assert_eq!(buf.capacity(), 16 * 1024);
        assert_eq!(taken.len(), 1 << 20);
    }

    #[test]
    fn a_grown_buffer_mostly_written_keeps_only_what_is_left() {
        let mut resizer = Resizer::<{ 16 * 1024 }>::new();
        let mut buf = BytesMut::with_capacity(16 * 1024);
        buf.extend_from_slice(&vec![b'x'; 1 << 20]);
        resizer.note(&buf);
        bytes::Buf::advance(&mut buf, 400 * 1024);
        resizer.compact_if_spent(&mut buf);
        assert_eq!(
            buf.len(),
            624 * 1024,
            "more than half is still in use: kept"
        );
        bytes::Buf::advance(&mut buf, 300 * 1024);
        resizer.compact_if_spent(&mut buf);
        assert_eq!(buf.len(), 324 * 1024);
        assert!(
            buf.capacity() < 400 * 1024,
            "the 1 MiB allocation is let go"
        );
        assert!(buf.iter().all(|&b| b == b'x'));
    }

    #[test]
    fn an_empty_buffer_is_released_and_one_holding_bytes_kept() {
        let mut resizer = Resizer::<{ 16 * 1024 }>::new();
        let mut buf = BytesMut::with_capacity(1 << 20);
        resizer.note(&buf);
        buf.extend_from_slice(b"+OK\r\n");
        resizer.release_if_empty(&mut buf);
        assert_eq!(&buf[..], b"+OK\r\n", "bytes still to send are kept");
        buf.clear();
        resizer.release_if_empty(&mut buf);
        assert_eq!(buf.capacity(), 0);
        resizer.shrink_if_idle(&mut buf);
        assert_eq!(
            buf.capacity(),
            0,
            "a released buffer is not taken again while idle"
        );
    }

    #[test]
    fn a_buffer_is_kept_while_it_holds_bytes_or_never_grew() {
        let mut resizer = Resizer::<{ 16 * 1024 }>::new();
        let mut holding = BytesMut::with_capacity(1 << 20);
        holding.extend_from_slice(b"+OK\r\n");
        resizer.note(&holding);
        resizer.shrink_if_idle(&mut holding);
        assert_eq!(holding.capacity(), 1 << 20);
        assert_eq!(&holding[..], b"+OK\r\n");

        let mut ordinary = Resizer::<{ 16 * 1024 }>::new();
        let mut buf = BytesMut::with_capacity(64 * 1024);
        ordinary.note(&buf);
        buf.clear();
        ordinary.shrink_if_idle(&mut buf);
        assert_eq!(buf.capacity(), 64 * 1024);
    }
}
