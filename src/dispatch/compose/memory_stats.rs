//! MEMORY STATS over every master, as one server holding the whole dataset would answer:
//! the byte counts and key counts summed (per database too), and what Redis derives from
//! them (bytes per key, the percentages and ratios) worked out again from the sums. A field
//! this module does not know keeps the first master's value if it is not a count.

use bytes::{Bytes, BytesMut};

use crate::protocol::{double_text, encode, reply_nesting, Proto, ReplyView, MAX_PARSED_NESTING};

use crate::dispatch::Proxy;

impl Proxy {
    /// MEMORY STATS of every master, merged (see the module's summary).
    pub(in crate::dispatch) async fn memory_stats(&self, request: Bytes, proto: Proto) -> Bytes {
        // Asked in RESP2, whose flat array keeps Redis's field order (a decoded RESP3 map
        // would not), and answered in the client's protocol.
        match self.broadcast(request, Proto::Resp2).await {
            Ok(replies) => merge(&replies, proto),
            Err(error) => error,
        }
    }
}

/// One field of the merged reply.
#[derive(Debug, Clone, PartialEq)]
enum Field {
    Count(i64),
    /// A nested map (`db.0`), merged field by field.
    Map(Vec<(Vec<u8>, Field)>),
    /// Anything else (a percentage, a ratio): the first master's text.
    Other(Vec<u8>),
}

/// The first reply that is not a map of fields (an error, say) is the answer as is.
fn merge(replies: &[Bytes], proto: Proto) -> Bytes {
    let mut merged: Vec<(Vec<u8>, Field)> = Vec::new();
    for reply in replies {
        let Some(fields) = read_fields(reply) else {
            return reply.clone();
        };
        add(&mut merged, fields);
    }
    let derived = Derived::of(&merged);
    let mut out = BytesMut::new();
    encode_fields(&mut out, proto, &merged, Some(&derived));
    out.freeze()
}

/// The fields of one master's reply; `None` when it is not a map of fields (an error, or a
/// reply nesting deeper than the walk over nested maps will go).
fn read_fields(reply: &[u8]) -> Option<Vec<(Vec<u8>, Field)>> {
    if reply_nesting(reply).ok()? > MAX_PARSED_NESTING {
        return None;
    }
    fields_of(&ReplyView::parse(reply).ok()?)
}

fn fields_of(view: &ReplyView<'_>) -> Option<Vec<(Vec<u8>, Field)>> {
    view.pairs()?
        .map(|(name, value)| {
            let field = match value {
                ReplyView::Int(n) => Field::Count(n),
                ReplyView::Boolean(b) => Field::Count(i64::from(b)),
                ReplyView::Aggregate(..) => Field::Map(fields_of(&value)?),
                ReplyView::Null => Field::Other(Vec::new()),
                _ => Field::Other(text_of(&value)?),
            };
            Some((text_of(&name)?, field))
        })
        .collect()
}

/// The text of a string field, a double as it reads back (`1.50` is `1.5`).
fn text_of(view: &ReplyView<'_>) -> Option<Vec<u8>> {
    match *view {
        ReplyView::Bulk(text)
        | ReplyView::Simple(text)
        | ReplyView::BigNumber(text)
        | ReplyView::Verbatim { text, .. } => Some(text.to_vec()),
        ReplyView::Double(text) => {
            Some(double_text(text).map_or_else(|| text.to_vec(), String::into_bytes))
        }
        _ => None,
    }
}

fn add(merged: &mut Vec<(Vec<u8>, Field)>, fields: Vec<(Vec<u8>, Field)>) {
    for (name, field) in fields {
        let Some((_, kept)) = merged.iter_mut().find(|(known, _)| *known == name) else {
            merged.push((name, field));
            continue;
        };
        match (kept, field) {
            (Field::Count(sum), Field::Count(n)) => *sum = sum.saturating_add(n),
            (Field::Map(kept), Field::Map(fields)) => add(kept, fields),
            _ => {}
        }
    }
}

/// What Redis derives from the counts, from the summed counts.
struct Derived {
    bytes_per_key: Option<i64>,
    dataset_percentage: Option<f64>,
    peak_percentage: Option<f64>,
    allocator_fragmentation: Option<f64>,
    allocator_rss: Option<f64>,
    rss_overhead: Option<f64>,
    fragmentation: Option<f64>,
}

impl Derived {
    fn of(fields: &[(Vec<u8>, Field)]) -> Derived {
        let count = |name: &str| {
            fields.iter().find_map(|(known, field)| match field {
                Field::Count(n) if known == name.as_bytes() => Some(*n as f64),
                _ => None,
            })
        };
        let ratio = |numerator: Option<f64>, denominator: Option<f64>| {
            Some(numerator? / denominator.filter(|&d| d != 0.0)?)
        };
        let sum = |a: Option<f64>, b: Option<f64>| Some(a? + b?);
        // As Redis: what was allocated after start-up (at least 1).
        let net = sum(
            count("total.allocated"),
            count("startup.allocated").map(|s| -s),
        )
        .map(|n| n.max(1.0));
        // The servers' resident size, from the fields that are measured against it.
        let rss = sum(count("rss-overhead.bytes"), count("allocator.resident"));
        Derived {
            bytes_per_key: match (net, count("keys.count")) {
                (Some(net), Some(keys)) if keys > 0.0 => Some((net / keys) as i64),
                (Some(_), Some(_)) => Some(0),
                _ => None,
            },
            dataset_percentage: ratio(count("dataset.bytes"), net).map(|r| r * 100.0),
            peak_percentage: ratio(count("total.allocated"), count("peak.allocated"))
                .map(|r| r * 100.0),
            allocator_fragmentation: ratio(count("allocator.active"), count("allocator.allocated")),
            allocator_rss: ratio(count("allocator.resident"), count("allocator.active")),
            rss_overhead: ratio(rss, count("allocator.resident")),
            fragmentation: ratio(
                sum(count("fragmentation.bytes"), count("total.allocated")),
                count("total.allocated"),
            ),
        }
    }

