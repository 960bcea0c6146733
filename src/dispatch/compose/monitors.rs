//! The masters' own monitors read as one server's. SLOWLOG GET: every master's entries,
//! newest first, cut to the count asked (LEN and RESET are a sum and a broadcast, see
//! `fanout`). LATENCY LATEST lists each event once (the newest sample of any master, with
//! the highest maximum of all), HISTORY merges the masters' samples of an event in time
//! order (the highest where two share a second, at most Redis's 160), RESET sums the
//! masters' counts, HISTOGRAM adds up each command's calls and cumulative latency
//! distribution. DOCTOR and GRAPH stay one master's.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};

use crate::protocol::{encode, Proto, ReplyView, Request};
use crate::reply::merge::{array_frame, integer};

use crate::dispatch::Proxy;

/// Samples Redis keeps per event (`LATENCY_TS_LEN`).
const HISTORY_LEN: usize = 160;

impl Proxy {
    /// SLOWLOG GET over every master: the entries of all, newest first (see
    /// [`encode_newest_first`]), at most the count asked (Redis: 10 by default,
    /// -1 for all). Each master checks the arguments; the first error in master order is
    /// the reply.
    pub(in crate::dispatch) async fn slowlog_all(&self, request: &Request, proto: Proto) -> Bytes {
        let replies = match self.broadcast(request.raw.clone(), proto).await {
            Ok(replies) => replies,
            Err(error) => return error,
        };
        let mut logs = Vec::with_capacity(replies.len());
        for reply in &replies {
            match ReplyView::element_frames(reply) {
                Some(entries) => logs.push(entries.map(|entry| reply.slice_ref(entry)).collect()),
                None => return reply.clone(),
            }
        }
        let limit = match request.args.get(2) {
            None => 10,
            Some(count) => match crate::protocol::parse_i64(count) {
                Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                _ => usize::MAX,
            },
        };
        encode_newest_first(logs, limit)
    }

    /// LATENCY LATEST of every master, one entry per event.
    pub(in crate::dispatch) async fn latency_latest(&self, request: Bytes, proto: Proto) -> Bytes {
        match self.broadcast(request, proto).await {
            Ok(replies) => merge_latest(&replies),
            Err(error) => error,
        }
    }

    /// LATENCY HISTOGRAM of every master, one distribution per command.
    pub(in crate::dispatch) async fn latency_histogram(
        &self,
        request: Bytes,
        proto: Proto,
    ) -> Bytes {
        match self.broadcast(request, proto).await {
            Ok(replies) => merge_histograms(&replies, proto),
            Err(error) => error,
        }
    }

    /// LATENCY HISTORY of every master, in time order.
    pub(in crate::dispatch) async fn latency_history(&self, request: Bytes, proto: Proto) -> Bytes {
        match self.broadcast(request, proto).await {
            Ok(replies) => merge_history(&replies),
            Err(error) => error,
        }
    }
}

/// Every master's SLOWLOG entries (`[id, timestamp, duration, args, addr, name]`, each
/// log newest first) as one log, newest first, cut to `limit`. Each master's own order is
/// kept; across masters the newer timestamp goes first. Timestamps are whole seconds, so
/// within one second the master with more entries left in that second goes first: the
/// masters' runs of one second are taken as ending together, as they do when a command
/// sent to every master (SLOWLOG RESET, CONFIG SET) began them, and what one master logged
/// after it is newer than the others' copies of it. Further ties: master order.
fn encode_newest_first(logs: Vec<Vec<Bytes>>, limit: usize) -> Bytes {
    let timestamp = |entry: &Bytes| {
        ReplyView::element_frames(entry)
            .and_then(|mut fields| fields.nth(1))
            .and_then(integer)
            .unwrap_or(i64::MIN)
    };
    // Per master, each entry with its timestamp and how many entries from it on share it.
    let mut logs: Vec<std::collections::VecDeque<(i64, usize, Bytes)>> = logs
        .into_iter()
        .map(|log| {
            let mut timed: Vec<(i64, usize, Bytes)> =
                log.into_iter().map(|e| (timestamp(&e), 1, e)).collect();
            for i in (0..timed.len().saturating_sub(1)).rev() {
                if timed[i].0 == timed[i + 1].0 {
                    timed[i].1 = timed[i + 1].1 + 1;
                }
            }
            timed.into()
        })
        .collect();
    let mut merged = Vec::new();
    while merged.len() < limit {
        let newest = logs
            .iter()
            .enumerate()
            .filter_map(|(i, log)| log.front().map(|(time, run, _)| (*time, *run, Reverse(i))))
            .max();
        let Some((_, _, Reverse(i))) = newest else {
            break;
        };
        if let Some((_, _, entry)) = logs[i].pop_front() {
            merged.push(entry);
        }
    }
    encode::array_frame(merged.len(), &merged)
}

