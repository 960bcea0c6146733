//! SORT and SORT_RO with what a cluster node refuses: BY and GET patterns. A single Redis
//! looks the pattern keys up in its one keyspace; through the proxy they live on any
//! master. A STORE into another slot than the sorted key's (which a node refuses) runs here
//! too, with or without patterns: a cross-slot store (`cross_slot.stores`).
//!
//! The order stays Redis's own wherever it can: without a BY pattern the key's master runs
//! the SORT (its numeric parsing, collation, LIMIT and DESC) with the patterns and STORE
//! taken out, and the proxy only looks up the GET values. With a BY pattern the master
//! lists the elements (`BY nosort`), the proxy fetches every weight from its master and
//! sorts as Redis's `sortCompare` does (numeric by `strtod`, ties by the element's bytes;
//! ALPHA by the weight's bytes, missing weights first). STORE writes the result with one
//! script on the key's master (DEL, then RPUSH), so readers never see it half written.
//!
//! Under a layout, the keys the patterns form are legacy names and are read at their
//! cluster names. Limits: the steps are not atomic together as on one Redis: another client's
//! write between the listing and the lookups can show (the client's own pipeline cannot:
//! the session runs such a SORT alone).

use bytes::{Bytes, BytesMut};

use crate::protocol::{double_text, encode, parse_i64, Proto, ReplyView};
use crate::reply;
use crate::route::key_slot;

use crate::dispatch::{Proxy, Target};

mod order;

use order::{limit_range, lookup, order_by_weights, Lookup};

/// Stores a list in one step: `KEYS[1]` deleted, then the arguments pushed in chunks (Lua's
/// `unpack` takes a bounded number of values); answers the length.
const STORE_SCRIPT: &str = "redis.call('DEL', KEYS[1]) \
    local n = #ARGV \
    for i = 1, n, 1000 do \
        redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, n))) \
    end \
    return n";

/// A SORT request, parsed as Redis's `sortCommandGeneric` parses it.
#[derive(Debug, Clone, PartialEq)]
pub struct SortRequest {
    key: Bytes,
    by: Option<Bytes>,
    /// LIMIT offset count, as given (default 0, -1).
    limit: Option<(Bytes, Bytes)>,
    gets: Vec<Bytes>,
    desc: bool,
    alpha: bool,
    store: Option<Bytes>,
}

/// Redis's refusal of SORT's patterns to a user without every key (`sortCommandGeneric`):
/// the text for the first BY pattern with `*` or GET, in argument order, or `None` when
/// there is none or an argument before it is wrong (the planner answers that error, as
/// Redis answers the first problem it meets). `name` is the command's (`sort`, `sort_ro`).
pub fn pattern_denial(name: &str, args: &[Bytes]) -> Option<&'static str> {
    let readonly = match name {
        "sort" => false,
        "sort_ro" => true,
        _ => return None,
    };
    for option in SortOptions::new(args, readonly) {
        match option.ok()? {
            SortOption::By(by) if by.contains(&b'*') => return Some(reply::text::SORT_BY_DENIED),
            SortOption::Get(_) => return Some(reply::text::SORT_GET_DENIED),
            _ => {}
        }
    }
    None
}

