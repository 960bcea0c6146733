//! Connections of the offline tools to one Redis deployment (a single node, or every master
//! of a cluster), with replies turned into a small value type.
//!
//! Invariants: a call that names a key goes to the master that serves the key's slot in the
//! current slot map. A `MOVED`/`ASK` reply is returned as an error marked with
//! [`MOVED_MARK`] (see [`is_moved`]) and never followed inside a call: the caller re-reads
//! the slot map ([`Endpoint::refresh`]) and retries the whole step, which is safe because
//! every write of the tools is idempotent. Walking (`SCAN`) visits every master once, one
//! page at a time, on the masters of the slot map it started with.
//! Connecting tries every seed in turn until one answers.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;

use bytes::Bytes;
use futures_util::future::join_all;

use crate::backend::{ConnOptions, NodeConn};
use crate::protocol::encode::encode_request;
use crate::protocol::Proto;
use crate::route::{key_slot, NodeAddr, NodePort, SlotMap};
use crate::topology::Coverage;

pub use super::reply::Reply;
use super::MigrateError;
pub use crate::config::RedisUrl;

/// Starts every error text of a `MOVED`/`ASK` reply, so callers can tell a slot that moved
/// (retry after [`Endpoint::refresh`]) from a real failure.
pub const MOVED_MARK: &str = "slot moved: ";

/// Whether an error text (of [`MigrateError::Redis`] or a copy result) is a `MOVED`/`ASK`.
pub fn is_moved(message: &str) -> bool {
    message.contains(MOVED_MARK)
}

/// How many times a request that met `MOVED`/`ASK` is sent again on a re-read slot map.
pub const MOVED_RETRIES: u32 = 10;

/// Sends again the entries of `results` whose error is a moved slot (`moved`), up to
/// [`MOVED_RETRIES`] times: after a wait (an `ASK` means a slot is half-way through a move,
/// so it gets a moment to finish), `refresh` re-reads the slot maps, and `redo` sends the
/// entries at the indices it is given, whose results replace theirs.
pub async fn follow_moves<T, E, Refresh, Refreshed, Redo, Redone>(
    results: &mut [Result<T, E>],
    moved: impl Fn(&E) -> bool,
    mut refresh: Refresh,
    mut redo: Redo,
) -> Result<(), MigrateError>
where
    Refresh: FnMut() -> Refreshed,
    Refreshed: std::future::Future<Output = Result<(), MigrateError>>,
    Redo: FnMut(Vec<usize>) -> Redone,
    Redone: std::future::Future<Output = Vec<Result<T, E>>>,
{
    for attempt in 1..=MOVED_RETRIES {
        let again: Vec<usize> = (0..results.len())
            .filter(|&i| results[i].as_ref().is_err_and(&moved))
            .collect();
        if again.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50 * u64::from(attempt))).await;
        refresh().await?;
        let redone = redo(again.clone()).await;
        for (i, result) in again.into_iter().zip(redone) {
            results[i] = result;
        }
    }
    Ok(())
}

/// The slot map and one pipelined connection per master, swapped whole on a refresh.
struct Masters {
    /// Slot owners; for a single node every slot maps to master 0.
    map: SlotMap,
    /// Indexed like `map.masters()`.
    conns: Vec<NodeConn>,
}

/// An open deployment: one node, or the masters of a cluster.
pub struct Endpoint {
    masters: ArcSwap<Masters>,
    /// Where the slot map was first read; asked again when every master fails to answer.
    seeds: Vec<NodeAddr>,
    opts: ConnOptions,
    is_cluster: bool,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("masters", &self.masters())
            .field("is_cluster", &self.is_cluster)
            .finish()
    }
}

impl Endpoint {
    /// Connects to `url`; when the node runs in cluster mode (`INFO cluster`), reads
    /// `CLUSTER SHARDS` (or `CLUSTER SLOTS`) and connects to every master.
    pub async fn connect(url: &RedisUrl) -> Result<Endpoint, MigrateError> {
        Endpoint::connect_any(std::slice::from_ref(url)).await
    }

    /// Like [`Endpoint::connect`], trying each of `seeds` in order until one answers (the
    /// credentials of the first are used for every node). Fails with every seed's error.
    pub async fn connect_any(seeds: &[RedisUrl]) -> Result<Endpoint, MigrateError> {
        Endpoint::connect_any_within(seeds, None).await
    }

    /// Like [`Endpoint::connect_any`], with connections that fail their outstanding requests
    /// when a node sends nothing for `read_timeout` (see [`ConnOptions::read_timeout`]).
    pub async fn connect_any_within(
        seeds: &[RedisUrl],
        read_timeout: Option<Duration>,
    ) -> Result<Endpoint, MigrateError> {
        Endpoint::connect_with(seeds, read_timeout, None).await
    }