/// One `[event, timestamp, latest, max]` entry per event; the first reply that is not a
/// list of such entries is the answer as is.
fn merge_latest(replies: &[Bytes]) -> Bytes {
    // In the order first seen: event name, timestamp, the newest entry, highest max.
    let mut events: Vec<(Bytes, i64, Bytes, i64)> = Vec::new();
    for reply in replies {
        let Some(entries) = ReplyView::element_frames(reply) else {
            return reply.clone();
        };
        for entry in entries {
            let Some(mut fields) = ReplyView::element_frames(entry) else {
                return reply.clone();
            };
            // Fields: event, timestamp, latest, max.
            let (Some(name), Some(time), Some(max)) = (
                fields.next(),
                fields.next().and_then(integer),
                fields.nth(1).and_then(integer),
            ) else {
                return reply.clone();
            };
            match events.iter_mut().find(|kept| kept.0 == name) {
                Some(kept) => {
                    if time > kept.1 {
                        kept.1 = time;
                        kept.2 = reply.slice_ref(entry);
                    }
                    kept.3 = kept.3.max(max);
                }
                None => events.push((reply.slice_ref(name), time, reply.slice_ref(entry), max)),
            }
        }
    }
    let merged: Vec<Bytes> = events
        .into_iter()
        .map(|(_, _, entry, max)| with_max(&entry, max))
        .collect();
    array_frame(merged.len(), merged.iter())
}

/// `entry` with its fourth field (the maximum) set to `max`.
fn with_max(entry: &Bytes, max: i64) -> Bytes {
    let Some(fields) = ReplyView::element_frames(entry) else {
        return entry.clone();
    };
    let max = encode::integer_frame(max);
    let mut out = BytesMut::with_capacity(entry.len() + max.len());
    encode::array_header(&mut out, fields.len());
    for (at, field) in fields.enumerate() {
        out.extend_from_slice(if at == 3 { &max } else { field });
    }
    out.freeze()
}

/// The `[timestamp, latency]` samples of every reply in time order, the highest of those
/// that share a timestamp, the newest [`HISTORY_LEN`].
fn merge_history(replies: &[Bytes]) -> Bytes {
    let mut samples: BTreeMap<i64, (i64, Bytes)> = BTreeMap::new();
    for reply in replies {
        let Some(entries) = ReplyView::element_frames(reply) else {
            return reply.clone();
        };
        for entry in entries {
            let mut fields = ReplyView::element_frames(entry).into_iter().flatten();
            let (Some(time), Some(latency)) = (
                fields.next().and_then(integer),
                fields.next().and_then(integer),
            ) else {
                return reply.clone();
            };
            let entry = reply.slice_ref(entry);
            let kept = samples.entry(time).or_insert((latency, entry.clone()));
            if latency > kept.0 {
                *kept = (latency, entry);
            }
        }
    }
    let skip = samples.len().saturating_sub(HISTORY_LEN);
    let merged: Vec<Bytes> = samples.into_values().skip(skip).map(|(_, e)| e).collect();
    array_frame(merged.len(), merged.iter())
}

/// One command's LATENCY HISTOGRAM on one master: its calls and its cumulative
/// distribution (`[upper bound in us, calls at most that slow]`, ascending, listed where it
/// grows).
struct Distribution {
    calls: i64,
    cumulative: Vec<(i64, i64)>,
}

fn distribution(details: &ReplyView<'_>) -> Option<Distribution> {
    let cumulative = details
        .field("histogram_usec")?
        .pairs()?
        .map(|(bound, count)| Some((bound.integer()?, count.integer()?)))
        .collect::<Option<Vec<_>>>()?;
    Some(Distribution {
        calls: details.field("calls")?.integer()?,
        cumulative,
    })
}

