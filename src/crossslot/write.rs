//! The writes that replace a destination key whole: one command, or `MULTI`, `DEL`, the
//! value in chunks, `EXEC`, so the destination's master applies all of it or none of it.

use bytes::Bytes;

/// Arguments per write command: big values go out in several commands (inside the same
/// `MULTI`) so that no single command holds the whole result in one frame.
pub(super) const CHUNK_ARGS: usize = 1024;

/// `DEL destination` when `chunks` is empty, else `MULTI`, `DEL destination`, one `command
/// destination <chunk>` per chunk, `EXEC`.
pub(super) fn replace(
    destination: &Bytes,
    command: &'static [u8],
    chunks: &[&[Bytes]],
) -> Vec<Vec<Bytes>> {
    let del = vec![Bytes::from_static(b"DEL"), destination.clone()];
    if chunks.is_empty() {
        return vec![del];
    }
    let mut writes = Vec::with_capacity(chunks.len() + 3);
    writes.push(vec![Bytes::from_static(b"MULTI")]);
    writes.push(del);
    for chunk in chunks {
        let mut write = Vec::with_capacity(chunk.len() + 2);
        write.push(Bytes::from_static(command));
        write.push(destination.clone());
        write.extend(chunk.iter().cloned());
        writes.push(write);
    }
    writes.push(vec![Bytes::from_static(b"EXEC")]);
    writes
}

/// `SET destination value [KEEPTTL]`: one command replaces a string whole.
pub(super) fn set(destination: &Bytes, value: Bytes, keep_ttl: bool) -> Vec<Vec<Bytes>> {
    let mut write = vec![Bytes::from_static(b"SET"), destination.clone(), value];
    if keep_ttl {
        write.push(Bytes::from_static(b"KEEPTTL"));
    }
    vec![write]
}

/// `DEL destination`.
pub(super) fn delete(destination: &Bytes) -> Vec<Vec<Bytes>> {
    vec![vec![Bytes::from_static(b"DEL"), destination.clone()]]
}
