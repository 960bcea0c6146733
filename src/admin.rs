//! The admin HTTP endpoint: `GET /metrics` (Prometheus text), `GET /healthz` (the process
//! is up), `GET /readyz` (the proxy can serve every slot), `POST /reload`, and a live
//! migration's `GET /migration` (its status as JSON), `POST /migration/pause` and
//! `POST /migration/resume`.
//!
//! A small hand-written HTTP/1.1 server rather than hyper: a few routes, one request per
//! connection, no bodies. Invariants: a request head is read up to [`MAX_REQUEST`] bytes and
//! [`REQUEST_TIMEOUT`]; every response carries `Content-Length` and `Connection: close`, then
//! the connection is closed; no input can panic the handler (bad requests get 400, oversized
//! ones 431); at most [`MAX_CONNECTIONS`] admin connections are served at once.

use std::io::{Read, Write};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::backend::NodeConn;
use crate::live::Migration;
use crate::protocol::Proto;
use crate::route::SLOT_COUNT;
use crate::topology::{Readiness, Topology};

/// Largest request head accepted.
pub const MAX_REQUEST: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Admin connections served at once; more wait in the accept queue.
pub const MAX_CONNECTIONS: usize = 32;
/// How long `/readyz` waits for each master to answer PING.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What the admin endpoints look at.
pub struct AdminState {
    /// The start-up upstream, for `/readyz` until the live proxy is attached to
    /// `readiness` (then its current upstream is checked instead).
    pub topology: Arc<Topology>,
    /// The drain flag, for `/readyz`.
    pub readiness: Arc<Readiness>,
    /// The Prometheus recorder's handle; `None` when metrics are disabled.
    pub metrics: Option<PrometheusHandle>,
    /// The live migration, set once it is connected (after the endpoint starts answering);
    /// unset when none is configured.
    pub migration: OnceLock<Arc<Migration>>,
}

impl AdminState {
    /// `Ok` when the slot map covers every slot and every master answers; otherwise why not.
    pub async fn ready(&self) -> Result<(), String> {
        if self.readiness.is_draining() {
            return Err("draining".into());
        }
        let topology = self
            .readiness
            .live()
            .map(|live| live.topology())
            .unwrap_or_else(|| self.topology.clone());
        if let Some(reason) = topology.master_unknown() {
            return Err(reason);
        }
        let routing = arc_swap::Guard::into_inner(topology.routing());
        let covered = routing.map.slots_covered();
        if covered < SLOT_COUNT {
            return Err(format!("slot map covers {covered} of {SLOT_COUNT} slots"));
        }
        // Every master, connected or not: a hung node keeps its connection open.
        let probes = routing
            .map
            .masters()
            .iter()
            .zip(routing.masters())
            .map(|(addr, conns)| probe_master(addr, conns.get(Proto::Resp2)));
        let failures: Vec<String> = join_all(probes)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        if failures.is_empty() {
            Ok(())
        } else {
            Err(failures.join("; "))
        }
    }
}

/// PINGs one master over its shared connection: the PING joins that connection's pipeline,
/// and reconnects it when it is down.
async fn probe_master(addr: &str, conn: &NodeConn) -> Result<(), String> {
    let ping = conn.call(Bytes::from_static(b"*1\r\n$4\r\nPING\r\n"), false);
    match tokio::time::timeout(PROBE_TIMEOUT, ping).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(format!("master {addr} unreachable: {e}")),
        Err(_) => Err(format!("master {addr} did not answer PING in time")),
    }
}

