//! The floor: the least a proxy in front of a Redis Cluster can do per request, as a target
//! of `bench/run.sh --fleet --floor`. One thread, one epoll loop (mio), one connection per
//! master. Each client request goes, bytes unchanged, to the master of its first key's slot;
//! its reply comes back unchanged and goes to the client in the order of the client's
//! requests (a pipeline spread over masters is answered in order, as by Redis). Requests read
//! in one pass over the ready clients leave in one write per master, replies in one write per
//! client: the syscalls any proxy of unpipelined clients makes. No redirects, no errors
//! translated, no limits, no metrics: not a proxy to run, a bound to measure against (what a
//! proxy whose own code costs next to nothing reaches on the same host).
//!
//! Takes the proxy's arguments (`--listen ADDR --cluster SEED,...`) and ignores the others,
//! so the bench starts it as it starts the proxy.

use std::collections::{HashMap, VecDeque};
use std::io::{self, ErrorKind, Read, Write};
use std::net::SocketAddr;

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use slotbridge::protocol::{Limits, ReplyScanner};
use slotbridge::route::{key_slot, SlotMap};

const LISTENER: Token = Token(usize::MAX);
const READ_CHUNK: usize = 16 * 1024;

fn main() -> io::Result<()> {
    let (listen, seed) = arguments()?;
    let mut floor = Floor::connect(slot_map(&seed)?)?;
    let mut listener = TcpListener::bind(listen)?;
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    for (index, master) in floor.masters.iter_mut().enumerate() {
        poll.registry().register(
            &mut master.stream,
            Token(index),
            Interest::READABLE | Interest::WRITABLE,
        )?;
    }
    let mut events = Events::with_capacity(1024);
    loop {
        match poll.poll(&mut events, None) {
            // A stop and resume of the process (a paused host) interrupts the wait.
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            result => result?,
        }
        for event in events.iter() {
            match event.token() {
                LISTENER => floor.accept(&listener, &poll)?,
                Token(index) if index < floor.masters.len() => floor.master_ready(index)?,
                Token(token) => floor.client_ready(token - floor.masters.len(), &poll),
            }
        }
        floor.flush();
    }
}

/// `--listen ADDR` and the first of `--cluster SEED,...`.
fn arguments() -> io::Result<(SocketAddr, String)> {
    let args: Vec<String> = std::env::args().collect();
    let value = |flag: &str| {
        args.iter()
            .position(|arg| arg == flag)
            .and_then(|at| args.get(at + 1))
            .ok_or_else(|| io::Error::new(ErrorKind::InvalidInput, format!("{flag} missing")))
    };
    let listen = value("--listen")?
        .parse()
        .map_err(|e| io::Error::new(ErrorKind::InvalidInput, format!("--listen: {e}")))?;
    let seed = value("--cluster")?.split(',').next().unwrap_or_default();
    Ok((listen, seed.to_string()))
}

/// Which master serves each slot, from CLUSTER SLOTS of `seed` (the proxy's own reading).
fn slot_map(seed: &str) -> io::Result<SlotMap> {
    let mut stream = std::net::TcpStream::connect(seed)?;
    stream.write_all(b"CLUSTER SLOTS\r\n")?;
    let mut reply = Vec::new();
    let mut scanner = ReplyScanner::new(Limits::default());
    let mut chunk = [0u8; 4096];
    while scanner.next_frame_len(&reply).map_err(invalid)?.is_none() {
        match stream.read(&mut chunk)? {
            0 => return Err(io::Error::new(ErrorKind::UnexpectedEof, "CLUSTER SLOTS")),
            n => reply.extend_from_slice(&chunk[..n]),
        }
    }
    SlotMap::from_cluster_slots(&reply, seed, &HashMap::new()).map_err(invalid)
}

fn invalid(error: impl std::fmt::Debug) -> io::Error {
    io::Error::new(ErrorKind::InvalidData, format!("{error:?}"))
}

struct Master {
    stream: TcpStream,
    output: Vec<u8>,
    input: Vec<u8>,
    scanner: ReplyScanner,
    /// The requests (client index, generation, the client's request number) waiting for
    /// this master's next replies, in order.
    waiting: VecDeque<(usize, u32, u64)>,
}

struct Client {
    stream: TcpStream,
    input: Vec<u8>,
    output: Vec<u8>,
    order: ReplyOrder,
}

/// The order a client's replies leave in: its requests'.
#[derive(Default)]
struct ReplyOrder {
    /// The number of the oldest request not yet answered, and the requests from it on: a
    /// reply that came in before an earlier request's waits in its place.
    first_unanswered: u64,
    unanswered: VecDeque<Option<Vec<u8>>>,
}

