//! Borrowing views over one complete reply frame (RESP2 or RESP3): what a reader looks at
//! when it must see inside a reply, without copying it or building a tree.
//!
//! [`ReplyView::parse`] checks the whole frame once, in one pass and without recursion
//! (a count of elements still to read says where the frame ends, at any depth), then
//! hands out a view of its top level; an aggregate's [`Elements`] read their views one at
//! a time, on demand, from the same bytes. Reading a bulk string or an integer allocates
//! nothing.
//!
//! [`ReplyView::scanned`] is the one-pass form for a frame a node connection measured
//! already (its [`super::ReplyScanner`] split it off the stream): it reads the top level
//! only, and each element is checked as it is read. A reader that goes through every
//! element once then reads each header once instead of twice.
//!
//! Invariants: a view exists only for bytes that [`ReplyView::parse`] accepted as exactly
//! one frame, so iterating never meets a malformed element, or for a frame read with
//! [`ReplyView::scanned`], whose top-level elements end early at a malformed one (with
//! [`Elements::len`] still above zero, which its reader checks); an attribute (`|`) describes
//! the frame after it and is skipped, so a view is always of the frame itself; no input
//! panics. This is a reader for the callers that look inside replies, not the node
//! connection's hot-path scanner ([`super::ReplyScanner`]), which only measures frames.

use super::{parse_i64, ProtocolError};

mod frame;

use frame::{error, frame_len, read_view, view_at};

/// Which aggregate a [`ReplyView::Aggregate`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggregateKind {
    /// `*`: an array.
    Array,
    /// `~`: a RESP3 set.
    Set,
    /// `>`: a RESP3 push.
    Push,
    /// `%`: a RESP3 map; its elements are its keys and values in turn.
    Map,
}

/// One reply frame, or one element of an aggregate, as slices of the frame's bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplyView<'a> {
    /// `+text`: a simple string.
    Simple(&'a [u8]),
    /// `-text` or `!len` (a RESP3 bulk error): the error's text.
    Error(&'a [u8]),
    /// `:n`: an integer.
    Int(i64),
    /// `$len`: a bulk string's payload.
    Bulk(&'a [u8]),
    /// `=len`: a RESP3 verbatim string, its three-letter format and its text.
    Verbatim {
        /// The format, as `txt` or `mkd`.
        format: &'a [u8],
        /// The text after the format's `:`.
        text: &'a [u8],
    },
    /// `,x`: a RESP3 double, its text as sent (`1.5`, `inf`).
    Double(&'a [u8]),
    /// `(n`: a RESP3 big number, its digits as sent.
    BigNumber(&'a [u8]),
    /// `#t` or `#f`: a RESP3 boolean.
    Boolean(bool),
    /// `$-1`, `*-1` or `_`: a null.
    Null,
    /// An array, set, push or map, its elements read on demand.
    Aggregate(AggregateKind, Elements<'a>),
}

/// The elements of an aggregate, read one at a time (a map's keys and values in turn).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Elements<'a> {
    rest: &'a [u8],
    remaining: usize,
}

impl<'a> Iterator for Elements<'a> {
    type Item = ReplyView<'a>;

    fn next(&mut self) -> Option<ReplyView<'a>> {
        if self.remaining == 0 {
            return None;
        }
        // The frame was checked whole, so an element always reads; stop rather than
        // panic should that ever fail.
        let (view, len) = view_at(self.rest).ok()?;
        self.rest = &self.rest[len..];
        self.remaining -= 1;
        Some(view)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        // The frame was checked whole, so every remaining element reads.
        (self.remaining, Some(self.remaining))
    }
}

impl<'a> Elements<'a> {
    /// How many elements are left to read (a map counts keys and values).
    pub fn len(&self) -> usize {
        self.remaining
    }

    /// Whether every element has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining == 0
    }

    /// The bytes of each element's own frame, for callers that forward elements as they are.
    pub fn frames(self) -> ElementFrames<'a> {
        ElementFrames(self)
    }
}

/// The raw frame of each element of an aggregate (see [`Elements::frames`]).
#[derive(Debug, Clone)]
pub struct ElementFrames<'a>(Elements<'a>);

