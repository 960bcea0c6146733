//! Multi-key commands whose keys span slots: one sub-request per slot (not per key), sent
//! in parallel, merged back in the client's key order. Only commands whose split result is
//! what one Redis would answer are split; everything else gets `-CROSSSLOT`.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use futures_util::future::join_all;

use crate::command::CommandSpec;
use crate::protocol::Proto;
use crate::reply::merge;
use crate::route::key_slot;

use super::{Proxy, Target};

/// The commands that can be split by slot, and how their parts merge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// MGET: values in key order.
    Mget,
    /// MSET: OK only when every part is.
    Mset,
    /// DEL, UNLINK, EXISTS, TOUCH: counts summed.
    Count,
}

impl Kind {
    /// Whether `spec` can be split.
    pub fn of(spec: &CommandSpec) -> Option<Kind> {
        match spec.name.as_str() {
            "mget" => Some(Kind::Mget),
            "mset" => Some(Kind::Mset),
            "del" | "unlink" | "exists" | "touch" => Some(Kind::Count),
            _ => None,
        }
    }

    /// Arguments per key: a key, or a key and its value.
    fn stride(self) -> usize {
        match self {
            Kind::Mset => 2,
            Kind::Mget | Kind::Count => 1,
        }
    }
}

/// One slot's share of a split command.
struct Part {
    slot: u16,
    /// Positions (in key order) of this part's keys in the original request.
    key_order: Vec<usize>,
    request: BytesMut,
    argc: usize,
}

impl Proxy {
    /// Splits a multi-key request by slot, runs the parts in parallel, merges the replies.
    pub(super) async fn split(
        &self,
        kind: Kind,
        request: &crate::protocol::Request,
        proto: Proto,
    ) -> Bytes {
        let args = &request.args;
        let stride = kind.stride();
        // A key without its value would reach one part only: the other parts would run
        // before that part's error, where one Redis runs none of them.
        if (args.len() - 1) % stride != 0 {
            return crate::reply::wrong_arity("mset");
        }
        let mut parts: Vec<Part> = Vec::new();
        let mut part_of_slot: HashMap<u16, usize> = HashMap::new();
        for (key_number, first) in (1..args.len()).step_by(stride).enumerate() {
            let slot = key_slot(&args[first]);
            let index = *part_of_slot.entry(slot).or_insert_with(|| {
                parts.push(Part {
                    slot,
                    key_order: Vec::new(),
                    request: BytesMut::new(),
                    argc: 1,
                });
                parts.len() - 1
            });
            let part = &mut parts[index];
            part.key_order.push(key_number);
            for arg in &args[first..(first + stride).min(args.len())] {
                crate::protocol::encode::bulk(&mut part.request, arg);
                part.argc += 1;
            }
        }
        let sends = parts.iter().map(|part| {
            let mut frame = BytesMut::with_capacity(part.request.len() + 32);
            frame.put_slice(format!("*{}\r\n", part.argc).as_bytes());
            crate::protocol::encode::bulk(&mut frame, &args[0]);
            frame.put_slice(&part.request);
            self.forward(Target::Slot(part.slot), frame.freeze(), proto)
        });
        let replies = join_all(sends).await;
        if let Some(error) = merge::first_error(&replies) {
            return error.clone();
        }
        match kind {
            Kind::Mset => replies
                .into_iter()
                .next()
                .unwrap_or_else(|| Bytes::from_static(b"+OK\r\n")),
            Kind::Count => merge::sum_counts(&replies),
            Kind::Mget => {
                let key_count = args.len() - 1;
                let mut values: Vec<Option<Bytes>> = vec![None; key_count];
                for (part, reply) in parts.iter().zip(&replies) {
                    let Some(elements) = merge::array_elements(reply) else {
                        return reply.clone();
                    };
                    if elements.len() != part.key_order.len() {
                        return reply.clone();
                    }
                    for (key_number, element) in part.key_order.iter().zip(elements) {
                        values[*key_number] = Some(element);
                    }
                }
                let values: Vec<Bytes> = values.into_iter().flatten().collect();
                merge::array_frame(values.len(), values.iter())
            }
        }
    }
}