impl ReplyOrder {
    /// The number of a new request.
    fn push(&mut self) -> u64 {
        self.unanswered.push_back(None);
        self.first_unanswered + self.unanswered.len() as u64 - 1
    }

    /// Appends the reply to request `number` to `output` if it is next in order, with every
    /// reply waiting behind it; keeps it in its place otherwise.
    fn answer(&mut self, number: u64, reply: &[u8], output: &mut Vec<u8>) {
        let at = (number - self.first_unanswered) as usize;
        if at > 0 {
            self.unanswered[at] = Some(reply.to_vec());
            return;
        }
        output.extend_from_slice(reply);
        self.unanswered.pop_front();
        self.first_unanswered += 1;
        while let Some(Some(_)) = self.unanswered.front() {
            let reply = self.unanswered.pop_front().flatten().unwrap_or_default();
            output.extend_from_slice(&reply);
            self.first_unanswered += 1;
        }
    }
}

struct Floor {
    masters: Vec<Master>,
    slots: SlotMap,
    /// Clients by index; a closed client's place is reused, its generation bumped, so a late
    /// reply to it is dropped.
    clients: Vec<Option<Client>>,
    generations: Vec<u32>,
    free: Vec<usize>,
    dirty_masters: Vec<bool>,
    dirty_clients: Vec<usize>,
    chunk: Vec<u8>,
}

impl Floor {
    fn connect(slots: SlotMap) -> io::Result<Floor> {
        let mut conns = Vec::new();
        for addr in slots.masters() {
            let stream = std::net::TcpStream::connect(&**addr)?;
            stream.set_nodelay(true)?;
            stream.set_nonblocking(true)?;
            conns.push(Master {
                stream: TcpStream::from_std(stream),
                output: Vec::new(),
                input: Vec::new(),
                scanner: ReplyScanner::new(Limits::default()),
                waiting: VecDeque::new(),
            });
        }
        Ok(Floor {
            dirty_masters: vec![false; conns.len()],
            masters: conns,
            slots,
            clients: Vec::new(),
            free: Vec::new(),
            generations: Vec::new(),
            dirty_clients: Vec::new(),
            chunk: vec![0; READ_CHUNK],
        })
    }

    fn accept(&mut self, listener: &TcpListener, poll: &Poll) -> io::Result<()> {
        loop {
            let mut stream = match listener.accept() {
                Ok((stream, _)) => stream,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            };
            stream.set_nodelay(true)?;
            let index = self.free.pop().unwrap_or_else(|| {
                self.clients.push(None);
                self.generations.push(0);
                self.clients.len() - 1
            });
            let token = Token(index + self.masters.len());
            poll.registry().register(
                &mut stream,
                token,
                Interest::READABLE | Interest::WRITABLE,
            )?;
            self.clients[index] = Some(Client {
                stream,
                input: Vec::new(),
                output: Vec::new(),
                order: ReplyOrder::default(),
            });
        }
    }

    /// Reads what the client sent and queues each complete request to its master.
    fn client_ready(&mut self, index: usize, poll: &Poll) {
        let Some(client) = self.clients[index].as_mut() else {
            return;
        };
        let open = write_out(&mut client.stream, &mut client.output)
            && read_in(&mut client.stream, &mut self.chunk, &mut client.input).unwrap_or(false);
        let mut start = 0;
        while let Some((len, key)) = request(&client.input[start..]) {
            let master = match key {
                Some((at, key_len)) => {
                    let key = &client.input[start + at..start + at + key_len];
                    self.slots.master_index(key_slot(key)).unwrap_or(0)
                }
                None => 0,
            };
            let target = &mut self.masters[master];
            target
                .output
                .extend_from_slice(&client.input[start..start + len]);
            let number = client.order.push();
            target
                .waiting
                .push_back((index, self.generations[index], number));
            self.dirty_masters[master] = true;
            start += len;
        }
        client.input.drain(..start);
        if !open {
            let mut client = self.clients[index].take().expect("checked above");
            let _ = poll.registry().deregister(&mut client.stream);
            self.generations[index] = self.generations[index].wrapping_add(1);
            self.free.push(index);
        }
    }

    /// Reads the master's replies and hands each to the client that waits for it.
    fn master_ready(&mut self, index: usize) -> io::Result<()> {
        let master = &mut self.masters[index];
        write_out(&mut master.stream, &mut master.output);
        if !read_in(&mut master.stream, &mut self.chunk, &mut master.input)? {
            return Err(io::Error::new(ErrorKind::UnexpectedEof, "master closed"));
        }
        let mut start = 0;
        while let Some(len) = master
            .scanner
            .next_frame_len(&master.input[start..])
            .map_err(invalid)?
        {
            let (client, generation, number) = master
                .waiting
                .pop_front()
                .ok_or_else(|| io::Error::new(ErrorKind::InvalidData, "reply to no request"))?;
            let waiter = self.clients[client].as_mut();
            if let Some(waiter) = waiter.filter(|_| self.generations[client] == generation) {
                if waiter.output.is_empty() {
                    self.dirty_clients.push(client);
                }
                let reply = &master.input[start..start + len];
                waiter.order.answer(number, reply, &mut waiter.output);
            }
            start += len;
        }
        master.input.drain(..start);
        Ok(())
    }