impl<'a> Iterator for ElementFrames<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let elements = &mut self.0;
        if elements.remaining == 0 {
            return None;
        }
        let len = frame_len(elements.rest).ok()?;
        let (frame, rest) = elements.rest.split_at(len);
        elements.rest = rest;
        elements.remaining -= 1;
        Some(frame)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl<'a> ElementFrames<'a> {
    /// How many element frames are left to read.
    pub fn len(&self) -> usize {
        self.0.remaining
    }

    /// Whether every element frame has been read.
    pub fn is_empty(&self) -> bool {
        self.0.remaining == 0
    }

    /// The element frames left to read as one slice, back to back as the frame holds
    /// them, for a caller that passes them all on at once (the keys of a KEYS reply).
    pub fn joined(&self) -> &'a [u8] {
        self.0.rest
    }

    /// The element frames left to read when there are exactly `N` of them, for a reply of
    /// a fixed shape (SCAN's cursor and keys).
    pub fn exactly<const N: usize>(mut self) -> Option<[&'a [u8]; N]> {
        if self.len() != N {
            return None;
        }
        let mut frames: [&'a [u8]; N] = [&[]; N];
        for frame in &mut frames {
            *frame = self.next()?;
        }
        Some(frames)
    }
}

impl<'a> ReplyView<'a> {
    /// The view of `frame`, which must hold exactly one complete reply frame.
    pub fn parse(frame: &'a [u8]) -> Result<ReplyView<'a>, ProtocolError> {
        let len = frame_len(frame)?;
        if len != frame.len() {
            return Err(error("bytes after the reply frame"));
        }
        read_view(frame)
    }

    /// The view of `frame`, one reply frame as a node connection split it off its stream,
    /// for a reader that goes through its elements once: only the top level is read now,
    /// and each top-level element is checked as it is read (a nested aggregate whole). A
    /// malformed element ends the elements early, so the reader checks that
    /// [`Elements::len`] is zero once they end.
    pub fn scanned(frame: &'a [u8]) -> Result<ReplyView<'a>, ProtocolError> {
        read_view(frame)
    }

    /// The frame of each element of `frame` when it is an array (`*`), set (`~`) or push
    /// (`>`) reply, checked whole: what a caller that forwards or rebuilds elements reads.
    /// `None` for anything else: a null array, an error, a map, a frame behind an
    /// attribute, malformed bytes.
    pub fn element_frames(frame: &'a [u8]) -> Option<ElementFrames<'a>> {
        if !matches!(frame.first(), Some(b'*' | b'~' | b'>')) {
            return None;
        }
        Some(ReplyView::parse(frame).ok()?.elements()?.frames())
    }

    /// The text of a bulk, simple or verbatim string.
    pub fn text(&self) -> Option<&'a [u8]> {
        match *self {
            ReplyView::Bulk(text) | ReplyView::Simple(text) => Some(text),
            ReplyView::Verbatim { text, .. } => Some(text),
            _ => None,
        }
    }

    /// The integer of an `:n` reply.
    pub fn int(&self) -> Option<i64> {
        match *self {
            ReplyView::Int(n) => Some(n),
            _ => None,
        }
    }

    /// The elements of an array, set or push (not a map).
    pub fn elements(&self) -> Option<Elements<'a>> {
        match self {
            ReplyView::Aggregate(kind, elements) if *kind != AggregateKind::Map => {
                Some(elements.clone())
            }
            _ => None,
        }
    }

    /// [`ReplyView::elements`], with a null read as no elements: Redis answers a null where
    /// a list has nothing to say (COMMAND INFO of an unknown name).
    pub fn elements_or_empty(&self) -> Option<Elements<'a>> {
        match self {
            ReplyView::Null => Some(Elements::default()),
            _ => self.elements(),
        }
    }

