//! CLIENT TRACKING's options, checked as Redis 7 checks them (`clientCommand` and
//! `checkPrefixCollisionsOrReply` in Redis's networking.c and tracking.c), and the
//! replies about a client's tracking (CLIENT TRACKINGINFO). Pure.

use bytes::{Bytes, BytesMut};

use crate::protocol::{encode, parse_i64, Proto};
use crate::reply::{self, connection as texts};

/// How a client tracks: what CLIENT TRACKING ON set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrackingOptions {
    /// BCAST: every modified key under one of `prefixes`, read or not.
    pub bcast: bool,
    /// OPTIN: only the keys of commands after `CLIENT CACHING yes`.
    pub optin: bool,
    /// OPTOUT: the keys of every command but those after `CLIENT CACHING no`.
    pub optout: bool,
    /// NOLOOP: accepted and shown; see the module `tracking` for what the proxy does.
    pub noloop: bool,
    /// The client the messages go to (REDIRECT); 0: the client itself.
    pub redirect: u64,
    /// BCAST's prefixes; one empty prefix (every key) when none was given.
    pub prefixes: Vec<Bytes>,
}

/// What a valid CLIENT TRACKING asks.
#[derive(Debug, PartialEq, Eq)]
pub enum Switch {
    /// ON, with the options the client tracks under from now on (merged with those it
    /// had, as Redis merges a second ON: prefixes add up).
    On(TrackingOptions),
    Off,
}

/// Checks CLIENT TRACKING `args` (`args[0..2]` are `CLIENT TRACKING`) as Redis does, for
/// a client tracking under `current` (or not tracking); `exists` tells whether a client
/// id is connected (REDIRECT). The error is the reply.
pub fn parse(
    args: &[Bytes],
    current: Option<&TrackingOptions>,
    exists: impl Fn(u64) -> bool,
) -> Result<Switch, Bytes> {
    let mut asked = TrackingOptions::default();
    let mut redirect: i64 = 0;
    let mut prefixes: Vec<Bytes> = Vec::new();
    let mut j = 3;
    while j < args.len() {
        let more = j + 1 < args.len();
        match args[j].to_ascii_lowercase().as_slice() {
            b"redirect" if more => {
                j += 1;
                if redirect != 0 {
                    return Err(reply::error(texts::SINGLE_REDIRECT));
                }
                redirect =
                    parse_i64(&args[j]).ok_or_else(|| reply::error(reply::text::NOT_AN_INTEGER))?;
                // As Redis: the client must exist now, though it may go away later.
                if !u64::try_from(redirect).is_ok_and(&exists) {
                    return Err(reply::error(texts::REDIRECT_TARGET_MISSING));
                }
            }
            b"bcast" => asked.bcast = true,
            b"optin" => asked.optin = true,
            b"optout" => asked.optout = true,
            b"noloop" => asked.noloop = true,
            b"prefix" if more => {
                j += 1;
                prefixes.push(args[j].clone());
            }
            _ => return Err(reply::error(reply::text::SYNTAX)),
        }
        j += 1;
    }
    asked.redirect = redirect as u64;
    match args[2].to_ascii_lowercase().as_slice() {
        b"on" => {}
        b"off" => return Ok(Switch::Off),
        _ => return Err(reply::error(reply::text::SYNTAX)),
    }
    if !asked.bcast && !prefixes.is_empty() {
        return Err(reply::error(texts::PREFIX_WITHOUT_BCAST));
    }
    if current.is_some_and(|now| now.bcast != asked.bcast) {
        return Err(reply::error(texts::BCAST_SWITCH));
    }
    if asked.bcast && (asked.optin || asked.optout) {
        return Err(reply::error(texts::OPTIN_OPTOUT_WITH_BCAST));
    }
    if asked.optin && asked.optout {
        return Err(reply::error(texts::OPTIN_AND_OPTOUT));
    }
    if current.is_some_and(|now| asked.optin && now.optout || asked.optout && now.optin) {
        return Err(reply::error(texts::OPTIN_OPTOUT_SWITCH));
    }
    let held: &[Bytes] = current.map_or(&[], |now| &now.prefixes);
    if asked.bcast {
        check_overlaps(held, &prefixes)?;
        if prefixes.is_empty() {
            prefixes.push(Bytes::new());
        }
    }
    // A prefix the client holds already is kept once, as Redis's set of prefixes.
    let mut merged = held.to_vec();
    for prefix in prefixes {
        if !merged.contains(&prefix) {
            merged.push(prefix);
        }
    }
    // Listed in byte order, as Redis lists the prefixes of its radix tree.
    merged.sort();
    asked.prefixes = merged;
    Ok(Switch::On(asked))
}

/// Redis's collision rule: two prefixes collide when one starts the other (the empty
/// prefix collides with every other, and a prefix with itself).
fn check_overlaps(held: &[Bytes], new: &[Bytes]) -> Result<(), Bytes> {
    let overlap = |a: &[u8], b: &[u8]| a.starts_with(b) || b.starts_with(a);
    for (i, prefix) in new.iter().enumerate() {
        if let Some(existing) = held.iter().find(|h| overlap(h, prefix)) {
            return Err(reply::error(&texts::prefix_overlaps_existing(
                prefix, existing,
            )));
        }
        if let Some(other) = new[i + 1..].iter().find(|o| overlap(o, prefix)) {
            return Err(reply::error(&texts::prefix_overlaps_another(prefix, other)));
        }
    }
    Ok(())
}

