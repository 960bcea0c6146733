//! The load the fault scenarios drive through the proxy, and what it remembers.
//!
//! Each client is one thread with one connection that owns its keys (`c<i>:s<k>` strings,
//! `c<i>:n<k>` counters, `c<i>:l<k>` lists, spread over every master) and writes increasing
//! tokens: `SET` of a token, `INCR`, `RPUSH` of a token, and reads the strings and counters
//! back. Every reply is checked against the client's own model of its keys at once, and
//! every error is kept with the time its request started and ended.
//!
//! Invariants of the model: a write acknowledged with a reply is *acked*; a write answered
//! with an error (or no answer) has an unknown outcome and is *pending* (it may have run, also
//! later). A read may return the newest acked value or a pending value written after it;
//! an older value the client wrote is a *loss* of the acked writes after it; any other value
//! is *wrong*. Requests are sequential per client, so tokens are applied in the order sent.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Keys of each kind (string, counter, list) per client.
const KEYS_PER_KIND: usize = 8;
/// A request that takes longer than this is recorded as slow.
pub const SLOW_OP: Duration = Duration::from_millis(750);
/// A client's read timeout: a reply that does not come within it is a hang, kept as an error.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Wait before the next attempt after a failed connect.
const RECONNECT_PAUSE: Duration = Duration::from_millis(20);

/// What kind of value a key holds, and so how its replies are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `SET key token`, read with `GET`.
    Str,
    /// `INCR key`, read with `GET`.
    Counter,
    /// `RPUSH key token`, read with `LRANGE` at the end.
    List,
}

/// One key a client owns, and what it knows about its value.
pub struct KeyModel {
    /// The key's name.
    pub key: String,
    /// How it is written and read.
    pub kind: Kind,
    /// Acked tokens (string values, counter values, list elements) with their ack times.
    acked: Vec<(u64, Duration)>,
    /// Strings and lists: tokens written with an unknown outcome since the last ack (for a
    /// list, ever). Counters: one entry per `INCR` with an unknown outcome since the last ack.
    pending: Vec<u64>,
    /// Strings: every token ever written, so an old value is told from a made-up one.
    sent: BTreeSet<u64>,
}

/// An acked write that a later read or the final state shows gone.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Loss {
    /// The key written.
    pub key: String,
    /// The token that was acked and then lost.
    pub token: u64,
    /// When it was acked, since the load started.
    pub acked_at: Duration,
}

/// An error a client saw.
#[derive(Clone, Debug)]
pub struct ErrorEvent {
    /// The key of the request (empty for a failed connect).
    pub key: String,
    /// The command (`SET`, `INCR`, `RPUSH`, `GET`, or `connect`).
    pub op: &'static str,
    /// When the request was sent, since the load started.
    pub started: Duration,
    /// When its error came back.
    pub ended: Duration,
    /// The error as the `redis` crate shows it.
    pub text: String,
    /// Whether the connection itself failed (refused, closed, reset, timed out) rather than
    /// the proxy answering with an error reply.
    pub connection: bool,
}

/// A request that took longer than [`SLOW_OP`], answered or not.
#[derive(Clone, Debug)]
pub struct SlowOp {
    /// The key of the request.
    pub key: String,
    /// When it was sent, since the load started.
    pub started: Duration,
    /// When it was answered.
    pub ended: Duration,
}

/// Everything one client saw.
pub struct ClientLog {
    /// The client's number.
    pub client: usize,
    /// Its keys, with their models.
    pub keys: Vec<KeyModel>,
    /// Every error, in order.
    pub errors: Vec<ErrorEvent>,
    /// Replies that no write of the client explains.
    pub wrong: Vec<String>,
    /// Acked writes shown lost by a later reply.
    pub losses: Vec<Loss>,
    /// Requests slower than [`SLOW_OP`].
    pub slow: Vec<SlowOp>,
    /// When each acked write was acked.
    pub ack_times: Vec<Duration>,
}

/// How hard the load runs.
#[derive(Clone, Copy, Debug)]
pub struct LoadShape {
    /// Client connections, one thread each.
    pub clients: usize,
    /// Pause after each request, so the load leaves the machine's cores to the cluster.
    pub op_pause: Duration,
}

/// Clients running against one address until stopped.
pub struct Load {
    epoch: Instant,
    stop: Arc<AtomicBool>,
    clients: Vec<JoinHandle<ClientLog>>,
}

