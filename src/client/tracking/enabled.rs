//! One client's tracking, as its session holds it: its options, CLIENT CACHING, and the
//! keys each of its commands reads, noted in the proxy-wide [`Tracking`] table.

use std::sync::Arc;

use bytes::Bytes;

use crate::client::registry::Mailboxes;
use crate::command::{CommandFlags, CommandSpec, KeyList};
use crate::dispatch::Proxy;
use crate::protocol::Request;

use super::{Tracking, TrackingOptions};

/// A client's tracking, held by its session (in its connection state): the client stops
/// tracking when it is dropped (CLIENT TRACKING OFF, RESET, disconnect).
pub struct Enabled {
    tracking: Arc<Tracking>,
    id: u64,
    /// What CLIENT TRACKING ON set.
    pub options: TrackingOptions,
    /// CLIENT CACHING yes (OPTIN) or no (OPTOUT) was given for the next command.
    pub caching: bool,
}

impl std::fmt::Debug for Enabled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enabled")
            .field("id", &self.id)
            .field("options", &self.options)
            .field("caching", &self.caching)
            .finish()
    }
}

impl Enabled {
    /// The handle of client `id`, which [`Tracking::enable`] turned on.
    pub fn new(tracking: Arc<Tracking>, id: u64, options: TrackingOptions) -> Self {
        Enabled {
            tracking,
            id,
            options,
            caching: false,
        }
    }

    /// The client sent `request` (`spec`, `name` folded or empty for a plain command):
    /// records the keys it reads, as Redis's `trackingRememberKeys` (read-only commands,
    /// as OPTIN/OPTOUT and CLIENT CACHING allow; a script's declared keys too, which may
    /// be more than it reads: an extra invalidation, never a missing one), then ends a
    /// CLIENT CACHING as Redis does after the next command outside MULTI.
    pub fn observe(
        &mut self,
        proxy: &Proxy,
        mailboxes: &Mailboxes,
        request: &Request,
        spec: Option<&CommandSpec>,
        name: &[u8],
        in_multi: bool,
    ) {
        let options = &self.options;
        let skipped = options.optin && !self.caching || options.optout && self.caching;
        let reads = spec.filter(|spec| {
            let read_only = spec.flags.has(CommandFlags::READONLY) && !spec.is_pubsub();
            !skipped && (read_only || crate::dispatch::runs_a_script(spec))
        });
        let mut read = Vec::new();
        if let Some(spec) = reads {
            let mut keys = KeyList::new();
            spec.keys(&request.args, &mut keys);
            // Copied: the arguments may share the client's whole input buffer.
            read.extend(
                keys.iter()
                    .filter_map(|key| request.args.get(key.index))
                    .map(|key| Bytes::copy_from_slice(key)),
            );
        }
        let max_keys = proxy.config.tracking_table_max_keys;
        self.tracking
            .note(self.id, read, &proxy.topology, mailboxes, max_keys);
        // EXEC and DISCARD end the transaction the CLIENT CACHING applied to.
        if (!in_multi || matches!(name, b"exec" | b"discard")) && name != b"client" {
            self.caching = false;
        }
    }
}

impl Drop for Enabled {
    fn drop(&mut self) {
        self.tracking.disable(self.id);
    }
}