    /// Like [`Endpoint::connect_any_within`], over connections that select database `db`
    /// before any request (and again after every reconnection): one database of a single
    /// node. Fails when the node does not report that database selected.
    pub async fn connect_database(
        seeds: &[RedisUrl],
        read_timeout: Option<Duration>,
        db: u32,
    ) -> Result<Endpoint, MigrateError> {
        let select =
            crate::protocol::encode::encode_request(&[b"SELECT", db.to_string().as_bytes()]);
        let prelude: crate::backend::Prelude = Arc::new(move || vec![select.clone()]);
        let endpoint = Endpoint::connect_with(seeds, read_timeout, Some(prelude)).await?;
        // A SELECT the node refused would leave database 0 selected, silently. A server
        // before 6.2 has no CLIENT INFO; there the database was listed by INFO keyspace,
        // and a single node never refuses to select one it lists.
        let info = endpoint.call_node(0, &[b"CLIENT", b"INFO"]).await?;
        let selected = match &info {
            Reply::Error(e) => e.to_ascii_lowercase().contains("unknown subcommand"),
            info => info.data().is_some_and(|text| {
                let wanted = format!("db={db}");
                text.split(|&b| b == b' ')
                    .any(|field| field == wanted.as_bytes())
            }),
        };
        match selected {
            true => Ok(endpoint),
            false => Err(MigrateError::Redis(format!(
                "database {db} could not be selected: CLIENT INFO answered {info:?}"
            ))),
        }
    }