impl Load {
    /// Starts `shape.clients` clients against `addr` (the proxy).
    pub fn start(addr: &str, shape: LoadShape) -> Load {
        let epoch = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let clients = (0..shape.clients)
            .map(|client| {
                let (addr, stop) = (addr.to_string(), stop.clone());
                thread::spawn(move || {
                    let mut log = ClientLog::new(client);
                    log.run(&addr, &stop, epoch, shape.op_pause);
                    log
                })
            })
            .collect();
        Load {
            epoch,
            stop,
            clients,
        }
    }

    /// Now, as the time since the load started (the clock of every recorded event).
    pub fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Lets the load run for `span`.
    pub fn run_for(&self, span: Duration) {
        thread::sleep(span);
    }

    /// Stops the clients and returns their logs.
    pub fn stop(self) -> Vec<ClientLog> {
        self.stop.store(true, Ordering::Relaxed);
        self.clients
            .into_iter()
            .map(|client| client.join().expect("a load client panicked"))
            .collect()
    }
}

/// A request's outcome: its reply, or whether the connection is still usable after its error.
enum Outcome {
    Reply(redis::Value),
    Failed { keep_connection: bool },
}

impl ClientLog {
    fn new(client: usize) -> ClientLog {
        let mut keys = Vec::new();
        for (kind, letter) in [(Kind::Str, 's'), (Kind::Counter, 'n'), (Kind::List, 'l')] {
            for k in 0..KEYS_PER_KIND {
                keys.push(KeyModel::new(format!("c{client}:{letter}{k}"), kind));
            }
        }
        ClientLog {
            client,
            keys,
            errors: Vec::new(),
            wrong: Vec::new(),
            losses: Vec::new(),
            slow: Vec::new(),
            ack_times: Vec::new(),
        }
    }

    fn run(&mut self, addr: &str, stop: &AtomicBool, epoch: Instant, op_pause: Duration) {
        let mut con: Option<redis::Connection> = None;
        let (mut step, mut token) = (0usize, 0u64);
        while !stop.load(Ordering::Relaxed) {
            let Some(connection) = con.as_mut() else {
                let started = epoch.elapsed();
                match connect(addr) {
                    Ok(fresh) => con = Some(fresh),
                    Err(e) => {
                        self.error("", "connect", started, epoch.elapsed(), &e);
                        thread::sleep(RECONNECT_PAUSE);
                    }
                }
                continue;
            };
            token += 1;
            if !self.step(connection, step, token, epoch) {
                con = None;
            }
            step += 1;
            if !op_pause.is_zero() {
                thread::sleep(op_pause);
            }
        }
    }

    /// One request of the rotation; false if the connection must be replaced.
    fn step(
        &mut self,
        con: &mut redis::Connection,
        step: usize,
        token: u64,
        epoch: Instant,
    ) -> bool {
        let k = (step / 5) % KEYS_PER_KIND;
        // Reads go to keys written half a rotation ago, so they usually have a value.
        let read = (k + KEYS_PER_KIND / 2) % KEYS_PER_KIND;
        let (index, op) = match step % 5 {
            0 => (k, "SET"),
            1 => (KEYS_PER_KIND + k, "INCR"),
            2 => (2 * KEYS_PER_KIND + k, "RPUSH"),
            3 => (read, "GET"),
            _ => (KEYS_PER_KIND + read, "GET"),
        };
        let key = self.keys[index].key.clone();
        let mut cmd = redis::cmd(op);
        cmd.arg(&key);
        if op == "SET" || op == "RPUSH" {
            cmd.arg(token);
            self.keys[index].sent.insert(token);
        }
        let started = epoch.elapsed();
        let outcome = self.call(con, &cmd, &key, op, started, epoch);
        let now = epoch.elapsed();
        let model = &mut self.keys[index];
        let verdict = match outcome {
            Outcome::Failed { keep_connection } => {
                match op {
                    "SET" | "RPUSH" => model.pending.push(token),
                    "INCR" => model.pending.push(0),
                    _ => {}
                }
                return keep_connection;
            }
            Outcome::Reply(value) => match (op, value) {
                ("SET", redis::Value::Okay) => model.ack(token, now),
                ("INCR", redis::Value::Int(n)) => model.after_incr(n, now),
                ("RPUSH", redis::Value::Int(n)) => model.after_push(token, n, now),
                ("GET", value) => match as_token(&value) {
                    Ok(seen) => model.observe(seen, now),
                    Err(e) => Verdict::Wrong(e),
                },
                (_, other) => Verdict::Wrong(format!("reply {other:?}")),
            },
        };
        match verdict {
            Verdict::Acked => self.ack_times.push(now),
            Verdict::Ok => {}
            Verdict::Lost(losses) => {
                self.losses.extend(losses);
                if op != "GET" {
                    self.ack_times.push(now);
                }
            }
            Verdict::Wrong(what) => self.wrong.push(format!("{op} {key} at {now:?}: {what}")),
        }
        true
    }