/// CLIENT TRACKINGINFO: `options` of a tracking client (`None`: tracking off), whether
/// CLIENT CACHING was given for the next command, and whether its REDIRECT client went
/// away; in Redis's order of flags.
pub fn info(proto: Proto, options: Option<&TrackingOptions>, caching: bool, broken: bool) -> Bytes {
    let mut flags: Vec<&[u8]> = Vec::new();
    match options {
        None => flags.push(b"off"),
        Some(options) => {
            flags.push(b"on");
            if options.bcast {
                flags.push(b"bcast");
            }
            if options.optin {
                flags.push(b"optin");
                if caching {
                    flags.push(b"caching-yes");
                }
            }
            if options.optout {
                flags.push(b"optout");
                if caching {
                    flags.push(b"caching-no");
                }
            }
            if options.noloop {
                flags.push(b"noloop");
            }
            if broken {
                flags.push(b"broken_redirect");
            }
        }
    }
    let mut out = BytesMut::new();
    encode::map_header(&mut out, proto, 3);
    encode::bulk(&mut out, b"flags");
    encode::set_header(&mut out, proto, flags.len());
    for flag in flags {
        encode::bulk(&mut out, flag);
    }
    encode::bulk(&mut out, b"redirect");
    encode::integer(&mut out, options.map_or(-1, |o| o.redirect as i64));
    encode::bulk(&mut out, b"prefixes");
    let prefixes = options.map_or(&[][..], |o| &o.prefixes[..]);
    encode::array_header(&mut out, prefixes.len());
    for prefix in prefixes {
        encode::bulk(&mut out, prefix);
    }
    out.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        let mut all = vec![
            Bytes::from_static(b"CLIENT"),
            Bytes::from_static(b"TRACKING"),
        ];
        all.extend(words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())));
        all
    }

    fn on(words: &[&str], current: Option<&TrackingOptions>) -> Result<TrackingOptions, String> {
        match parse(&args(words), current, |id| id == 7) {
            Ok(Switch::On(options)) => Ok(options),
            Ok(Switch::Off) => Err("off".into()),
            Err(reply) => Err(String::from_utf8_lossy(&reply).into_owned()),
        }
    }

    #[test]
    fn options_are_checked_in_redis_order_with_its_texts() {
        let cases: &[(&[&str], &str)] = &[
            (&["on", "prefix", "a"], texts::PREFIX_WITHOUT_BCAST),
            (&["on", "bcast", "optin"], texts::OPTIN_OPTOUT_WITH_BCAST),
            (&["on", "optin", "optout"], texts::OPTIN_AND_OPTOUT),
            (&["on", "redirect", "8"], texts::REDIRECT_TARGET_MISSING),
            (&["on", "redirect", "7", "redirect", "7"], texts::SINGLE_REDIRECT),
            (&["on", "redirect", "x"], reply::text::NOT_AN_INTEGER),
            (&["on", "nope"], reply::text::SYNTAX),
            (&["maybe"], reply::text::SYNTAX),
            (
                &["on", "bcast", "prefix", "ab", "prefix", "a"],
                "ERR Prefix 'ab' overlaps with another provided prefix 'a'. Prefixes for a single client must not overlap.",
            ),
        ];
        for (words, text) in cases {
            assert_eq!(on(words, None), Err(format!("-{text}\r\n")), "{words:?}");
        }
    }

    #[test]
    fn a_second_on_merges_as_redis_does_and_refuses_a_mode_switch() {
        let first = on(&["on", "bcast", "prefix", "a:"], None).unwrap();
        assert_eq!(first.prefixes, vec![Bytes::from_static(b"a:")]);
        let second = on(&["on", "bcast", "prefix", "b:"], Some(&first)).unwrap();
        assert_eq!(second.prefixes.len(), 2);
        assert!(on(&["on", "bcast", "prefix", "a:"], Some(&first)).is_err());
        let overlap = on(&["on", "bcast", "prefix", "a:b"], Some(&first)).unwrap_err();
        assert_eq!(
            overlap,
            "-ERR Prefix 'a:b' overlaps with an existing prefix 'a:'. Prefixes for a single client must not overlap.\r\n"
        );
        assert_eq!(
            on(&["on"], Some(&first)),
            Err(format!("-{}\r\n", texts::BCAST_SWITCH))
        );
        let optin = on(&["on", "optin"], None).unwrap();
        assert_eq!(
            on(&["on", "optout"], Some(&optin)),
            Err(format!("-{}\r\n", texts::OPTIN_OPTOUT_SWITCH))
        );
        let all = on(&["on", "bcast"], None).unwrap();
        assert_eq!(all.prefixes, vec![Bytes::new()]);
        assert!(on(&["on", "bcast", "prefix", "x"], Some(&all)).is_err());
    }

    #[test]
    fn off_takes_any_valid_option() {
        let reply = parse(
            &args(&["off", "bcast", "prefix", "a", "optin"]),
            None,
            |_| false,
        );
        assert_eq!(reply, Ok(Switch::Off));
    }

    #[test]
    fn trackinginfo_lists_the_flags_in_redis_order() {
        let options = TrackingOptions {
            optin: true,
            noloop: true,
            redirect: 7,
            ..TrackingOptions::default()
        };
        let reply = info(Proto::Resp2, Some(&options), true, true);
        let expected =
            "*6\r\n$5\r\nflags\r\n*5\r\n$2\r\non\r\n$5\r\noptin\r\n$11\r\ncaching-yes\r\n\
                        $6\r\nnoloop\r\n$15\r\nbroken_redirect\r\n$8\r\nredirect\r\n:7\r\n\
                        $8\r\nprefixes\r\n*0\r\n";
        assert_eq!(String::from_utf8_lossy(&reply), expected);
        let off = info(Proto::Resp3, None, false, false);
        assert_eq!(
            String::from_utf8_lossy(&off),
            "%3\r\n$5\r\nflags\r\n~1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n"
        );
    }
}
