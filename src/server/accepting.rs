//! A client listener as the accept loop holds it: the TCP options every client socket
//! carries, set once on the listener, and the addresses of each connection it accepts.
//!
//! Linux gives an accepted socket the options of its listener, so `TCP_NODELAY` and the
//! keepalive (`tcp_keepalive`) set there reach every client without a system call of its
//! own; with its two addresses taken from the accept and the listener, a client costs five
//! system calls less to take in, which a fleet's connect burst pays thousands of times
//! before the first requests can leave. `SO_SNDBUF` stays per socket
//! (`limits.client_send_buffer_bytes`): set on a listener it could never go back to the
//! kernel's own sizing, which a reload to 0 asks for.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use socket2::{SockRef, TcpKeepalive};
use tokio::net::{TcpListener, TcpStream};

use crate::client::Ends;
use crate::config::Config;

/// A connection as accepted, with both its ends' addresses.
pub(super) struct Accepted {
    pub stream: TcpStream,
    pub ends: Ends,
}

/// A client listener, the options its clients get, and whether it gives them itself.
pub(super) struct Accepting {
    listener: TcpListener,
    /// Its address where it is bound to one (not `0.0.0.0` or `::`): every client's local
    /// address.
    bound: Option<SocketAddr>,
    /// `tcp_keepalive` as last set (seconds, 0 for none).
    keepalive: u64,
    /// Whether the listener holds the options (its clients inherit them).
    inherited: bool,
    /// Connections established before the listener's options last changed (they kept the
    /// ones before), taken from the backlog at the change and given the options one by one;
    /// handed out before any other.
    early: VecDeque<Accepted>,
}

impl Accepting {
    /// `listener`, its clients' options set from `config`.
    pub(super) fn new(listener: TcpListener, config: &Config) -> Accepting {
        let bound = listener
            .local_addr()
            .ok()
            .filter(|addr| !addr.ip().is_unspecified());
        let mut accepting = Accepting {
            listener,
            bound,
            keepalive: config.tcp_keepalive,
            inherited: false,
            early: VecDeque::new(),
        };
        accepting.set_on_listener();
        accepting
    }

    /// Follows a reload: clients connecting from now on get its `tcp_keepalive`, and so do
    /// those waiting in the backlog. Returns whether the options changed: a client accepted
    /// since the reload, not from the backlog, needs them too (`give_options`).
    pub(super) fn follow(&mut self, config: &Config) -> bool {
        if config.tcp_keepalive == self.keepalive {
            return false;
        }
        self.keepalive = config.tcp_keepalive;
        if self.inherited {
            self.set_on_listener();
        }
        true
    }

    /// Sets the options on the listener, then takes the connections it holds already (see
    /// `early`). Where that fails, every client is given them itself.
    fn set_on_listener(&mut self) {
        if let Err(error) = set_options(&SockRef::from(&self.listener), self.keepalive) {
            tracing::warn!(%error, "client socket options not set on the listener; set on each client");
            self.inherited = false;
            return;
        }
        self.inherited = true;
        loop {
            match self.take_waiting() {
                Ok(accepted) => self.early.push_back(accepted),
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return,
                // Out of file descriptors and the like: the accept loop takes the rest,
                // with the options they have.
                Err(error) => {
                    tracing::warn!(%error, "accept failed");
                    return;
                }
            }
        }
    }

    /// A connection waiting in the backlog, given the options; `WouldBlock` when none waits.
    fn take_waiting(&self) -> io::Result<Accepted> {
        let (socket, addr) = SockRef::from(&self.listener).accept()?;
        socket.set_nonblocking(true)?;
        let peer = addr
            .as_socket()
            .ok_or_else(|| io::Error::other("a TCP client without an address"))?;
        let stream = TcpStream::from_std(socket.into())?;
        give_options(&stream, self.keepalive);
        Ok(self.accepted(stream, peer))
    }

    /// `stream` with its addresses.
    fn accepted(&self, stream: TcpStream, peer: SocketAddr) -> Accepted {
        let local = match self.bound {
            Some(addr) => addr,
            None => stream.local_addr().unwrap_or(peer),
        };
        Accepted {
            stream,
            ends: Ends { peer, local },
        }
    }