    async fn connect_with(
        seeds: &[RedisUrl],
        read_timeout: Option<Duration>,
        prelude: Option<crate::backend::Prelude>,
    ) -> Result<Endpoint, MigrateError> {
        let Some(first) = seeds.first() else {
            return Err(MigrateError::Usage("no address to connect to".to_owned()));
        };
        let opts = ConnOptions {
            proto: Proto::Resp2,
            username: first.username.clone(),
            password: first.password.clone(),
            connect_timeout: Duration::from_secs(5),
            read_timeout,
            prelude,
            tls: crate::tls::NodeTls::from_config(
                first.tls.as_ref().unwrap_or(&Default::default()),
            )
            .map_err(|e| MigrateError::Usage(format!("rediss://: {e}")))?,
            ..ConnOptions::default()
        };
        let addrs: Vec<NodeAddr> = seeds
            .iter()
            .map(|url| NodeAddr::from(url.addr.as_str()))
            .collect();
        let mut failures = Vec::new();
        for addr in &addrs {
            match connect_seed(addr, &opts).await {
                Ok((masters, is_cluster)) => {
                    return Ok(Endpoint {
                        masters: ArcSwap::from_pointee(masters),
                        seeds: addrs.clone(),
                        opts,
                        is_cluster,
                    })
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        Err(MigrateError::Redis(format!(
            "no seed answered: {}",
            failures.join("; ")
        )))
    }

    /// Re-reads the slot map of a cluster (from its masters, then its seeds) and switches
    /// to it, keeping the connections of masters that stay. A single node has nothing to
    /// re-read.
    pub async fn refresh(&self) -> Result<(), MigrateError> {
        if !self.is_cluster {
            return Ok(());
        }
        let current = self.masters.load_full();
        let mut failures = Vec::new();
        let mut asked: Vec<&NodeAddr> = Vec::new();
        for (conn, addr) in current
            .conns
            .iter()
            .map(|c| (Some(c), c.addr()))
            .chain(self.seeds.iter().map(|a| (None, a)))
        {
            if asked.contains(&addr) {
                continue;
            }
            asked.push(addr);
            let conn = conn
                .cloned()
                .unwrap_or_else(|| NodeConn::spawn(addr.clone(), self.opts.clone()));
            match read_slot_map(&conn, addr, self.opts.tls.is_some()).await {
                Ok(map) => {
                    let conns = map
                        .masters()
                        .iter()
                        .map(|master| {
                            current
                                .conns
                                .iter()
                                .find(|c| c.addr() == master)
                                .cloned()
                                .unwrap_or_else(|| {
                                    NodeConn::spawn(master.clone(), self.opts.clone())
                                })
                        })
                        .collect();
                    self.masters.store(Arc::new(Masters { map, conns }));
                    return Ok(());
                }
                Err(e) => failures.push(e.to_string()),
            }
        }
        Err(MigrateError::Redis(format!(
            "cannot re-read the slot map: {}",
            failures.join("; ")
        )))
    }

    /// The current slot map, to compare with a later one.
    pub fn slot_map(&self) -> SlotMap {
        self.masters.load().map.clone()
    }

    /// Whether this is a cluster (as opposed to a single node).
    pub fn is_cluster(&self) -> bool {
        self.is_cluster
    }

    /// The masters' addresses, in node order (of the current slot map).
    pub fn masters(&self) -> Vec<NodeAddr> {
        self.masters.load().map.masters().to_vec()
    }

    /// Whether `other` is the same deployment (shares a master address).
    pub fn same_as(&self, other: &Endpoint) -> bool {
        let theirs = other.masters();
        self.masters().iter().any(|a| theirs.contains(a))
    }

    /// The index of the master serving `key`.
    pub fn node_of(&self, key: &[u8]) -> usize {
        self.masters
            .load()
            .map
            .master_index(key_slot(key))
            .unwrap_or(0)
    }

    /// Sends `args` to the master serving `key`. The request is encoded before this
    /// returns, so the future borrows nothing.
    pub fn call_key(
        &self,
        key: &[u8],
        args: &[&[u8]],
    ) -> impl std::future::Future<Output = Result<Reply, MigrateError>> + Send + 'static {
        self.call_node(self.node_of(key), args)
    }

    /// Sends `args` to master `node`; see [`Endpoint::call_key`].
    pub fn call_node(
        &self,
        node: usize,
        args: &[&[u8]],
    ) -> impl std::future::Future<Output = Result<Reply, MigrateError>> + Send + 'static {
        let conn = self.masters.load().conns.get(node).cloned();
        let request = encode_request(args);
        async move {
            let conn =
                conn.ok_or_else(|| MigrateError::Redis(format!("no master number {node}")))?;
            let raw = conn
                .call(request, false)
                .await
                .map_err(|e| MigrateError::Redis(e.to_string()))?;
            let reply = Reply::read(&raw)?;
            if let Some(e) = reply.error() {
                if e.starts_with("MOVED") || e.starts_with("ASK") {
                    return Err(MigrateError::Redis(format!(
                        "{}: {MOVED_MARK}{e}",
                        conn.addr()
                    )));
                }
            }
            Ok(reply)
        }
    }

    /// Sends each request (a key, and the command for it) to the key's master; those that
    /// meet a moved slot are sent again after the slot map is re-read, up to
    /// [`MOVED_RETRIES`] times. Replies come in request order. For single-key writes
    /// outside the copy (the marker, deletions), which are idempotent.
    pub async fn call_keys_following_moves(
        &self,
        requests: &[(&[u8], &[&[u8]])],
    ) -> Result<Vec<Result<Reply, MigrateError>>, MigrateError> {
        let send = |i: usize| self.call_key(requests[i].0, requests[i].1);
        let mut results = join_all((0..requests.len()).map(send)).await;
        follow_moves(
            &mut results,
            |e| matches!(e, MigrateError::Redis(e) if is_moved(e)),
            || self.refresh(),
            |again| join_all(again.into_iter().map(send)),
        )
        .await?;
        Ok(results)
    }

    /// A walk over the keys matching `pattern` on every master, `count` keys or so per page.
    /// The masters are those of the current slot map: a refresh during the walk (a slot
    /// moved) does not send a cursor to another node.
    pub fn walk(&self, pattern: &[u8], count: usize) -> KeyWalk {
        let mut nodes = self.masters.load().conns.clone();
        nodes.reverse();
        KeyWalk::over(nodes, pattern, count)
    }

    /// A walk as [`Endpoint::walk`]'s over master `node` alone (none, when there is no such
    /// master).
    pub fn walk_node(&self, node: usize, pattern: &[u8], count: usize) -> KeyWalk {
        let nodes = self.masters.load().conns.get(node).cloned();
        KeyWalk::over(nodes.into_iter().collect(), pattern, count)
    }

    /// Loads `script` on every master; returns its SHA1.
    pub async fn load_script(&self, script: &str) -> Result<Bytes, MigrateError> {
        let mut sha = None;
        for node in 0..self.masters.load().conns.len() {
            let reply = self
                .call_node(node, &[b"SCRIPT", b"LOAD", script.as_bytes()])
                .await?;
            match reply {
                Reply::Data(digest) => sha = Some(digest),
                other => return Err(MigrateError::Redis(format!("SCRIPT LOAD: {other:?}"))),
            }
        }
        sha.ok_or_else(|| MigrateError::Redis("no master to load a script on".to_owned()))
    }
}

/// A `SCAN` over every master in turn, one page at a time: a walk holds one page of names,
/// whatever the size of the keyspace. As `SCAN` promises, a key present for the whole walk
/// is found at least once; one added or removed meanwhile may or may not be.
pub struct KeyWalk {
    /// The masters left to walk, the current one last (they are taken from the end).
    nodes: Vec<NodeConn>,
    pattern: Bytes,
    count: Bytes,
    /// The current master's cursor.
    cursor: Bytes,
}

impl KeyWalk {
    /// A walk of `nodes`, the first to walk last.
    fn over(nodes: Vec<NodeConn>, pattern: &[u8], count: usize) -> KeyWalk {
        KeyWalk {
            nodes,
            pattern: Bytes::copy_from_slice(pattern),
            count: Bytes::from(count.max(1).to_string()),
            cursor: Bytes::from_static(b"0"),
        }
    }