    /// The name/value pairs of a RESP3 map or of its RESP2 form, a flat array of names and
    /// values in turn (a set or push read the same); a null has none. `None` for anything
    /// else, an aggregate of an odd count included.
    pub fn pairs(&self) -> Option<Pairs<'a>> {
        match self {
            ReplyView::Null => Some(Pairs(Elements::default())),
            ReplyView::Aggregate(_, elements) if elements.len() % 2 == 0 => {
                Some(Pairs(elements.clone()))
            }
            _ => None,
        }
    }

    /// The value named `name` (ignoring ASCII case) in a map or its RESP2 flat array form.
    pub fn field(&self, name: &str) -> Option<ReplyView<'a>> {
        let ReplyView::Aggregate(_, elements) = self else {
            return None;
        };
        let mut elements = elements.clone();
        while let (Some(key), Some(value)) = (elements.next(), elements.next()) {
            if key
                .text()
                .is_some_and(|key| key.eq_ignore_ascii_case(name.as_bytes()))
            {
                return Some(value);
            }
        }
        None
    }

    /// The integer a reply carries, however it is sent: `:n`, a boolean as 0 or 1, or a
    /// string or double whose text is an integer (RESP2 sends numbers as strings).
    pub fn integer(&self) -> Option<i64> {
        match *self {
            ReplyView::Int(n) => Some(n),
            ReplyView::Boolean(b) => Some(i64::from(b)),
            ReplyView::Bulk(text)
            | ReplyView::Simple(text)
            | ReplyView::BigNumber(text)
            | ReplyView::Verbatim { text, .. } => std::str::from_utf8(text).ok()?.parse().ok(),
            ReplyView::Double(text) => double_text(text)?.parse().ok(),
            _ => None,
        }
    }
}

/// A double's text as it reads back as a number (`1.50` is `1.5`, `3.0` is `3`), or
/// `None` when it does not read as one.
pub fn double_text(text: &[u8]) -> Option<String> {
    let value: f64 = std::str::from_utf8(text).ok()?.parse().ok()?;
    Some(value.to_string())
}

/// The name/value pairs of a map or its flat array form (see [`ReplyView::pairs`]).
#[derive(Debug, Clone)]
pub struct Pairs<'a>(Elements<'a>);

impl<'a> Iterator for Pairs<'a> {
    type Item = (ReplyView<'a>, ReplyView<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        Some((self.0.next()?, self.0.next()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{parse_frame, BytesFrame};
    use bytes::Bytes;
    use proptest::prelude::*;

    /// One reply in a form both readers' results reduce to: sets and maps sorted (the
    /// parser keeps them in hash containers), a double by its value.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    enum Norm {
        Text(u8, Vec<u8>),
        Int(i64),
        Double(u64),
        Bool(bool),
        Null,
        List(u8, Vec<Norm>),
        Set(Vec<Norm>),
        Map(Vec<(Norm, Norm)>),
    }

    fn from_view(view: ReplyView<'_>) -> Norm {
        match view {
            ReplyView::Simple(text) => Norm::Text(b'+', text.to_vec()),
            ReplyView::Error(text) => Norm::Text(b'-', text.to_vec()),
            ReplyView::Bulk(text) => Norm::Text(b'$', text.to_vec()),
            ReplyView::Verbatim { text, .. } => Norm::Text(b'=', text.to_vec()),
            ReplyView::BigNumber(text) => Norm::Text(b'(', text.to_vec()),
            ReplyView::Int(n) => Norm::Int(n),
            ReplyView::Double(text) => {
                let value: f64 = std::str::from_utf8(text).unwrap().parse().unwrap();
                Norm::Double(value.to_bits())
            }
            ReplyView::Boolean(b) => Norm::Bool(b),
            ReplyView::Null => Norm::Null,
            ReplyView::Aggregate(AggregateKind::Array, items) => {
                Norm::List(b'*', items.map(from_view).collect())
            }
            ReplyView::Aggregate(AggregateKind::Push, items) => {
                Norm::List(b'>', items.map(from_view).collect())
            }
            ReplyView::Aggregate(AggregateKind::Set, items) => {
                let set: std::collections::BTreeSet<Norm> = items.map(from_view).collect();
                Norm::Set(set.into_iter().collect())
            }
            ReplyView::Aggregate(AggregateKind::Map, mut items) => {
                let mut map = std::collections::BTreeMap::new();
                while let (Some(k), Some(v)) = (items.next(), items.next()) {
                    map.insert(from_view(k), from_view(v));
                }
                Norm::Map(map.into_iter().collect())
            }
        }
    }

