//! The proxy's connected clients, for CLIENT ID/LIST and connection counts.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// What CLIENT LIST shows of one client.
#[derive(Debug, Clone)]
pub struct ClientEntry {
    /// The client's address (`addr=`).
    pub addr: SocketAddr,
    /// The proxy address it connected to (`laddr=`).
    pub laddr: SocketAddr,
    /// Its CLIENT SETNAME name, empty when none (`name=`).
    pub name: String,
    /// When it connected (`age=`).
    pub created: Instant,
    /// Its protocol version, 2 or 3 (`resp=`).
    pub resp: u8,
}

/// Every client connected to this proxy.
#[derive(Debug, Default)]
pub struct Registry {
    next_id: AtomicU64,
    clients: Mutex<BTreeMap<u64, ClientEntry>>,
}

impl Registry {
    /// Registers a client; it is removed when the returned guard is dropped.
    pub fn register(self: &Arc<Self>, addr: SocketAddr, laddr: SocketAddr) -> ClientGuard {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = ClientEntry {
            addr,
            laddr,
            name: String::new(),
            created: Instant::now(),
            resp: 2,
        };
        self.lock().insert(id, entry);
        ClientGuard {
            id,
            registry: self.clone(),
        }
    }

    /// Number of connected clients.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no client is connected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Changes what is shown of client `id`.
    pub fn update(&self, id: u64, change: impl FnOnce(&mut ClientEntry)) {
        if let Some(entry) = self.lock().get_mut(&id) {
            change(entry);
        }
    }

    /// One CLIENT LIST / CLIENT INFO line for `id`, in Redis's format.
    pub fn line(&self, id: u64) -> Option<String> {
        self.lock().get(&id).map(|entry| format_line(id, entry))
    }

    /// CLIENT LIST: one line per client, oldest first.
    pub fn list(&self) -> String {
        self.lock()
            .iter()
            .map(|(id, entry)| format_line(*id, entry))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ClientEntry>> {
        self.clients.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn format_line(id: u64, e: &ClientEntry) -> String {
    format!(
        "id={id} addr={} laddr={} fd=-1 name={} age={} idle=0 flags=N db=0 sub=0 psub=0 ssub=0 \
         multi=-1 qbuf=0 qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 \
         tot-mem=0 events=r cmd=client user=default redir=-1 resp={}\n",
        e.addr,
        e.laddr,
        e.name,
        e.created.elapsed().as_secs(),
        e.resp
    )
}

/// Keeps a client registered while it lives.
#[derive(Debug)]
pub struct ClientGuard {
    /// The client's id (CLIENT ID).
    pub id: u64,
    registry: Arc<Registry>,
}

impl Drop for ClientGuard {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.id);
    }
}
