//! The commands a database other than the cluster's one needs carried out in steps:
//! KEYS, SCAN, RANDOMKEY, DBSIZE and FLUSHDB scoped to the client's database, MOVE and
//! COPY ... DB between databases, SWAPDB refused.
//!
//! Costs, as the README states them: KEYS and SCAN in database `n > 0` go to the nodes
//! with the database's pattern (`MATCH __db<n>:...`); in database 0 they go as sent and
//! the other databases' keys are dropped from the reply (a SCAN page may come back
//! shorter, as a MATCH page does). DBSIZE and FLUSHDB walk the keyspace with SCAN: in
//! database `n > 0` the database's keys, in database 0 the others' (to subtract from the
//! cluster's DBSIZE, skipped while the in-use marker is absent: see `rewrite::database`)
//! or every key (to delete the database's own, by UNLINK). RANDOMKEY
//! asks the nodes' RANDOMKEY a few times for a key of the database, then takes the first
//! one a SCAN finds. None of these is atomic: keys written while they walk may or may not
//! be counted or deleted, as with a SCAN.

use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{Bytes, BytesMut};
use smallvec::{smallvec, SmallVec};

use crate::protocol::encode;
use crate::protocol::{parse_i64, ElementFrames, Proto, ReplyView, Request};
use crate::reply;
use crate::reply::merge;
use crate::rewrite::database::{self, OTHER_DATABASES_PATTERN};

use super::super::Proxy;
use super::request_of;

/// Whether a client of this proxy process has selected a database other than 0 since it
/// started. A fact about the process's clients, not about one configuration, so it
/// outlives reloads (each reload makes a new `Proxy` snapshot).
static DATABASES_SELECTED: AtomicBool = AtomicBool::new(false);

/// The commands the database layer carries out itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbCommand {
    Keys,
    Scan,
    RandomKey,
    DbSize,
    FlushDb,
    Move,
    SwapDb,
    /// COPY with a `DB` option naming this database.
    CopyTo(u32),
    /// `INFO keyspace`, a line per database (see `keyspace`).
    InfoKeyspace,
}

/// The COUNT of the SCANs that walk the keyspace, and the most keys one UNLINK deletes.
const WALK_COUNT: &[u8] = b"1000";

impl Proxy {
    /// Runs `command` (the request `request`) for a client in database `db`, after the
    /// command policy and `user`'s ACL (on the names the client sent) allow it.
    pub async fn run_in_database(
        self: std::sync::Arc<Self>,
        db: u32,
        command: DbCommand,
        request: Request,
        proto: Proto,
        user: Option<&crate::auth::User>,
    ) -> Bytes {
        if let Some(refusal) = self.admit(&request, user) {
            return refusal;
        }
        let scope = Scope {
            db,
            databases: self.config.databases,
        };
        let args = &request.args;
        match command {
            DbCommand::Keys => {
                let pattern = scope.pattern(&args[1]);
                let keys = self.ask_args(&[b"KEYS", &pattern], proto).await;
                scope.keep_own(keys)
            }
            DbCommand::Scan => self.scan(scope, args, proto).await,
            DbCommand::RandomKey => self.random_key_in(scope, proto).await,
            DbCommand::DbSize => self.db_size(scope).await,
            DbCommand::FlushDb => self.flush_db(scope, args).await,
            DbCommand::Move => self.move_key(scope, args).await,
            DbCommand::SwapDb => reply::error(reply::database::SWAPDB_REFUSED),
            DbCommand::InfoKeyspace => self.info_keyspace(proto).await,
            DbCommand::CopyTo(to) => {
                let mut copy: SmallVec<[Bytes; 4]> = smallvec![
                    args[0].clone(),
                    scope.stored(db, &args[1]),
                    scope.stored(to, &args[2]),
                ];
                if args[3..].iter().any(|a| a.eq_ignore_ascii_case(b"replace")) {
                    copy.push(Bytes::from_static(b"REPLACE"));
                }
                self.execute(request_of(copy), proto).await
            }
        }
    }

    /// One request of `args` through the whole proxy (policy and fan-out included).
    pub(super) async fn ask_args(
        self: &std::sync::Arc<Self>,
        args: &[&[u8]],
        proto: Proto,
    ) -> Bytes {
        let args = args.iter().map(|a| Bytes::copy_from_slice(a)).collect();
        self.clone().execute(request_of(args), proto).await
    }