    /// The next connection; not held to Tokio's budget of a turn (128 operations), so one
    /// turn takes every connection waiting, as Redis's accept handler does: a fleet
    /// reconnecting at once otherwise fills the backlog while the sessions already in take
    /// their turns.
    pub(super) async fn accept(&mut self) -> io::Result<Accepted> {
        if let Some(accepted) = self.early.pop_front() {
            return Ok(accepted);
        }
        let (stream, peer) = tokio::task::unconstrained(self.listener.accept()).await?;
        if !self.inherited {
            give_options(&stream, self.keepalive);
        }
        Ok(self.accepted(stream, peer))
    }
}

/// The next connection of `accepting`, if there is a listener; never returns without one.
pub(super) async fn next(accepting: Option<&mut Accepting>) -> io::Result<Accepted> {
    match accepting {
        Some(accepting) => accepting.accept().await,
        None => std::future::pending().await,
    }
}

/// Gives `stream` the options itself, where the listener did not (see `Accepting::follow`).
/// Best effort, as when every client was given them: a client without them is served all
/// the same.
pub(super) fn give_options(stream: &TcpStream, keepalive: u64) {
    let _ = set_options(&SockRef::from(stream), keepalive);
}

/// `TCP_NODELAY`, as Redis sets on every client, and TCP keepalive probes after
/// `keepalive` seconds of quiet (none for 0), as Redis's `tcp-keepalive`.
fn set_options(socket: &SockRef<'_>, keepalive: u64) -> io::Result<()> {
    socket.set_tcp_nodelay(true)?;
    if keepalive > 0 {
        let time = Duration::from_secs(keepalive);
        socket.set_tcp_keepalive(&TcpKeepalive::new().with_time(time))
    } else {
        socket.set_keepalive(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(keepalive: u64) -> Config {
        Config {
            tcp_keepalive: keepalive,
            ..Config::default()
        }
    }

    /// What the kernel says of an accepted socket: nodelay, and the keepalive time if on.
    fn options(stream: &TcpStream) -> (bool, Option<Duration>) {
        let socket = SockRef::from(stream);
        let keepalive = socket.keepalive().unwrap();
        let time = keepalive.then(|| socket.tcp_keepalive_time().unwrap());
        (socket.tcp_nodelay().unwrap(), time)
    }

    #[tokio::test]
    async fn accepted_clients_carry_the_listeners_options_and_addresses() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut accepting = Accepting::new(listener, &config(300));
        assert!(accepting.inherited);
        // Nothing waited: a client's options come from the listener alone.
        assert!(accepting.early.is_empty());
        let client =
            std::net::TcpStream::connect(accepting.listener.local_addr().unwrap()).unwrap();
        let accepted = accepting.accept().await.unwrap();
        assert_eq!(accepted.ends.peer, client.local_addr().unwrap());
        assert_eq!(accepted.ends.local, client.peer_addr().unwrap());
        assert_eq!(
            options(&accepted.stream),
            (true, Some(Duration::from_secs(300)))
        );
    }

    #[tokio::test]
    async fn a_reload_reaches_clients_waiting_in_the_backlog_and_later_ones() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut accepting = Accepting::new(listener, &config(300));
        // Established before the change: inherits 300 s from the listener.
        let _early = std::net::TcpStream::connect(addr).unwrap();
        accepting.follow(&config(100));
        let accepted = accepting.accept().await.unwrap();
        assert_eq!(
            options(&accepted.stream),
            (true, Some(Duration::from_secs(100))),
            "a client queued before the reload kept the old keepalive"
        );
        // Later clients inherit the new options.
        assert!(accepting.early.is_empty());
        let _late = std::net::TcpStream::connect(addr).unwrap();
        let accepted = accepting.accept().await.unwrap();
        assert_eq!(
            options(&accepted.stream),
            (true, Some(Duration::from_secs(100)))
        );
        // Off: neither the listener nor a later client has keepalive.
        accepting.follow(&config(0));
        let _off = std::net::TcpStream::connect(addr).unwrap();
        let accepted = accepting.accept().await.unwrap();
        assert_eq!(options(&accepted.stream), (true, None));
        assert!(!SockRef::from(&accepting.listener).keepalive().unwrap());
    }

    #[tokio::test]
    async fn a_wildcard_listener_asks_each_client_its_local_address() {
        let listener = TcpListener::bind("0.0.0.0:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut accepting = Accepting::new(listener, &config(300));
        assert_eq!(accepting.bound, None);
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let accepted = accepting.accept().await.unwrap();
        assert_eq!(accepted.ends.local, client.peer_addr().unwrap());
        assert_eq!(accepted.ends.local.ip().to_string(), "127.0.0.1");
        assert_eq!(accepted.ends.peer, client.local_addr().unwrap());
    }
}