    fn number(&self, name: &[u8]) -> Option<Number> {
        let double = |value: Option<f64>| value.map(Number::Double);
        match name {
            b"keys.bytes-per-key" => self.bytes_per_key.map(Number::Count),
            b"dataset.percentage" => double(self.dataset_percentage),
            b"peak.percentage" => double(self.peak_percentage),
            b"allocator-fragmentation.ratio" => double(self.allocator_fragmentation),
            b"allocator-rss.ratio" => double(self.allocator_rss),
            b"rss-overhead.ratio" => double(self.rss_overhead),
            b"fragmentation" => double(self.fragmentation),
            _ => None,
        }
    }
}

enum Number {
    Count(i64),
    Double(f64),
}

fn encode_fields(
    out: &mut BytesMut,
    proto: Proto,
    fields: &[(Vec<u8>, Field)],
    derived: Option<&Derived>,
) {
    encode::map_header(out, proto, fields.len());
    for (name, field) in fields {
        encode::bulk(out, name);
        match (derived.and_then(|d| d.number(name)), field) {
            (Some(Number::Count(n)), _) => encode::integer(out, n),
            (Some(Number::Double(x)), _) => encode::double(out, proto, x),
            (None, Field::Count(n)) => encode::integer(out, *n),
            (None, Field::Map(nested)) => encode_fields(out, proto, nested, None),
            (None, Field::Other(text)) => match std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse::<f64>().ok())
            {
                Some(x) => encode::double(out, proto, x),
                None => encode::bulk(out, text),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(fields: &[(&str, &str)]) -> Bytes {
        // A RESP2 reply: counts as integers, `d:` values as bulk strings, `db:` nested.
        let mut out = BytesMut::new();
        encode::array_header(&mut out, fields.len() * 2);
        for (name, value) in fields {
            encode::bulk(&mut out, name.as_bytes());
            if let Some(db) = value.strip_prefix("db:") {
                let (main, expires) = db.split_once(',').unwrap();
                encode::array_header(&mut out, 4);
                encode::bulk(&mut out, b"overhead.hashtable.main");
                encode::integer(&mut out, main.parse().unwrap());
                encode::bulk(&mut out, b"overhead.hashtable.expires");
                encode::integer(&mut out, expires.parse().unwrap());
            } else if let Some(double) = value.strip_prefix("d:") {
                encode::bulk(&mut out, double.as_bytes());
            } else {
                encode::integer(&mut out, value.parse().unwrap());
            }
        }
        out.freeze()
    }

    #[test]
    fn counts_add_up_and_what_derives_from_them_follows() {
        let a = stats(&[
            ("peak.allocated", "2000"),
            ("total.allocated", "1000"),
            ("startup.allocated", "100"),
            ("db.0", "db:10,2"),
            ("keys.count", "3"),
            ("keys.bytes-per-key", "300"),
            ("dataset.bytes", "450"),
            ("dataset.percentage", "d:50.0"),
            ("peak.percentage", "d:50.0"),
            ("allocator.allocated", "1000"),
            ("allocator.active", "1500"),
            ("allocator-fragmentation.ratio", "d:1.5"),
            ("allocator.resident", "1800"),
            ("allocator-rss.ratio", "d:1.2"),
            ("fragmentation", "d:3.0"),
            ("fragmentation.bytes", "2000"),
            ("some.new.ratio", "d:0.25"),
        ]);
        let b = stats(&[
            ("peak.allocated", "6000"),
            ("total.allocated", "3000"),
            ("startup.allocated", "100"),
            ("db.0", "db:30,4"),
            ("keys.count", "5"),
            ("keys.bytes-per-key", "580"),
            ("dataset.bytes", "1450"),
            ("dataset.percentage", "d:50.0"),
            ("peak.percentage", "d:50.0"),
            ("allocator.allocated", "3000"),
            ("allocator.active", "3000"),
            ("allocator-fragmentation.ratio", "d:1.0"),
            ("allocator.resident", "4500"),
            ("allocator-rss.ratio", "d:1.5"),
            ("fragmentation", "d:1.0"),
            ("fragmentation.bytes", "0"),
            ("some.new.ratio", "d:0.75"),
        ]);
        let expected = stats(&[
            ("peak.allocated", "8000"),
            ("total.allocated", "4000"),
            ("startup.allocated", "200"),
            ("db.0", "db:40,6"),
            ("keys.count", "8"),
            // 3800 allocated after start-up over 8 keys.
            ("keys.bytes-per-key", "475"),
            ("dataset.bytes", "1900"),
            ("dataset.percentage", "d:50"),
            ("peak.percentage", "d:50"),
            ("allocator.allocated", "4000"),
            ("allocator.active", "4500"),
            ("allocator-fragmentation.ratio", "d:1.125"),
            ("allocator.resident", "6300"),
            ("allocator-rss.ratio", "d:1.4"),
            ("fragmentation", "d:1.5"),
            ("fragmentation.bytes", "2000"),
            ("some.new.ratio", "d:0.25"),
        ]);
        assert_eq!(merge(&[a, b], Proto::Resp2), expected);
    }

    #[test]
    fn an_error_from_a_master_is_the_answer() {
        let ok = stats(&[("keys.count", "1")]);
        let error = Bytes::from_static(b"-ERR busy\r\n");
        assert_eq!(merge(&[ok, error.clone()], Proto::Resp2), error);
    }
}