    /// SCAN with the database's MATCH (every MATCH given, or one added), the page's keys
    /// shown in the database's names.
    async fn scan(
        self: &std::sync::Arc<Self>,
        scope: Scope,
        args: &[Bytes],
        proto: Proto,
    ) -> Bytes {
        let mut sent: SmallVec<[Bytes; 4]> = args.iter().cloned().collect();
        if scope.db != 0 {
            let mut matched = false;
            let mut i = 2;
            while i + 1 < sent.len() {
                if sent[i].eq_ignore_ascii_case(b"match") {
                    sent[i + 1] = scope.pattern(&sent[i + 1]);
                    matched = true;
                }
                i += 2;
            }
            if !matched {
                sent.push(Bytes::from_static(b"MATCH"));
                sent.push(scope.pattern(b"*"));
            }
        }
        let reply = self.clone().execute(request_of(sent), proto).await;
        let Some([cursor, keys]) =
            ReplyView::element_frames(&reply).and_then(ElementFrames::exactly::<2>)
        else {
            return reply;
        };
        let keys = scope.keep_own(reply.slice_ref(keys));
        let mut out = BytesMut::with_capacity(reply.len());
        encode::array_header(&mut out, 2);
        out.extend_from_slice(cursor);
        out.extend_from_slice(&keys);
        out.freeze()
    }

    async fn random_key_in(self: &std::sync::Arc<Self>, scope: Scope, proto: Proto) -> Bytes {
        // As many answers as a master's draw takes (see `route::draw`) before a SCAN looks.
        for _ in 0..crate::route::draw::RANDOM_DRAWS {
            let reply = self.ask_args(&[b"RANDOMKEY"], Proto::Resp2).await;
            match ReplyView::parse(&reply) {
                Ok(ReplyView::Bulk(key)) => {
                    if let Some(name) = scope.own_name(key) {
                        return encode::bulk_frame(name);
                    }
                }
                Ok(ReplyView::Null) => return encode::null_frame(proto),
                _ if reply.first() == Some(&b'-') => return reply,
                _ => return encode::null_frame(proto),
            }
        }
        // The database's own keys: for database 0 that is every key (the others' are
        // filtered out), not `walk_pattern`'s other databases, which hold none of its keys.
        let mut walk = Walk::new(scope.pattern(b"*"));
        loop {
            match walk.page(self).await {
                Err(error) => return error,
                Ok(None) => return encode::null_frame(proto),
                Ok(Some(keys)) => {
                    if let Some(name) = keys.iter().find_map(|key| scope.own_name(key)) {
                        return encode::bulk_frame(name);
                    }
                }
            }
        }
    }

    /// Database `n > 0`: its keys counted by SCAN. Database 0: the cluster's DBSIZE, less
    /// the other databases' keys counted by SCAN when the in-use marker says there may be
    /// some.
    async fn db_size(self: &std::sync::Arc<Self>, scope: Scope) -> Bytes {
        let total = match scope.db {
            0 => {
                let reply = self.ask_args(&[b"DBSIZE"], Proto::Resp2).await;
                match merge::integer(&reply) {
                    Some(total) => total,
                    None => return reply,
                }
            }
            _ => 0,
        };
        if scope.db == 0 {
            match self.other_databases_in_use().await {
                Ok(false) => return encode::integer_frame(total),
                Ok(true) => {}
                Err(error) => return error,
            }
        }
        let mut walk = Walk::new(scope.walk_pattern());
        let mut counted = 0i64;
        loop {
            match walk.page(self).await {
                Err(error) => return error,
                Ok(None) => break,
                Ok(Some(keys)) => {
                    counted += keys.iter().filter(|key| scope.counts(key)).count() as i64;
                }
            }
        }
        encode::integer_frame(if scope.db == 0 {
            total - counted
        } else {
            counted
        })
    }

    /// Whether a database other than 0 may hold keys: the in-use marker is present (see
    /// `rewrite::database`). `Err` is the node's error.
    pub(super) async fn other_databases_in_use(self: &std::sync::Arc<Self>) -> Result<bool, Bytes> {
        let reply = self
            .ask_args(&[b"EXISTS", database::IN_USE_MARKER], Proto::Resp2)
            .await;
        merge::integer(&reply).map(|n| n > 0).ok_or(reply)
    }