/// Every master's LATENCY HISTOGRAM as one: per command (in the order first seen) the
/// calls summed and, at every bound any master lists, the masters' cumulative counts up to
/// it summed. The first reply that is not such a map is the answer as is.
fn merge_histograms(replies: &[Bytes], proto: Proto) -> Bytes {
    let mut commands: Vec<(Vec<u8>, Vec<Distribution>)> = Vec::new();
    for reply in replies {
        let parsed = ReplyView::parse(reply).ok().and_then(|value| {
            value
                .pairs()?
                .map(|(name, details)| Some((name.text()?.to_vec(), distribution(&details)?)))
                .collect::<Option<Vec<_>>>()
        });
        let Some(parsed) = parsed else {
            return reply.clone();
        };
        for (name, dist) in parsed {
            match commands.iter_mut().find(|(known, _)| *known == name) {
                Some((_, dists)) => dists.push(dist),
                None => commands.push((name, vec![dist])),
            }
        }
    }
    let mut out = BytesMut::new();
    encode::map_header(&mut out, proto, commands.len());
    for (name, dists) in &commands {
        let mut bounds: Vec<i64> = dists
            .iter()
            .flat_map(|d| d.cumulative.iter().map(|(bound, _)| *bound))
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        encode::bulk(&mut out, name);
        encode::map_header(&mut out, proto, 2);
        encode::bulk(&mut out, b"calls");
        encode::integer(&mut out, dists.iter().map(|d| d.calls).sum());
        encode::bulk(&mut out, b"histogram_usec");
        encode::map_header(&mut out, proto, bounds.len());
        for bound in bounds {
            let at_most = |d: &Distribution| {
                d.cumulative
                    .iter()
                    .take_while(|(b, _)| *b <= bound)
                    .last()
                    .map_or(0, |(_, count)| *count)
            };
            encode::integer(&mut out, bound);
            encode::integer(&mut out, dists.iter().map(at_most).sum());
        }
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;

    /// The ids of the SLOWLOG GET reply `frame`, in order.
    fn ids(frame: &Bytes) -> Vec<i64> {
        ReplyView::element_frames(frame)
            .unwrap()
            .map(|e| integer(ReplyView::element_frames(e).unwrap().next().unwrap()).unwrap())
            .collect()
    }

    fn slowlog_entry(id: i64, timestamp: i64) -> Bytes {
        let mut out = BytesMut::new();
        encode::array_header(&mut out, 6);
        encode::integer(&mut out, id);
        encode::integer(&mut out, timestamp);
        encode::integer(&mut out, 5);
        encode::array_header(&mut out, 1);
        encode::bulk(&mut out, b"PING");
        encode::bulk(&mut out, b"127.0.0.1:1");
        encode::bulk(&mut out, b"");
        out.freeze()
    }

    #[test]
    fn slowlog_entries_of_every_master_merge_newest_first_and_cut_to_the_count() {
        // Two masters' logs, each newest first.
        let entries = vec![
            vec![slowlog_entry(2, 300), slowlog_entry(1, 100)],
            vec![slowlog_entry(7, 300), slowlog_entry(6, 200)],
        ];
        let all = encode_newest_first(entries.clone(), usize::MAX);
        // Equal timestamps keep master order.
        assert_eq!(ids(&all), [2, 7, 6, 1]);
        assert_eq!(ids(&encode_newest_first(entries.clone(), 3)), [2, 7, 6]);
        assert_eq!(&encode_newest_first(entries, 0)[..], b"*0\r\n");
    }

    #[test]
    fn within_one_second_what_one_master_logged_after_a_broadcast_comes_first() {
        // SLOWLOG RESET reached three masters (ids 1, 11, 21) in second 500; the third
        // then logged a GET (22) in the same second, and the first one a SET (3) in 501.
        let logs = vec![
            vec![slowlog_entry(3, 501), slowlog_entry(1, 500)],
            vec![slowlog_entry(11, 500)],
            vec![slowlog_entry(22, 500), slowlog_entry(21, 500)],
        ];
        assert_eq!(ids(&encode_newest_first(logs, 10)), [3, 22, 1, 11, 21]);
    }

    fn latest(entries: &[(&str, i64, i64, i64)]) -> Bytes {
        let frames: Vec<Bytes> = entries
            .iter()
            .map(|(name, time, last, max)| {
                let fields = [
                    encode::bulk_frame(name.as_bytes()),
                    encode::integer_frame(*time),
                    encode::integer_frame(*last),
                    encode::integer_frame(*max),
                ];
                array_frame(4, fields.iter())
            })
            .collect();
        array_frame(frames.len(), frames.iter())
    }

    fn history(samples: &[(i64, i64)]) -> Bytes {
        let frames: Vec<Bytes> = samples
            .iter()
            .map(|(time, latency)| {
                let fields = [
                    encode::integer_frame(*time),
                    encode::integer_frame(*latency),
                ];
                array_frame(2, fields.iter())
            })
            .collect();
        array_frame(frames.len(), frames.iter())
    }

    #[test]
    fn latest_keeps_each_event_once_newest_sample_and_highest_max() {
        let a = latest(&[("command", 100, 5, 50), ("fork", 90, 3, 3)]);
        let b = latest(&[("command", 120, 7, 20)]);
        let c = latest(&[]);
        assert_eq!(
            merge_latest(&[a, b, c]),
            latest(&[("command", 120, 7, 50), ("fork", 90, 3, 3)])
        );
    }

    #[test]
    fn history_is_in_time_order_with_the_highest_sample_of_a_second() {
        let a = history(&[(10, 5), (30, 9)]);
        let b = history(&[(20, 7), (30, 12)]);
        assert_eq!(
            merge_history(&[a, b]),
            history(&[(10, 5), (20, 7), (30, 12)])
        );
        let long: Vec<(i64, i64)> = (0..200).map(|t| (t, 1)).collect();
        let merged = merge_history(&[history(&long)]);
        assert_eq!(merged, history(&long[40..]), "the newest 160");
    }

    #[test]
    fn an_error_reply_is_the_answer() {
        let error = Bytes::from_static(b"-ERR unknown\r\n");
        assert_eq!(merge_latest(&[latest(&[]), error.clone()]), error);
        assert_eq!(merge_history(std::slice::from_ref(&error)), error);
    }

    #[test]
    fn histograms_add_calls_and_cumulative_counts_at_every_bound() {
        // RESP2: flat arrays. Master one: 3 GETs (1 at <= 2 us, 3 at <= 8 us), 1 SET.
        let one = Bytes::from_static(
            b"*4\r\n$3\r\nget\r\n*4\r\n$5\r\ncalls\r\n:3\r\n$14\r\nhistogram_usec\r\n\
              *4\r\n:2\r\n:1\r\n:8\r\n:3\r\n\
              $3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:4\r\n:1\r\n",
        );
        // Master two: 2 GETs (2 at <= 4 us).
        let two = Bytes::from_static(
            b"*2\r\n$3\r\nget\r\n*4\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n*2\r\n:4\r\n:2\r\n",
        );
        let merged = merge_histograms(&[one.clone(), two.clone()], Proto::Resp2);
        assert_eq!(
            &merged[..],
            &b"*4\r\n$3\r\nget\r\n*4\r\n$5\r\ncalls\r\n:5\r\n$14\r\nhistogram_usec\r\n\
               *6\r\n:2\r\n:1\r\n:4\r\n:3\r\n:8\r\n:5\r\n\
               $3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:4\r\n:1\r\n"
                [..]
        );
        // RESP3: maps in, maps out.
        let three = Bytes::from_static(
            b"%1\r\n$3\r\nget\r\n%2\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n%1\r\n:4\r\n:2\r\n",
        );
        let merged = merge_histograms(&[three.clone(), three], Proto::Resp3);
        assert_eq!(
            &merged[..],
            &b"%1\r\n$3\r\nget\r\n%2\r\n$5\r\ncalls\r\n:4\r\n$14\r\nhistogram_usec\r\n%1\r\n:4\r\n:4\r\n"[..]
        );
        let empty = merge_histograms(&[Bytes::from_static(b"*0\r\n")], Proto::Resp2);
        assert_eq!(&empty[..], b"*0\r\n");
        let error = Bytes::from_static(b"-ERR unknown subcommand\r\n");
        assert_eq!(merge_histograms(&[one, error.clone()], Proto::Resp2), error);
    }
}