/// One option of a SORT, as `sortCommandGeneric` reads them.
enum SortOption<'a> {
    Asc,
    Desc,
    Alpha,
    Limit(&'a Bytes, &'a Bytes),
    Store(&'a Bytes),
    By(&'a Bytes),
    Get(&'a Bytes),
}

/// The options after SORT's key, in order; an `Err` (Redis's error) ends them.
struct SortOptions<'a> {
    args: &'a [Bytes],
    readonly: bool,
    next: usize,
}

impl<'a> SortOptions<'a> {
    fn new(args: &'a [Bytes], readonly: bool) -> Self {
        SortOptions {
            args,
            readonly,
            next: 2,
        }
    }
}

impl<'a> Iterator for SortOptions<'a> {
    type Item = Result<SortOption<'a>, Bytes>;

    fn next(&mut self) -> Option<Self::Item> {
        let args = self.args;
        let j = self.next;
        if j >= args.len() {
            return None;
        }
        let left = args.len() - j - 1;
        let option = args[j].to_ascii_lowercase();
        let (option, taken) = match option.as_slice() {
            b"asc" => (SortOption::Asc, 0),
            b"desc" => (SortOption::Desc, 0),
            b"alpha" => (SortOption::Alpha, 0),
            b"limit" if left >= 2 => {
                if parse_i64(&args[j + 1]).is_none() || parse_i64(&args[j + 2]).is_none() {
                    self.next = args.len();
                    return Some(Err(reply::error(reply::text::NOT_AN_INTEGER)));
                }
                (SortOption::Limit(&args[j + 1], &args[j + 2]), 2)
            }
            b"store" if !self.readonly && left >= 1 => (SortOption::Store(&args[j + 1]), 1),
            b"by" if left >= 1 => (SortOption::By(&args[j + 1]), 1),
            b"get" if left >= 1 => (SortOption::Get(&args[j + 1]), 1),
            _ => {
                self.next = args.len();
                return Some(Err(reply::error(reply::text::SYNTAX)));
            }
        };
        self.next = j + 1 + taken;
        Some(Ok(option))
    }
}

impl SortRequest {
    /// The request when `name` is SORT or SORT_RO with patterns a cluster node refuses;
    /// `Err` for arguments Redis refuses (its own errors); `None` for everything else.
    pub fn classify(name: &str, args: &[Bytes]) -> Option<Result<Box<SortRequest>, Bytes>> {
        let readonly = match name {
            "sort" => false,
            "sort_ro" => true,
            _ => return None,
        };
        // Without a key it is an arity error, which the planner answers.
        if args.len() < 2 {
            return None;
        }
        match SortRequest::parse(args, readonly) {
            Ok(sort) if sort.needs_proxy() => Some(Ok(Box::new(sort))),
            Ok(_) => None,
            Err(error) => Some(Err(error)),
        }
    }

    fn parse(args: &[Bytes], readonly: bool) -> Result<SortRequest, Bytes> {
        let mut sort = SortRequest {
            key: args[1].clone(),
            by: None,
            limit: None,
            gets: Vec::new(),
            desc: false,
            alpha: false,
            store: None,
        };
        for option in SortOptions::new(args, readonly) {
            match option? {
                SortOption::Asc => sort.desc = false,
                SortOption::Desc => sort.desc = true,
                SortOption::Alpha => sort.alpha = true,
                SortOption::Limit(offset, count) => {
                    sort.limit = Some((offset.clone(), count.clone()));
                }
                SortOption::Store(store) => sort.store = Some(store.clone()),
                SortOption::By(by) => sort.by = Some(by.clone()),
                SortOption::Get(get) => sort.gets.push(get.clone()),
            }
        }
        Ok(sort)
    }

    /// A BY pattern with `*`: weights are looked up (a constant BY means "do not sort").
    fn by_pattern(&self) -> Option<&Bytes> {
        self.by.as_ref().filter(|by| by.contains(&b'*'))
    }

    /// Patterns to look up, or a STORE into another slot than the key's, which a node
    /// refuses (`-CROSSSLOT`) and the proxy runs as a cross-slot store (`cross_slot.stores`).
    fn needs_proxy(&self) -> bool {
        self.stores_elsewhere() || !self.gets.is_empty() || self.by_pattern().is_some()
    }

    /// Whether STORE names a key in another slot than the sorted key's.
    pub(in crate::dispatch) fn stores_elsewhere(&self) -> bool {
        self.store
            .as_ref()
            .is_some_and(|store| key_slot(store) != key_slot(&self.key))
    }

    /// The SORT the key's master runs: the order and LIMIT when there is no BY pattern,
    /// else just the elements (BY nosort) for the proxy to sort.
    fn node_request(&self, force_alpha: bool) -> Bytes {
        let mut args: Vec<&[u8]> = vec![b"SORT", &self.key];
        if self.by_pattern().is_some() {
            args.extend_from_slice(&[b"BY", b"nosort"]);
            return encode::encode_request(&args);
        }
        if let Some(by) = &self.by {
            if !force_alpha {
                args.extend_from_slice(&[b"BY", by]);
            }
        }
        if let Some((offset, count)) = &self.limit {
            args.extend_from_slice(&[b"LIMIT", offset, count]);
        }
        if self.desc {
            args.push(b"DESC");
        }
        if self.alpha || force_alpha {
            args.push(b"ALPHA");
        }
        encode::encode_request(&args)
    }
}

impl Proxy {
    /// Runs `sort` (see the module documentation).
    pub(in crate::dispatch) async fn sort(&self, sort: &SortRequest, proto: Proto) -> Bytes {
        let key_target = Target::Slot(key_slot(&sort.key));
        // As Redis: a constant BY on a set sorts ALPHA when storing, so what is stored
        // does not depend on the set's internal order.
        let force_alpha = sort.by.is_some()
            && sort.by_pattern().is_none()
            && sort.store.is_some()
            && self.key_type(&sort.key).await == "set";
        let listed = self
            .upstream
            .forward(key_target, sort.node_request(force_alpha), Proto::Resp2)
            .await;
        let mut elements = match bulk_strings(&listed) {
            Ok(elements) => elements.into_iter().flatten().collect::<Vec<_>>(),
            Err(error) => return error,
        };
        if let Some(by) = sort.by_pattern() {
            let weights = match self.look_up(by, &elements).await {
                Ok(weights) => weights,
                Err(error) => return error,
            };
            elements = match order_by_weights(sort, elements, weights) {
                Ok(elements) => elements,
                Err(error) => return error,
            };
            let (start, end) = limit_range(sort.limit.as_ref(), elements.len());
            elements = elements.get(start..end).unwrap_or_default().to_vec();
        }
        let output = if sort.gets.is_empty() {
            elements.into_iter().map(Some).collect()
        } else {
            let mut columns = Vec::with_capacity(sort.gets.len());
            for get in &sort.gets {
                match self.look_up(get, &elements).await {
                    Ok(values) => columns.push(values),
                    Err(error) => return error,
                }
            }
            (0..elements.len())
                .flat_map(|row| columns.iter().map(move |column| column[row].clone()))
                .collect()
        };
        match &sort.store {
            Some(destination) => self.store(destination, output).await,
            None => {
                let mut out = BytesMut::new();
                encode::array_header(&mut out, output.len());
                for value in output {
                    match value {
                        Some(value) => encode::bulk(&mut out, &value),
                        None => encode::null(&mut out, proto),
                    }
                }
                out.freeze()
            }
        }
    }

    async fn key_type(&self, key: &Bytes) -> String {
        let request = encode::encode_request(&[b"TYPE", key]);
        let reply = self
            .upstream
            .forward(Target::Slot(key_slot(key)), request, Proto::Resp2)
            .await;
        String::from_utf8_lossy(reply.strip_prefix(b"+").unwrap_or_default())
            .trim_end()
            .to_owned()
    }

    /// `pattern` looked up for every element, on the masters of the keys it forms: the
    /// value, or `None` for a missing key or field or a key of another type (as Redis).
    async fn look_up(
        &self,
        pattern: &[u8],
        elements: &[Bytes],
    ) -> Result<Vec<Option<Bytes>>, Bytes> {
        let lookups: Vec<Lookup> = elements
            .iter()
            .map(
                |element| match (lookup(pattern, element), self.layout.as_deref()) {
                    // Patterns name legacy keys; under a layout they live at their cluster names.
                    (Lookup::Key(key), Some(active)) => Lookup::Key(active.cluster_name(key)),
                    (Lookup::Field(key, field), Some(active)) => {
                        Lookup::Field(active.cluster_name(key), field)
                    }
                    (lookup, _) => lookup,
                },
            )
            .collect();
        let asked: Vec<usize> = (0..lookups.len())
            .filter(|&i| matches!(lookups[i], Lookup::Key(_) | Lookup::Field(..)))
            .collect();
        let slots: Vec<u16> = asked
            .iter()
            .map(|&i| match &lookups[i] {
                Lookup::Key(key) | Lookup::Field(key, _) => key_slot(key),
                Lookup::Element | Lookup::Nothing => unreachable!("only keys are asked"),
            })
            .collect();
        let frame = |n: usize, out: &mut BytesMut| {
            let request = match &lookups[asked[n]] {
                Lookup::Key(key) => encode::encode_request(&[b"GET", key]),
                Lookup::Field(key, field) => encode::encode_request(&[b"HGET", key, field]),
                Lookup::Element | Lookup::Nothing => unreachable!("only keys are asked"),
            };
            out.extend_from_slice(&request);
        };
        let replies = self
            .upstream
            .forward_each(&slots, frame, asked.len() * 32, Proto::Resp2)
            .await;
        let mut values: Vec<Option<Bytes>> = lookups
            .iter()
            .zip(elements)
            .map(|(lookup, element)| matches!(lookup, Lookup::Element).then(|| element.clone()))
            .collect();
        for (&i, reply) in asked.iter().zip(replies) {
            values[i] = match reply.first() {
                Some(b'$') => ReplyView::parse(&reply)
                    .map_err(|_| unexpected())
                    .and_then(|value| bulk_value(&reply, value))?,
                Some(b'-') if reply.starts_with(b"-WRONGTYPE") => None,
                _ => return Err(reply),
            };
        }
        Ok(values)
    }

    /// Replaces `destination` with the list `values` (missing values stored empty, as
    /// Redis does) and answers its length.
    async fn store(&self, destination: &Bytes, values: Vec<Option<Bytes>>) -> Bytes {
        let mut args: Vec<&[u8]> = vec![b"EVAL", STORE_SCRIPT.as_bytes(), b"1", destination];
        args.extend(values.iter().map(|v| v.as_deref().unwrap_or_default()));
        let request = encode::encode_request(&args);
        self.upstream
            .forward(Target::Slot(key_slot(destination)), request, Proto::Resp2)
            .await
    }
}

/// The elements of an array of bulk strings (nil elements as `None`); an error frame is
/// returned as the error.
fn bulk_strings(frame: &Bytes) -> Result<Vec<Option<Bytes>>, Bytes> {
    if frame.first() == Some(&b'-') {
        return Err(frame.clone());
    }
    let Some(items) = ReplyView::parse(frame)
        .ok()
        .and_then(|view| view.elements())
    else {
        return Err(unexpected());
    };
    items.map(|item| bulk_value(frame, item)).collect()
}

/// A bulk string, or nil, of `reply`, a node's reply `value` is part of (a slice of it,
/// not a copy).
fn bulk_value(reply: &Bytes, value: ReplyView<'_>) -> Result<Option<Bytes>, Bytes> {
    match value {
        ReplyView::Bulk(text)
        | ReplyView::Simple(text)
        | ReplyView::BigNumber(text)
        | ReplyView::Verbatim { text, .. } => Ok(Some(reply.slice_ref(text))),
        ReplyView::Double(text) => Ok(Some(
            double_text(text).map_or_else(|| Bytes::copy_from_slice(text), Bytes::from),
        )),
        ReplyView::Null => Ok(None),
        _ => Err(unexpected()),
    }
}

fn unexpected() -> Bytes {
    reply::error(reply::text::SORT_UNEXPECTED_REPLY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<Bytes> {
        line.split(' ')
            .map(|a| Bytes::copy_from_slice(a.as_bytes()))
            .collect()
    }

    fn classify(line: &str) -> Option<Result<Box<SortRequest>, Bytes>> {
        let args = args(line);
        let name = String::from_utf8(args[0].to_ascii_lowercase()).unwrap();
        SortRequest::classify(&name, &args)
    }

    #[test]
    fn only_what_a_node_refuses_is_taken_over() {
        for line in [
            "SORT l",
            "SORT l LIMIT 0 5 DESC ALPHA",
            "SORT l BY nosort",
            "SORT {t}l STORE {t}dst",
            "SORT",
            "SORT_RO",
            "GET l",
        ] {
            assert!(classify(line).is_none(), "{line}");
        }
        for line in [
            "SORT l BY w_*",
            "SORT l GET #",
            "SORT l BY nosort GET o_*",
            "SORT {t}l BY w_* GET # STORE {t}dst",
            "SORT_RO l GET #",
            "SORT {t}l STORE other",
            "SORT {t}l BY w_* STORE other",
        ] {
            assert!(matches!(classify(line), Some(Ok(_))), "{line}");
        }
    }

    #[test]
    fn patterns_are_denied_where_redis_meets_them() {
        let denial = |line: &str| {
            let args = args(line);
            let name = String::from_utf8(args[0].to_ascii_lowercase()).unwrap();
            pattern_denial(&name, &args)
        };
        let by = Some(reply::text::SORT_BY_DENIED);
        let get = Some(reply::text::SORT_GET_DENIED);
        // What redis-server 7.0 answers a user with `~u:*` (each checked by hand).
        assert_eq!(denial("SORT l BY w_*"), by);
        assert_eq!(denial("SORT l GET #"), get);
        assert_eq!(denial("sort l by nosort get x"), get);
        assert_eq!(denial("SORT l BY w_* GET x"), by);
        assert_eq!(denial("SORT_RO l LIMIT 0 1 GET x"), get);
        for line in [
            "SORT l",
            "SORT l BY nosort",
            "SORT l BLAH BY w_*",
            "SORT l LIMIT a b BY w_*",
            "SORT_RO l STORE d GET x",
            "GET l",
        ] {
            assert_eq!(denial(line), None, "{line}");
        }
    }

    #[test]
    fn arguments_are_refused_as_redis_refuses_them() {
        let error = |line: &str| match classify(line) {
            Some(Err(error)) => String::from_utf8(error.to_vec()).unwrap(),
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(
            error("SORT l GET # LIMIT 0 x"),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(error("SORT l GET # BOGUS"), "-ERR syntax error\r\n");
        assert_eq!(error("SORT l BY w_* LIMIT 1"), "-ERR syntax error\r\n");
        assert_eq!(error("SORT_RO l GET # STORE d"), "-ERR syntax error\r\n");
        // A syntax error of a request a node would answer is answered the same way here.
        assert_eq!(error("SORT l BOGUS"), "-ERR syntax error\r\n");
    }
}
