//! The names a tracking client knows a stored key by, so a master's report of a key is told
//! to the clients under their own names (database prefix taken off, layout names reversed).

use std::sync::Arc;

use bytes::Bytes;
use smallvec::SmallVec;

use crate::dispatch::layout::ActiveLayout;
use crate::dispatch::Proxy;

/// How a key stored on a master is named to the clients: without the prefix of its
/// database (`__db3:k` is `k`), or by its legacy name under a key layout, whose
/// forward and reverse rewrites are inverses (`rewrite`'s round-trip property).
#[derive(Clone, Default)]
pub struct Naming {
    pub(super) databases: u32,
    pub(super) layout: Option<Arc<ActiveLayout>>,
}

impl Naming {
    /// The naming of `proxy`'s configuration.
    pub fn of(proxy: &Proxy) -> Naming {
        Naming {
            databases: proxy.config.databases,
            layout: proxy.layout.clone(),
        }
    }

    /// The names a client may know `stored` by: its name in its database, and the stored
    /// name too, which database 0 reads as it is; none for a layout's internal key; under
    /// a layout, its legacy name, and the stored name itself when that is a legacy name
    /// the layout stores as is (a name under a prefix that no rule matches may look like
    /// another key's cluster name: both are told).
    pub(super) fn client_names(&self, stored: &Bytes) -> SmallVec<[Bytes; 2]> {
        let mut names = SmallVec::new();
        match &self.layout {
            Some(layout) => {
                names.extend(layout.legacy_name(stored));
                let as_is = layout.cluster_name(stored.to_vec()) == stored[..];
                if as_is && !names.contains(stored) {
                    names.push(stored.clone());
                }
            }
            None => {
                let (db, name) = crate::rewrite::database::split(stored, self.databases);
                names.push(stored.slice_ref(name));
                // Database 0 reads `__db3:k` as it is stored (a reserved name, README).
                if db != 0 {
                    names.push(stored.clone());
                }
            }
        }
        names
    }
}