    fn from_frame(frame: &BytesFrame) -> Norm {
        match frame {
            BytesFrame::SimpleString { data, .. } => Norm::Text(b'+', data.to_vec()),
            BytesFrame::SimpleError { data, .. } => Norm::Text(b'-', data.as_bytes().to_vec()),
            BytesFrame::BlobError { data, .. } => Norm::Text(b'-', data.to_vec()),
            BytesFrame::BlobString { data, .. } => Norm::Text(b'$', data.to_vec()),
            BytesFrame::VerbatimString { data, .. } => Norm::Text(b'=', data.to_vec()),
            BytesFrame::BigNumber { data, .. } => Norm::Text(b'(', data.to_vec()),
            BytesFrame::Number { data, .. } => Norm::Int(*data),
            BytesFrame::Double { data, .. } => Norm::Double(data.to_bits()),
            BytesFrame::Boolean { data, .. } => Norm::Bool(*data),
            BytesFrame::Null => Norm::Null,
            BytesFrame::Array { data, .. } => {
                Norm::List(b'*', data.iter().map(from_frame).collect())
            }
            BytesFrame::Push { data, .. } => {
                Norm::List(b'>', data.iter().map(from_frame).collect())
            }
            BytesFrame::Set { data, .. } => {
                let set: std::collections::BTreeSet<Norm> = data.iter().map(from_frame).collect();
                Norm::Set(set.into_iter().collect())
            }
            BytesFrame::Map { data, .. } => {
                let map: std::collections::BTreeMap<Norm, Norm> = data
                    .iter()
                    .map(|(k, v)| (from_frame(k), from_frame(v)))
                    .collect();
                Norm::Map(map.into_iter().collect())
            }
            other => panic!("not generated: {other:?}"),
        }
    }

    /// A scalar both protocols share; RESP2's null bulk string aside (the parser's RESP3
    /// reader takes `$-1` for a streamed string, and Redis sends `_` in RESP3).
    fn common_scalar() -> BoxedStrategy<String> {
        let text = "[a-zA-Z0-9 :_-]{0,12}";
        prop_oneof![
            text.prop_map(|t| format!("+{t}\r\n")),
            text.prop_map(|t| format!("-ERR {t}\r\n")),
            any::<i64>().prop_map(|n| format!(":{n}\r\n")),
            proptest::collection::vec(any::<u8>(), 0..16).prop_map(|b| {
                let text = String::from_utf8_lossy(&b).into_owned();
                format!("${}\r\n{text}\r\n", text.len())
            }),
        ]
        .boxed()
    }

    fn scalar(resp3: bool) -> BoxedStrategy<String> {
        if !resp3 {
            return prop_oneof![4 => common_scalar(), 1 => Just("$-1\r\n".to_owned())].boxed();
        }
        let text = "[a-zA-Z0-9 :_-]{0,12}";
        prop_oneof![
            4 => common_scalar(),
            1 => Just("_\r\n".to_owned()),
            1 => any::<bool>().prop_map(|b| format!("#{}\r\n", if b { 't' } else { 'f' })),
            1 => (-1.0e6f64..1.0e6).prop_map(|d| format!(",{d}\r\n")),
            1 => "-?[1-9][0-9]{20,30}".prop_map(|n| format!("({n}\r\n")),
            1 => text.prop_map(|t| format!("={}\r\ntxt:{t}\r\n", t.len() + 4)),
            1 => text.prop_map(|t| format!("!{}\r\nERR {t}\r\n", t.len() + 4)),
        ]
        .boxed()
    }