    /// The next page of names (possibly empty, as `SCAN` pages may be); `None` once every
    /// master has been walked.
    pub async fn next_page(&mut self) -> Result<Option<Vec<Bytes>>, MigrateError> {
        let Some(node) = self.nodes.last() else {
            return Ok(None);
        };
        let args: [&[u8]; 6] = [
            b"SCAN",
            &self.cursor,
            b"MATCH",
            &self.pattern,
            b"COUNT",
            &self.count,
        ];
        let reply = call_conn(node, &args).await?;
        let Reply::List(mut parts) = reply else {
            return Err(MigrateError::Redis(format!(
                "{}: SCAN: {reply:?}",
                node.addr()
            )));
        };
        if parts.len() != 2 {
            return Err(MigrateError::Redis(format!(
                "{}: SCAN: malformed reply",
                node.addr()
            )));
        }
        let found = parts.pop().unwrap_or(Reply::Nil);
        let next = parts
            .pop()
            .and_then(|c| c.data().cloned())
            .unwrap_or_default();
        if next.as_ref() == b"0" || next.is_empty() {
            self.nodes.pop();
            self.cursor = Bytes::from_static(b"0");
        } else {
            self.cursor = next;
        }
        let keys = match found {
            Reply::List(found) => found
                .into_iter()
                .filter_map(|k| k.data().cloned())
                .collect(),
            _ => Vec::new(),
        };
        Ok(Some(keys))
    }
}

/// Opens `addr` and reads what it is: a single node, or a cluster with its slot map and a
/// connection per master.
async fn connect_seed(
    addr: &NodeAddr,
    opts: &ConnOptions,
) -> Result<(Masters, bool), MigrateError> {
    let seed = NodeConn::spawn(addr.clone(), opts.clone());
    let info = call_conn(&seed, &[b"INFO", b"cluster"]).await?;
    let info = match info {
        Reply::Data(text) => text,
        Reply::Error(e) => return Err(MigrateError::Redis(format!("{addr}: INFO: {e}"))),
        other => {
            return Err(MigrateError::Redis(format!(
                "{addr}: unexpected INFO reply {other:?}"
            )))
        }
    };
    let is_cluster = String::from_utf8_lossy(&info)
        .lines()
        .any(|line| line.trim() == "cluster_enabled:1");
    if !is_cluster {
        let masters = Masters {
            map: SlotMap::single(addr.clone()),
            conns: vec![seed],
        };
        return Ok((masters, false));
    }
    let map = read_slot_map(&seed, addr, opts.tls.is_some()).await?;
    let conns = map
        .masters()
        .iter()
        .map(|master| {
            if master == addr {
                seed.clone()
            } else {
                NodeConn::spawn(master.clone(), opts.clone())
            }
        })
        .collect();
    Ok((Masters { map, conns }, true))
}

/// The complete slot map as `conn` (a cluster node at `addr`) sees it, the nodes reached
/// on their TLS ports when `tls`.
async fn read_slot_map(
    conn: &NodeConn,
    addr: &NodeAddr,
    tls: bool,
) -> Result<SlotMap, MigrateError> {
    let port = if tls { NodePort::Tls } else { NodePort::Plain };
    crate::topology::read_slot_map(conn, addr, &HashMap::new(), port, Coverage::Complete)
        .await
        .map_err(|e| MigrateError::Redis(format!("{addr}: {e}")))
}

async fn raw_call(conn: &NodeConn, args: &[&[u8]]) -> Result<Bytes, MigrateError> {
    conn.call(encode_request(args), false)
        .await
        .map_err(|e| MigrateError::Redis(e.to_string()))
}

async fn call_conn(conn: &NodeConn, args: &[&[u8]]) -> Result<Reply, MigrateError> {
    let raw = raw_call(conn, args).await?;
    Reply::read(&raw)
}