    /// SELECT of database `n > 0` (the session answers it): writes the in-use marker
    /// before the client is told `+OK`, so every key it writes there is written after
    /// the marker. A failure to write it is logged and SELECT still succeeds: what it
    /// costs is database 0's counts including other databases' keys until the next
    /// SELECT writes it, where refusing would fail a client the cluster may serve.
    pub async fn mark_other_databases_in_use(self: std::sync::Arc<Self>) -> Bytes {
        DATABASES_SELECTED.store(true, Ordering::Relaxed);
        self.write_in_use_marker().await;
        Bytes::from_static(b"+OK\r\n")
    }

    /// After FLUSHALL, which deleted the marker: written again when a client of this
    /// proxy has selected a database other than 0, as it may still write there without
    /// selecting it again.
    pub(in crate::dispatch) async fn mark_again_after_flushall(&self) {
        if DATABASES_SELECTED.load(Ordering::Relaxed) {
            self.write_in_use_marker().await;
        }
    }

    /// `SET` of the in-use marker on its master; a failure is logged (see
    /// [`Proxy::mark_other_databases_in_use`] for what it costs).
    async fn write_in_use_marker(&self) {
        let slot = crate::route::key_slot(database::IN_USE_MARKER);
        let request =
            crate::protocol::encode::encode_request(&[b"SET", database::IN_USE_MARKER, b"1"]);
        let reply = self
            .upstream
            .forward(super::super::Target::Slot(slot), request, Proto::Resp2)
            .await;
        if reply.first() == Some(&b'-') {
            tracing::warn!(
                reply = %String::from_utf8_lossy(&reply).trim_end(),
                "could not write the in-use marker of databases other than 0"
            );
        }
    }

    /// FLUSHDB [ASYNC|SYNC]: the database's keys found by SCAN, deleted by UNLINK page by
    /// page (SCAN still returns every key present throughout).
    async fn flush_db(self: &std::sync::Arc<Self>, scope: Scope, args: &[Bytes]) -> Bytes {
        let mode_ok = |mode: &Bytes| {
            mode.eq_ignore_ascii_case(b"async") || mode.eq_ignore_ascii_case(b"sync")
        };
        if args.len() > 2 || args.get(1).is_some_and(|mode| !mode_ok(mode)) {
            return reply::error(reply::text::SYNTAX);
        }
        let mut walk = Walk::new(match scope.db {
            0 => Bytes::from_static(b"*"),
            _ => scope.walk_pattern(),
        });
        loop {
            let keys = match walk.page(self).await {
                Err(error) => return error,
                Ok(None) => return Bytes::from_static(b"+OK\r\n"),
                Ok(Some(keys)) => keys,
            };
            let mut unlink: SmallVec<[Bytes; 4]> = smallvec![Bytes::from_static(b"UNLINK")];
            unlink.extend(keys.into_iter().filter(|key| scope.own_name(key).is_some()));
            if unlink.len() > 1 {
                let reply = self.clone().execute(request_of(unlink), Proto::Resp2).await;
                if reply.first() == Some(&b'-') {
                    return reply;
                }
            }
        }
    }

    /// MOVE key db: COPY to the other database's name, then DEL of the source when the
    /// copy was made. A failure between the two leaves the key in both databases, never
    /// in neither.
    async fn move_key(self: &std::sync::Arc<Self>, scope: Scope, args: &[Bytes]) -> Bytes {
        let Some(to) = parse_i64(&args[2]) else {
            return reply::error(reply::text::NOT_AN_INTEGER);
        };
        let Some(to) = u32::try_from(to).ok().filter(|&to| to < scope.databases) else {
            return reply::error(reply::text::SELECT_RANGE);
        };
        if to == scope.db {
            return reply::error(reply::database::SAME_OBJECT);
        }
        let source = scope.stored(scope.db, &args[1]);
        let target = scope.stored(to, &args[1]);
        let copied = self
            .ask_args(&[b"COPY", &source, &target], Proto::Resp2)
            .await;
        if merge::integer(&copied) != Some(1) {
            return copied;
        }
        let deleted = self.ask_args(&[b"DEL", &source], Proto::Resp2).await;
        if deleted.first() == Some(&b'-') {
            return deleted;
        }
        encode::integer_frame(1)
    }
}