    fn call(
        &mut self,
        con: &mut redis::Connection,
        cmd: &redis::Cmd,
        key: &str,
        op: &'static str,
        started: Duration,
        epoch: Instant,
    ) -> Outcome {
        let result: redis::RedisResult<redis::Value> = cmd.query(con);
        let ended = epoch.elapsed();
        if ended - started > SLOW_OP {
            self.slow.push(SlowOp {
                key: key.to_string(),
                started,
                ended,
            });
        }
        match result {
            Ok(value) => Outcome::Reply(value),
            // The test process was stopped and resumed while it waited (the read timeout
            // makes that EINTR): not the proxy's error. The outcome is unknown, as after any
            // failure, and the late reply would put the stream out of step.
            Err(e) if crate::common::interrupted(&e) => Outcome::Failed {
                keep_connection: false,
            },
            Err(e) => {
                self.error(key, op, started, ended, &e);
                // After anything but an error reply the stream may be out of step.
                Outcome::Failed {
                    keep_connection: e.code().is_some(),
                }
            }
        }
    }

    fn error(
        &mut self,
        key: &str,
        op: &'static str,
        started: Duration,
        ended: Duration,
        e: &redis::RedisError,
    ) {
        self.errors.push(ErrorEvent {
            key: key.to_string(),
            op,
            started,
            ended,
            text: e.to_string(),
            connection: e.code().is_none(),
        });
    }

    /// Checks the final state of every key (as read from its master) against the model.
    pub fn check_final(&mut self, key: &str, state: &redis::Value, now: Duration) {
        let Some(model) = self.keys.iter_mut().find(|m| m.key == key) else {
            panic!("{key} is not a key of client {}", self.client);
        };
        let verdict = match (model.kind, state) {
            (Kind::List, redis::Value::Array(items)) => {
                match items.iter().map(as_token).collect::<Result<Vec<_>, _>>() {
                    Ok(items) => model.check_list(&items.into_iter().flatten().collect::<Vec<_>>()),
                    Err(e) => Verdict::Wrong(e),
                }
            }
            (Kind::List, other) => Verdict::Wrong(format!("LRANGE gave {other:?}")),
            (_, value) => match as_token(value) {
                Ok(seen) => model.observe(seen, now),
                Err(e) => Verdict::Wrong(e),
            },
        };
        match verdict {
            Verdict::Lost(losses) => self.losses.extend(losses),
            Verdict::Wrong(what) => self.wrong.push(format!("final {key}: {what}")),
            Verdict::Ok | Verdict::Acked => {}
        }
    }
}

/// What a reply says about the model.
enum Verdict {
    /// A write was acked.
    Acked,
    /// A read agrees with the model.
    Ok,
    /// These acked writes are gone.
    Lost(Vec<Loss>),
    /// Nothing the client wrote explains the reply.
    Wrong(String),
}

impl KeyModel {
    fn new(key: String, kind: Kind) -> KeyModel {
        KeyModel {
            key,
            kind,
            acked: Vec::new(),
            pending: Vec::new(),
            sent: BTreeSet::new(),
        }
    }

    fn newest(&self) -> u64 {
        self.acked.last().map_or(0, |(token, _)| *token)
    }

    fn ack(&mut self, token: u64, now: Duration) -> Verdict {
        self.acked.push((token, now));
        self.pending.clear();
        Verdict::Acked
    }

    /// The acked tokens after `kept`, dropped from the model as lost.
    fn lose_after(&mut self, kept: u64) -> Verdict {
        let first_lost = self.acked.partition_point(|(token, _)| *token <= kept);
        let lost = self.acked.split_off(first_lost);
        Verdict::Lost(
            lost.into_iter()
                .map(|(token, acked_at)| Loss {
                    key: self.key.clone(),
                    token,
                    acked_at,
                })
                .collect(),
        )
    }