    /// Sends what this pass queued: one write per master, one per client.
    fn flush(&mut self) {
        for (master, dirty) in self.masters.iter_mut().zip(&mut self.dirty_masters) {
            if std::mem::take(dirty) {
                write_out(&mut master.stream, &mut master.output);
            }
        }
        for index in self.dirty_clients.drain(..) {
            if let Some(client) = self.clients[index].as_mut() {
                write_out(&mut client.stream, &mut client.output);
            }
        }
    }
}

/// Appends what the socket has to `input`, through `chunk`. False once the peer closed.
fn read_in(stream: &mut TcpStream, chunk: &mut [u8], input: &mut Vec<u8>) -> io::Result<bool> {
    loop {
        match stream.read(chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                input.extend_from_slice(&chunk[..n]);
                // A short read took all there was (the next data is a new edge).
                if n < chunk.len() {
                    return Ok(true);
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(true),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Writes as much of `output` as the socket takes; what it does not take waits for the
/// socket's next writable event. False once the peer is gone.
fn write_out(stream: &mut TcpStream, output: &mut Vec<u8>) -> bool {
    let mut written = 0;
    let mut open = true;
    while written < output.len() {
        match stream.write(&output[written..]) {
            Ok(n) => written += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => {
                open = false;
                break;
            }
        }
    }
    output.drain(..written);
    open
}

/// The length of the complete request at the front of `buf` and where its first key is
/// (offset, length), if it has arguments past the command name. Inline requests go whole to
/// the first master (PING, as the bench's readiness check sends it). Not the proxy's
/// `RequestDecoder`, which builds the whole request: the floor reads only the key.
fn request(buf: &[u8]) -> Option<(usize, Option<(usize, usize)>)> {
    let line_end = |from: usize| {
        buf.get(from..)?
            .windows(2)
            .position(|w| w == b"\r\n")
            .map(|at| from + at)
    };
    let number = |from: usize, to: usize| -> Option<usize> {
        std::str::from_utf8(&buf[from..to]).ok()?.parse().ok()
    };
    if *buf.first()? != b'*' {
        return Some((line_end(0)? + 2, None));
    }
    let end = line_end(1)?;
    let count = number(1, end)?;
    let mut at = end + 2;
    let mut key = None;
    for arg in 0..count {
        if *buf.get(at)? != b'$' {
            return None;
        }
        let end = line_end(at + 1)?;
        let len = number(at + 1, end)?;
        if arg == 1 {
            key = Some((end + 2, len));
        }
        at = end + 2 + len + 2;
        if at > buf.len() {
            return None;
        }
    }
    Some((at, key))
}

#[cfg(test)]
mod tests {
    use super::{request, ReplyOrder};

    #[test]
    fn replies_leave_in_the_order_of_their_requests() {
        let mut order = ReplyOrder::default();
        let numbers: Vec<u64> = (0..4).map(|_| order.push()).collect();
        assert_eq!(numbers, [0, 1, 2, 3]);
        let mut output = Vec::new();
        order.answer(2, b"c", &mut output);
        order.answer(1, b"b", &mut output);
        assert!(output.is_empty(), "the first reply is not in yet");
        order.answer(0, b"a", &mut output);
        assert_eq!(output, b"abc");
        order.answer(3, b"d", &mut output);
        assert_eq!(output, b"abcd");
        assert_eq!(order.push(), 4);
    }

    #[test]
    fn a_request_is_measured_and_its_first_key_found() {
        let get = b"*2\r\n$3\r\nGET\r\n$5\r\nkey:1\r\n*1\r\n$4\r\nPING\r\n";
        let (len, key) = request(get).unwrap();
        assert_eq!(len, 24);
        let (at, key_len) = key.unwrap();
        assert_eq!(&get[at..at + key_len], b"key:1");
        assert_eq!(request(&get[len..]), Some((14, None)));
    }

    #[test]
    fn an_incomplete_request_waits_for_more() {
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n";
        for cut in 0..set.len() {
            assert_eq!(request(&set[..cut]), None, "cut at {cut}");
        }
        assert_eq!(request(set).map(|(len, _)| len), Some(set.len()));
    }

    #[test]
    fn an_inline_request_goes_whole_to_the_first_master() {
        assert_eq!(request(b"PING\r\nPI"), Some((6, None)));
        assert_eq!(request(b"PIN"), None);
    }
}