    /// A reply of either protocol; set members and map keys are scalars, as the parser
    /// refuses aggregate ones. Map keys are distinct, as Redis sends them: with a repeated
    /// key the parser keeps the first value and a reader of pairs keeps both.
    fn reply(resp3: bool) -> impl Strategy<Value = String> {
        scalar(resp3).prop_recursive(4, 32, 6, move |inner| {
            let items = proptest::collection::vec(inner.clone(), 0..6);
            let keys = proptest::collection::btree_map(common_scalar(), inner, 0..4);
            let aggregate = |mark: char, items: Vec<String>| {
                format!("{mark}{}\r\n{}", items.len(), items.concat())
            };
            let array = items.clone().prop_map(move |i| aggregate('*', i));
            if !resp3 {
                return prop_oneof![array, Just("*-1\r\n".to_owned())].boxed();
            }
            prop_oneof![
                array,
                items.prop_map(move |i| aggregate('>', i)),
                proptest::collection::vec(scalar(true), 0..5).prop_map(move |i| aggregate('~', i)),
                keys.prop_map(|pairs| {
                    let body: String = pairs.iter().map(|(k, v)| format!("{k}{v}")).collect();
                    format!("%{}\r\n{body}", pairs.len())
                }),
            ]
            .boxed()
        })
    }