/// The client's database among `databases`.
#[derive(Debug, Clone, Copy)]
struct Scope {
    db: u32,
    databases: u32,
}

impl Scope {
    /// A client's key or pattern as stored in database `db`.
    fn stored(&self, db: u32, name: &[u8]) -> Bytes {
        database::in_database(&database::prefix(db), name)
    }

    /// A client's glob pattern for the nodes.
    fn pattern(&self, pattern: &[u8]) -> Bytes {
        self.stored(self.db, pattern)
    }

    /// What a walk of the keyspace asks the nodes for: the database's keys, or for
    /// database 0 the others' (for DBSIZE; FLUSHDB walks every key).
    fn walk_pattern(&self) -> Bytes {
        match self.db {
            0 => Bytes::from_static(OTHER_DATABASES_PATTERN),
            _ => self.pattern(b"*"),
        }
    }

    /// The name of a stored key in the client's database, `None` for another's key.
    fn own_name<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        database::name_in(key, self.db, self.databases)
    }

    /// Whether a key a walk found counts towards DBSIZE: in database 0 the walk finds the
    /// other databases' keys (to subtract), elsewhere the database's own.
    fn counts(&self, key: &[u8]) -> bool {
        match self.db {
            0 => database::split(key, self.databases).0 != 0,
            _ => self.own_name(key).is_some(),
        }
    }

    /// An array reply of stored key names (KEYS, a SCAN page) as the client's database
    /// shows it: its keys, without the prefix. Errors and other shapes pass.
    fn keep_own(&self, reply: Bytes) -> Bytes {
        let Ok(view) = ReplyView::parse(&reply) else {
            return reply;
        };
        let Some(elements) = view.elements() else {
            return reply;
        };
        let mut kept: Vec<&[u8]> = Vec::with_capacity(elements.len());
        for element in elements {
            match element {
                ReplyView::Bulk(key) => {
                    if let Some(name) = self.own_name(key) {
                        kept.push(name);
                    }
                }
                _ => return reply,
            }
        }
        let mut out = BytesMut::with_capacity(reply.len());
        encode::array_header(&mut out, kept.len());
        for name in kept {
            encode::bulk(&mut out, name);
        }
        out.freeze()
    }
}

/// A walk of the whole keyspace by SCAN `MATCH pattern`, page by page.
pub(super) struct Walk {
    pattern: Bytes,
    /// The next cursor; `None` once the walk is over.
    cursor: Option<Bytes>,
}

impl Walk {
    pub(super) fn new(pattern: Bytes) -> Walk {
        Walk {
            pattern,
            cursor: Some(Bytes::from_static(b"0")),
        }
    }

    /// The next page's keys (`None`: the walk is over), or the error a SCAN answered.
    pub(super) async fn page(
        &mut self,
        proxy: &std::sync::Arc<Proxy>,
    ) -> Result<Option<Vec<Bytes>>, Bytes> {
        let Some(cursor) = self.cursor.take() else {
            return Ok(None);
        };
        let args: &[&[u8]] = &[
            b"SCAN",
            &cursor,
            b"MATCH",
            &self.pattern,
            b"COUNT",
            WALK_COUNT,
        ];
        let reply = proxy.ask_args(args, Proto::Resp2).await;
        let Some([cursor, keys]) =
            ReplyView::element_frames(&reply).and_then(ElementFrames::exactly::<2>)
        else {
            return Err(reply);
        };
        let Ok(ReplyView::Bulk(next)) = ReplyView::parse(cursor) else {
            return Err(reply);
        };
        if next != b"0" {
            self.cursor = Some(Bytes::copy_from_slice(next));
        }
        let keys = ReplyView::parse(keys)
            .ok()
            .and_then(|view| view.elements())
            .ok_or_else(|| reply.clone())?
            .filter_map(|element| match element {
                ReplyView::Bulk(key) => Some(Bytes::copy_from_slice(key)),
                _ => None,
            })
            .collect();
        Ok(Some(keys))
    }
}