/// Binds the admin listener.
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves admin requests forever.
pub async fn serve(listener: TcpListener, state: Arc<AdminState>) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                let state = state.clone();
                tokio::spawn(async move {
                    handle_connection(stream, &state).await;
                    drop(permit);
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "admin accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A route, decided from the request line alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics`: the Prometheus text exposition.
    Metrics,
    /// `GET /healthz`: the process is up.
    Healthz,
    /// `GET /readyz`: the proxy can serve commands.
    Readyz,
    /// `POST /reload`: re-read the configuration file (as SIGHUP).
    Reload,
    /// `GET /migration`: the live migration's status, JSON.
    Migration,
    /// `POST /migration/pause` (`true`) or `POST /migration/resume` (`false`): pause or
    /// resume the migration's walker, until the next reload sets `migration.paused` again.
    MigrationPause(bool),
    /// A known path with a method it does not take; the method it does take, for `Allow`.
    MethodNotAllowed(&'static str),
    /// A path the endpoint does not serve.
    NotFound,
    /// A request line that is not HTTP/1.x.
    BadRequest,
}

/// Routes a request head (everything up to the blank line).
pub fn route(head: &[u8]) -> Route {
    let line_end = head
        .windows(2)
        .position(|w| w == b"\r\n")
        .unwrap_or(head.len());
    let Ok(line) = std::str::from_utf8(&head[..line_end]) else {
        return Route::BadRequest;
    };
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if method.is_empty() || !version.starts_with("HTTP/1.") {
        return Route::BadRequest;
    }
    let path = target.split('?').next().unwrap_or(target);
    let (route, wants) = match path {
        "/metrics" => (Route::Metrics, "GET"),
        "/healthz" => (Route::Healthz, "GET"),
        "/readyz" => (Route::Readyz, "GET"),
        "/migration" => (Route::Migration, "GET"),
        "/reload" => (Route::Reload, "POST"),
        "/migration/pause" => (Route::MigrationPause(true), "POST"),
        "/migration/resume" => (Route::MigrationPause(false), "POST"),
        _ => return Route::NotFound,
    };
    if method == wants {
        route
    } else {
        Route::MethodNotAllowed(wants)
    }
}

/// A response: status, content type, body.
struct Response {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
    /// The method a 405's path takes (its `Allow` header).
    allow: Option<&'static str>,
}

impl Response {
    fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
            allow: None,
        }
    }

    fn method_not_allowed(allow: &'static str) -> Response {
        Response {
            allow: Some(allow),
            ..Response::text(405, "method not allowed\n")
        }
    }

    fn json(body: String) -> Response {
        Response {
            status: 200,
            content_type: "application/json",
            body: body.into_bytes(),
            allow: None,
        }
    }

    fn to_bytes(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            202 => "Accepted",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            408 => "Request Timeout",
            431 => "Request Header Fields Too Large",
            _ => "Service Unavailable",
        };
        let allow = match self.allow {
            Some(method) => format!("Allow: {method}\r\n"),
            None => String::new(),
        };
        let mut out = format!(
            "HTTP/1.1 {} {reason}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{allow}Connection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

/// How reading a request head ended.
enum Head {
    Complete(Vec<u8>),
    TooLarge,
    TimedOut,
    Closed,
}

async fn read_head(stream: &mut TcpStream) -> Head {
    let mut buf = Vec::with_capacity(1024);
    let read = async {
        let mut chunk = [0u8; 1024];
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                buf.truncate(end + 4);
                return Head::Complete(std::mem::take(&mut buf));
            }
            if buf.len() >= MAX_REQUEST {
                return Head::TooLarge;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return Head::Closed,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(REQUEST_TIMEOUT, read)
        .await
        .unwrap_or(Head::TimedOut)
}

async fn handle_connection(mut stream: TcpStream, state: &AdminState) {
    let response = match read_head(&mut stream).await {
        Head::Complete(head) => respond(route(&head), state).await,
        Head::TooLarge => Response::text(431, "request too large\n"),
        Head::TimedOut => Response::text(408, "request timeout\n"),
        Head::Closed => return,
    };
    let _ = stream.write_all(&response.to_bytes()).await;
    let _ = stream.shutdown().await;
}

async fn respond(route: Route, state: &AdminState) -> Response {
    match route {
        Route::Metrics => match &state.metrics {
            Some(handle) => {
                crate::metrics::publish_client_totals();
                let mut body = handle.render();
                if let Some(live) = state.readiness.live() {
                    live.render_command_metrics(&mut body);
                }
                if let Some(migration) = state.migration.get() {
                    crate::live::metrics::render_migration(&migration.status(), &mut body);
                }
                Response {
                    status: 200,
                    content_type: "text/plain; version=0.0.4; charset=utf-8",
                    body: body.into_bytes(),
                    allow: None,
                }
            }
            None => Response::text(404, "metrics are disabled\n"),
        },
        Route::Healthz => Response::text(200, "ok\n"),
        Route::Readyz => match state.ready().await {
            Ok(()) => Response::text(200, "ready\n"),
            Err(reason) => Response::text(503, format!("not ready: {reason}\n")),
        },
        Route::Reload => {
            // The outcome is logged and counted in slotbridge_config_reloads_total.
            crate::reload::request();
            Response::text(202, "reload requested\n")
        }
        Route::Migration | Route::MigrationPause(_) => {
            migration_response(route, state.migration.get().map(|m| &**m)).await
        }
        Route::MethodNotAllowed(allow) => Response::method_not_allowed(allow),
        Route::NotFound => Response::text(404, "not found\n"),
        Route::BadRequest => Response::text(400, "bad request\n"),
    }
}

/// `GET /migration` and the pause and resume calls: the status after the call, or 404 when
/// no migration is configured. A pause set here lasts until the next reload, which sets the
/// walker as `migration.paused` says. A resume also releases a hold on the end (a checked
/// value differed) for every proxy; 503 when the target could not be told.
async fn migration_response(route: Route, migration: Option<&Migration>) -> Response {
    let Some(migration) = migration else {
        return Response::text(404, "no live migration is configured\n");
    };
    match route {
        Route::MigrationPause(true) => {
            tracing::info!("live migration: walker paused by the admin endpoint");
            migration.set_paused(true);
        }
        Route::MigrationPause(false) => {
            if let Some(why) = migration.end_held() {
                tracing::warn!(reason = %why, "live migration: the end's hold released");
            }
            tracing::info!("live migration: walker resumed by the admin endpoint");
            if let Err(e) = migration.resume().await {
                return Response::text(503, format!("resume failed: {e}\n"));
            }
        }
        _ => {}
    }
    Response::json(migration.status().to_json())
}

/// A blocking `GET path` against an admin address, for the `healthcheck` subcommand:
/// returns the status code. A wildcard host (`0.0.0.0`, `[::]`) is probed on loopback.
pub fn probe(addr: &str, path: &str, timeout: Duration) -> Result<u16, String> {
    request(addr, "GET", path, timeout).map(|(status, _)| status)
}

/// Largest response body [`request`] reads: a status or metrics page, never more.
const MAX_RESPONSE: usize = 4 * 1024 * 1024;

/// A blocking `method path` (no request body) against an admin address, for the CLI's
/// admin calls: returns the status code and the body. A wildcard host (`0.0.0.0`, `[::]`)
/// is reached on loopback. The endpoint closes every connection after its response, so
/// the response is read to its end.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("'{addr}' is not host:port"))?;
    let host = match host {
        "0.0.0.0" | "" => "127.0.0.1",
        "[::]" => "[::1]",
        other => other,
    };
    let target = format!("{host}:{port}");
    let socket = std::net::ToSocketAddrs::to_socket_addrs(&target)
        .map_err(|e| format!("{target}: {e}"))?
        .next()
        .ok_or_else(|| format!("{target}: no address"))?;
    let mut stream = std::net::TcpStream::connect_timeout(&socket, timeout)
        .map_err(|e| format!("{target}: {e}"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(|e| e.to_string())?;
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {target}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("{target}: {e}"))?;
    let mut reply = Vec::new();
    // A read that fails after some bytes still leaves a status line to report.
    if let Err(e) = (&mut stream)
        .take(MAX_RESPONSE as u64)
        .read_to_end(&mut reply)
    {
        if reply.is_empty() {
            return Err(format!("{target}: {e}"));
        }
    }
    parse_response(&reply).ok_or_else(|| format!("{target}: not an HTTP response"))
}

/// The status code and body of a whole HTTP/1.1 response.
fn parse_response(reply: &[u8]) -> Option<(u16, String)> {
    let text = String::from_utf8_lossy(reply);
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Some((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_method_and_path() {
        assert_eq!(route(b"GET /metrics HTTP/1.1\r\n\r\n"), Route::Metrics);
        assert_eq!(
            route(b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n"),
            Route::Healthz
        );
        assert_eq!(
            route(b"GET /readyz?verbose=1 HTTP/1.1\r\n\r\n"),
            Route::Readyz
        );
        assert_eq!(
            route(b"POST /metrics HTTP/1.1\r\n\r\n"),
            Route::MethodNotAllowed("GET")
        );
        assert_eq!(
            route(b"HEAD /healthz HTTP/1.1\r\n\r\n"),
            Route::MethodNotAllowed("GET")
        );
        assert_eq!(route(b"GET /nope HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(route(b"DELETE /nope HTTP/1.1\r\n\r\n"), Route::NotFound);
    }

    #[test]
    fn migration_routes_take_their_method_only() {
        assert_eq!(route(b"GET /migration HTTP/1.1\r\n\r\n"), Route::Migration);
        assert_eq!(
            route(b"POST /migration/pause HTTP/1.1\r\n\r\n"),
            Route::MigrationPause(true)
        );
        assert_eq!(
            route(b"POST /migration/resume HTTP/1.1\r\nContent-Length: 0\r\n\r\n"),
            Route::MigrationPause(false)
        );
        assert_eq!(
            route(b"POST /migration HTTP/1.1\r\n\r\n"),
            Route::MethodNotAllowed("GET")
        );
        assert_eq!(
            route(b"GET /migration/pause HTTP/1.1\r\n\r\n"),
            Route::MethodNotAllowed("POST")
        );
        assert_eq!(
            route(b"GET /reload HTTP/1.1\r\n\r\n"),
            Route::MethodNotAllowed("POST")
        );
        assert_eq!(route(b"POST /reload HTTP/1.1\r\n\r\n"), Route::Reload);
        assert_eq!(
            route(b"POST /migration/stop HTTP/1.1\r\n\r\n"),
            Route::NotFound
        );
    }

    #[tokio::test]
    async fn migration_routes_without_a_migration_answer_404() {
        for route in [
            Route::Migration,
            Route::MigrationPause(true),
            Route::MigrationPause(false),
        ] {
            let response = migration_response(route, None).await;
            assert_eq!(response.status, 404, "{route:?}");
            assert_eq!(response.body, b"no live migration is configured\n");
        }
    }

    #[test]
    fn a_response_is_read_back_with_its_body() {
        let bytes = Response::json("{\"state\":\"done\"}".into()).to_bytes();
        let text = String::from_utf8(bytes.clone()).unwrap();
        assert!(
            text.contains("Content-Type: application/json\r\n"),
            "{text}"
        );
        assert_eq!(
            parse_response(&bytes),
            Some((200, "{\"state\":\"done\"}".to_owned()))
        );
        assert_eq!(
            parse_response(b"HTTP/1.1 404 Not Found\r\n"),
            Some((404, String::new()))
        );
        assert_eq!(parse_response(b"SSH-2.0-OpenSSH\r\n"), None);
        let accepted = Response::text(202, "reload requested\n").to_bytes();
        assert!(accepted.starts_with(b"HTTP/1.1 202 Accepted\r\n"));
    }

    #[test]
    fn garbage_is_a_bad_request() {
        for head in [
            &b""[..],
            b"\r\n\r\n",
            b"GET\r\n\r\n",
            b"GET /metrics\r\n\r\n",
            b"GET /metrics SPDY/3\r\n\r\n",
            b"GET /metrics HTTP/1.1 extra\r\n\r\n",
            b"\xff\xfe /metrics HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(route(head), Route::BadRequest, "{head:?}");
        }
    }

    #[test]
    fn response_has_length_and_close() {
        let bytes = Response::text(503, "not ready: x\n").to_bytes();
        let text = String::from_utf8(bytes).unwrap();
        assert!(text.starts_with("HTTP/1.1 503 Service Unavailable\r\n"));
        assert!(text.contains("Content-Length: 13\r\n"));
        assert!(text.contains("Connection: close\r\n\r\nnot ready: x\n"));
    }

    #[test]
    fn drain_is_one_way() {
        let readiness = Readiness::new();
        assert!(!readiness.is_draining());
        readiness.start_drain();
        assert!(readiness.is_draining());
    }
}
