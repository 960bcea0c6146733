//! One client connection: read, decode, dispatch, and write replies in request order.
//!
//! Requests are dispatched as soon as they are decoded, so a pipeline runs in parallel
//! across masters; their replies are collected in a `FuturesOrdered`, which yields them in
//! request order. Replies that are ready together leave in one write. At most
//! `max_pipeline` commands of one client are in flight; past that the session stops
//! reading (TCP back-pressure) until replies drain.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use futures_util::future::{ready, Either};
use futures_util::stream::{FuturesOrdered, StreamExt};
use futures_util::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::dispatch::Proxy;
use crate::protocol::{Proto, RequestDecoder};
use crate::reply;

use super::local::{self, ConnState};
use super::pubsub::{Intercept, PubSub, Relay};
use super::registry::Registry;
use super::transaction::{Step, Transaction};

const READ_BUFFER: usize = 16 * 1024;

/// Serves one client until it disconnects, sends QUIT, or breaks the protocol.
pub async fn serve(stream: TcpStream, proxy: Arc<Proxy>, registry: Arc<Registry>) {
    let peer = stream
        .peer_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    let local_addr = stream.local_addr().unwrap_or(peer);
    let _ = stream.set_nodelay(true);
    let guard = registry.register(peer, local_addr);
    let counted = crate::metrics::ClientConnection::opened();
    let mut state = ConnState {
        id: guard.id,
        proto: Proto::Resp2,
        name: None,
    };
    let (mut reader, mut writer) = stream.into_split();
    let max_pipeline = proxy.config.limits.max_pipeline;
    let mut decoder = RequestDecoder::new(proxy.config.limits.protocol());
    let mut input = BytesMut::with_capacity(READ_BUFFER);
    let mut output = BytesMut::new();
    let mut in_flight = FuturesOrdered::new();
    // Set once the connection must end after the replies already queued (QUIT, bad input).
    let mut closing = false;
    let mut transaction = Transaction::default();
    let mut pubsub = PubSub::new(proxy.clone(), state.id);
    // A decoded request waiting for the replies before it (a transaction sequence point),
    // and whether a sequence point is in flight, so nothing after it may start yet.
    let mut held = None;
    let mut sequence_point = false;

    loop {
        // Turn buffered bytes into dispatched requests, as far as the pipeline limit allows.
        while !closing && in_flight.len() < max_pipeline {
            if sequence_point && !in_flight.is_empty() {
                break;
            }
            sequence_point = false;
            let decoded = match held.take() {
                Some(request) => Ok(Some(request)),
                None => decoder.decode(&mut input),
            };
            match decoded {
                Ok(Some(request))
                    if !in_flight.is_empty() && Transaction::is_sequence_point(&request) =>
                {
                    held = Some(request);
                    break;
                }
                Ok(Some(request)) => match transaction.handle(&proxy, state.proto, &request) {
                    Step::Reply(reply) => in_flight.push_back(Either::Left(ready(reply))),
                    Step::Run(run) => {
                        sequence_point = true;
                        in_flight.push_back(Either::Right(Either::Left(run)));
                    }
                    Step::Pass => match pubsub.intercept(&request, state.proto) {
                        Intercept::Reply(reply) => in_flight.push_back(Either::Left(ready(reply))),
                        Intercept::Pending(reply) => {
                            in_flight.push_back(Either::Right(Either::Right(Either::Right(reply))))
                        }
                        Intercept::Pass => match local::answer(&mut state, &registry, &request) {
                            Some(answer) => {
                                closing |= answer.close;
                                in_flight.push_back(Either::Left(ready(answer.reply)));
                            }
                            None => {
                                let run = proxy.clone().execute(request, state.proto);
                                in_flight
                                    .push_back(Either::Right(Either::Right(Either::Left(run))));
                            }
                        },
                    },
                },
                Ok(None) => break,
                Err(error) => {
                    tracing::debug!(client = %peer, %error, "closing client after protocol error");
                    in_flight.push_back(Either::Left(ready(reply::error(&format!("ERR {error}")))));
                    closing = true;
                }
            }
        }
        if closing && in_flight.is_empty() {
            break;
        }
        let can_read = !closing && held.is_none() && in_flight.len() < max_pipeline;
        tokio::select! {
            biased;
            Some(first) = in_flight.next(), if !in_flight.is_empty() => {
                output.extend_from_slice(&first);
                // Everything else already answered leaves in the same write.
                while let Some(Some(more)) = in_flight.next().now_or_never() {
                    output.extend_from_slice(&more);
                }
                // A subscriber that stopped reading must not hold its messages forever.
                tokio::select! {
                    written = writer.write_all(&output) => if written.is_err() {
                        break;
                    },
                    () = pubsub.overflowed() => break,
                }
                counted.sent(output.len());
                output.clear();
            }
            relay = pubsub.next_event(), if !closing => match relay {
                // Behind the replies already queued: never ahead of its own confirmation.
                Relay::Push(message) => in_flight.push_back(Either::Left(ready(message))),
                Relay::Close => break,
                Relay::Idle => {}
            },
            read = reader.read_buf(&mut input), if can_read => {
                match read {
                    Ok(0) | Err(_) => break,
                    Ok(n) => counted.received(n),
                }
                if input.capacity() - input.len() < 1024 {
                    input.reserve(READ_BUFFER);
                }
            }
        }
    }
    let _ = writer.shutdown().await;
    drop(guard);
}