    /// A read of a string or counter: `seen` is its value (`None`: no key).
    fn observe(&mut self, seen: Option<u64>, now: Duration) -> Verdict {
        let newest = self.newest();
        match self.kind {
            Kind::Counter => {
                let seen = seen.unwrap_or(0);
                let pending = self.pending.len() as u64;
                if seen < newest {
                    return self.lose_after(seen);
                }
                if seen > newest + pending {
                    return Verdict::Wrong(format!(
                        "{seen}, but {newest} acked and {pending} INCRs unanswered"
                    ));
                }
                if seen > newest {
                    // Some unanswered INCRs ran: the value is now known.
                    self.acked.push((seen, now));
                    self.pending.truncate((newest + pending - seen) as usize);
                }
                Verdict::Ok
            }
            Kind::Str | Kind::List => match seen {
                None if self.acked.is_empty() => Verdict::Ok,
                None => self.lose_after(0),
                Some(seen) if self.acked.last().is_some_and(|(t, _)| *t == seen) => Verdict::Ok,
                Some(seen) if self.pending.contains(&seen) => {
                    self.acked.push((seen, now));
                    self.pending.retain(|token| *token > seen);
                    Verdict::Ok
                }
                Some(seen) if self.sent.contains(&seen) && seen < newest => self.lose_after(seen),
                Some(seen) => Verdict::Wrong(format!(
                    "{seen}, but {newest} acked and {:?} unanswered",
                    self.pending
                )),
            },
        }
    }

    fn after_incr(&mut self, value: i64, now: Duration) -> Verdict {
        let value = u64::try_from(value).unwrap_or(0);
        let newest = self.newest();
        let pending = self.pending.len() as u64;
        if value > newest + 1 + pending {
            return Verdict::Wrong(format!(
                "INCR gave {value}, but {newest} acked and {pending} INCRs unanswered"
            ));
        }
        let lost = if value <= newest {
            self.lose_after(value - 1)
        } else {
            Verdict::Acked
        };
        self.ack(value, now);
        lost
    }

    fn after_push(&mut self, token: u64, length: i64, now: Duration) -> Verdict {
        let most = (self.acked.len() + self.pending.len() + 1) as i64;
        if length > most {
            return Verdict::Wrong(format!("RPUSH gave length {length}, at most {most} pushed"));
        }
        // Earlier unanswered pushes stay possible: a list keeps them all.
        self.acked.push((token, now));
        Verdict::Acked
    }

    /// The final elements of a list: increasing, each pushed by the client, every acked one
    /// present.
    fn check_list(&mut self, items: &[u64]) -> Verdict {
        if let Some(pair) = items.windows(2).find(|pair| pair[0] >= pair[1]) {
            return Verdict::Wrong(format!("elements out of order: {pair:?} in {items:?}"));
        }
        let present: BTreeSet<u64> = items.iter().copied().collect();
        let acked: BTreeSet<u64> = self.acked.iter().map(|(token, _)| *token).collect();
        if let Some(stray) = present
            .iter()
            .find(|token| !acked.contains(token) && !self.pending.contains(token))
        {
            return Verdict::Wrong(format!("element {stray} was never pushed"));
        }
        let lost: Vec<Loss> = self
            .acked
            .iter()
            .filter(|(token, _)| !present.contains(token))
            .map(|(token, acked_at)| Loss {
                key: self.key.clone(),
                token: *token,
                acked_at: *acked_at,
            })
            .collect();
        if lost.is_empty() {
            Verdict::Ok
        } else {
            Verdict::Lost(lost)
        }
    }
}

/// A connection to `addr` whose replies time out after [`CLIENT_TIMEOUT`].
fn connect(addr: &str) -> redis::RedisResult<redis::Connection> {
    let client = crate::common::redis_client(addr);
    let con = crate::common::connect_through_stops(&client, Duration::from_secs(1))?;
    con.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    con.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    Ok(con)
}

/// A token from a GET reply or a list element (`None` for nil).
fn as_token(value: &redis::Value) -> Result<Option<u64>, String> {
    match value {
        redis::Value::Nil => Ok(None),
        redis::Value::BulkString(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .map(Some)
            .ok_or_else(|| format!("not a token: {:?}", String::from_utf8_lossy(bytes))),
        other => Err(format!("not a token: {other:?}")),
    }
}