    proptest! {
        #[test]
        fn the_view_agrees_with_the_parser(frame in prop_oneof![reply(false), reply(true)]) {
            let bytes = Bytes::from(frame);
            let parsed = parse_frame(&bytes).expect("the parser reads it");
            let view = ReplyView::parse(&bytes).expect("the view reads it");
            prop_assert_eq!(from_view(view), from_frame(&parsed));
        }

        #[test]
        fn cut_or_extended_frames_are_refused(frame in reply(true), cut in any::<prop::sample::Index>()) {
            let at = cut.index(frame.len());
            prop_assert!(ReplyView::parse(&frame.as_bytes()[..at]).is_err());
            let longer = format!("{frame}+OK\r\n");
            prop_assert!(ReplyView::parse(longer.as_bytes()).is_err());
        }

        #[test]
        fn no_input_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok(view) = ReplyView::parse(&bytes) {
                let _ = from_view(view);
            }
        }
    }

    #[test]
    fn a_carriage_return_in_the_type_byte_is_refused_not_a_panic() {
        for frame in [&b"\r\n"[..], b"\r\r\n", b"\rx\r\n"] {
            assert!(ReplyView::parse(frame).is_err(), "{frame:?}");
            assert!(ReplyView::scanned(frame).is_err(), "{frame:?}");
        }
    }

    #[test]
    fn elements_are_read_on_demand_as_slices() {
        let frame = b"*3\r\n$3\r\nfoo\r\n*2\r\n:1\r\n_\r\n:-7\r\n";
        let view = ReplyView::parse(frame).unwrap();
        let mut elements = view.elements().unwrap();
        assert_eq!(elements.len(), 3);
        let first = elements.next().unwrap();
        assert_eq!(first.text(), Some(&b"foo"[..]));
        assert!(std::ptr::eq(
            first.text().unwrap().as_ptr(),
            frame[8..].as_ptr()
        ));
        let inner: Vec<_> = elements.next().unwrap().elements().unwrap().collect();
        assert_eq!(inner, [ReplyView::Int(1), ReplyView::Null]);
        assert_eq!(elements.next().and_then(|v| v.int()), Some(-7));
        assert_eq!(elements.next(), None);
        let frames: Vec<_> = view.elements().unwrap().frames().collect();
        assert_eq!(
            frames,
            [&b"$3\r\nfoo\r\n"[..], b"*2\r\n:1\r\n_\r\n", b":-7\r\n"]
        );
    }

    #[test]
    fn element_frames_are_those_of_an_array_set_or_push() {
        let frame = b"*3\r\n$1\r\na\r\n$-1\r\n*1\r\n:2\r\n";
        let frames = ReplyView::element_frames(frame).unwrap();
        assert_eq!(frames.len(), 3);
        assert_eq!(
            frames.collect::<Vec<_>>(),
            [&b"$1\r\na\r\n"[..], b"$-1\r\n", b"*1\r\n:2\r\n"]
        );
        for aggregate in [&b"~1\r\n+a\r\n"[..], b">1\r\n+a\r\n"] {
            let frames: Vec<_> = ReplyView::element_frames(aggregate).unwrap().collect();
            assert_eq!(frames, [&b"+a\r\n"[..]]);
        }
        for other in [
            &b"*-1\r\n"[..],
            b"-ERR x\r\n",
            b"%1\r\n+a\r\n:1\r\n",
            b"|1\r\n+k\r\n+v\r\n*1\r\n:1\r\n",
            b"*2\r\n:1\r\n",
            b"*1\r\n:1\r\n:2\r\n",
            b"$1\r\na\r\n",
            b"",
        ] {
            assert!(ReplyView::element_frames(other).is_none(), "{other:?}");
        }
        let pair = b"*2\r\n$1\r\n0\r\n*0\r\n";
        let frames = || ReplyView::element_frames(pair).unwrap();
        assert_eq!(
            frames().exactly::<2>(),
            Some([&b"$1\r\n0\r\n"[..], b"*0\r\n"])
        );
        assert_eq!(frames().exactly::<1>(), None);
        assert_eq!(frames().exactly::<3>(), None);
    }

    #[test]
    fn joined_element_frames_are_the_bytes_after_the_header() {
        let frame = b"*3\r\n$1\r\na\r\n$-1\r\n*1\r\n:2\r\n";
        let mut frames = ReplyView::element_frames(frame).unwrap();
        assert_eq!(frames.joined(), b"$1\r\na\r\n$-1\r\n*1\r\n:2\r\n");
        frames.next();
        assert_eq!(frames.joined(), b"$-1\r\n*1\r\n:2\r\n");
        assert_eq!(ReplyView::element_frames(b"*0\r\n").unwrap().joined(), b"");
        let nested = b"*2\r\n*1\r\n:1\r\n:2\r\n";
        let inner = ReplyView::parse(nested)
            .unwrap()
            .elements()
            .unwrap()
            .next()
            .unwrap();
        let inner = inner.elements().unwrap().frames();
        assert_eq!(inner.joined(), b":1\r\n");
        let map = b"%1\r\n+k\r\n:1\r\n";
        let ReplyView::Aggregate(AggregateKind::Map, pair) = ReplyView::parse(map).unwrap() else {
            panic!("a map");
        };
        assert_eq!(pair.frames().joined(), b"+k\r\n:1\r\n");
    }

    #[test]
    fn pairs_and_fields_read_a_map_and_its_flat_array_alike() {
        for frame in [
            &b"%2\r\n+calls\r\n:3\r\n+Rate\r\n,1.50\r\n"[..],
            b"*4\r\n$5\r\ncalls\r\n:3\r\n$4\r\nRate\r\n$3\r\n1.5\r\n",
        ] {
            let view = ReplyView::parse(frame).unwrap();
            let names: Vec<_> = view.pairs().unwrap().map(|(k, _)| k.text()).collect();
            assert_eq!(names, [Some(&b"calls"[..]), Some(b"Rate")]);
            assert_eq!(view.field("CALLS").and_then(|v| v.integer()), Some(3));
            assert!(view.field("rate").is_some());
            assert_eq!(view.field("missing"), None);
        }
        let null = ReplyView::parse(b"_\r\n").unwrap();
        assert_eq!(null.pairs().map(Iterator::count), Some(0));
        assert_eq!(null.elements_or_empty().map(|e| e.len()), Some(0));
        assert_eq!(null.elements(), None);
        let odd = ReplyView::parse(b"*3\r\n:1\r\n:2\r\n:3\r\n").unwrap();
        assert!(odd.pairs().is_none());
        assert_eq!(odd.field("1"), None, "an integer key is not a name");
    }

    #[test]
    fn integers_read_however_they_are_sent() {
        for (frame, n) in [
            (&b":-4\r\n"[..], Some(-4)),
            (b"#t\r\n", Some(1)),
            (b"$2\r\n12\r\n", Some(12)),
            (b"+7\r\n", Some(7)),
            (b",3.0\r\n", Some(3)),
            (b",1.5\r\n", None),
            (b"$1\r\nx\r\n", None),
            (b"_\r\n", None),
        ] {
            assert_eq!(ReplyView::parse(frame).unwrap().integer(), n, "{frame:?}");
        }
        assert_eq!(double_text(b"1.50").as_deref(), Some("1.5"));
        assert_eq!(double_text(b"inf").as_deref(), Some("inf"));
        assert_eq!(double_text(b"x"), None);
    }

    #[test]
    fn attributes_are_skipped_and_nulls_read() {
        let frame = b"|1\r\n+key\r\n%1\r\n+a\r\n:1\r\n*2\r\n:1\r\n:2\r\n";
        let view = ReplyView::parse(frame).unwrap();
        assert_eq!(view.elements().unwrap().count(), 2);
        for null in [&b"$-1\r\n"[..], b"*-1\r\n", b"_\r\n"] {
            assert_eq!(ReplyView::parse(null), Ok(ReplyView::Null));
        }
        assert_eq!(
            ReplyView::parse(b"=8\r\ntxt:abcd\r\n"),
            Ok(ReplyView::Verbatim {
                format: b"txt",
                text: b"abcd"
            })
        );
    }

    #[test]
    fn malformed_frames_are_refused() {
        for bad in [
            &b""[..],
            b"+OK",
            b"+OK\r",
            b":x\r\n",
            b":01\r\n",
            b"$5\r\nab\r\n",
            b"$2\r\nabXY",
            b"*2\r\n:1\r\n",
            b"*99999999999\r\n:1\r\n",
            b"%1\r\n+a\r\n",
            b"#x\r\n",
            b"~-1\r\n",
            b"@\r\n",
            b"=2\r\nab\r\n",
            b"$01\r\na\r\n",
            b"*01\r\n:1\r\n",
            b"$1\n\ra\r\n",
            b"*1234567890123456789012\r\n",
        ] {
            assert!(ReplyView::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_scanned_frame_ends_its_elements_at_a_malformed_one() {
        let frame = b"*3\r\n$1\r\na\r\n$9\r\nb\r\n$1\r\nc\r\n";
        assert!(ReplyView::parse(frame).is_err());
        let mut elements = ReplyView::scanned(frame).unwrap().elements().unwrap();
        assert_eq!(elements.next(), Some(ReplyView::Bulk(b"a")));
        assert_eq!(elements.next(), None);
        assert_eq!(elements.len(), 2, "what was left unread");
        let whole = b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n";
        let read: Vec<_> = ReplyView::scanned(whole)
            .unwrap()
            .elements()
            .unwrap()
            .collect();
        assert_eq!(read.len(), 2);
        assert_eq!(
            ReplyView::parse(whole).unwrap().elements().unwrap().count(),
            2
        );
    }

    #[test]
    fn counts_read_the_same_short_or_long() {
        assert_eq!(ReplyView::parse(b"$0\r\n\r\n"), Ok(ReplyView::Bulk(b"")));
        assert_eq!(
            ReplyView::parse(b"*0\r\n").map(|view| view.elements().map(|items| items.len())),
            Ok(Some(0))
        );
        // 18 digits and 19: the short reading and the general one refuse alike.
        for count in ["123456789012345678", "1234567890123456789"] {
            for kind in ['$', '*'] {
                let frame = format!("{kind}{count}\r\nab\r\n");
                assert_eq!(
                    ReplyView::parse(frame.as_bytes()),
                    Err(error("incomplete reply frame")),
                    "{frame:?}"
                );
            }
        }
    }

    #[test]
    fn any_depth_reads_without_recursion() {
        let deep = "*1\r\n".repeat(200_000) + ":1\r\n";
        let outcome = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let mut view = ReplyView::parse(deep.as_bytes()).ok()?;
                let mut depth = 0;
                while let Some(mut items) = view.elements() {
                    view = items.next()?;
                    depth += 1;
                    if depth > 3 {
                        break;
                    }
                }
                Some(depth)
            })
            .expect("spawn")
            .join()
            .expect("no overflow");
        assert_eq!(outcome, Some(4));
    }
}
