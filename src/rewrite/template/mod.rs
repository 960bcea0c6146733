//! Legacy patterns and cluster templates of one rule: parsing, validation, matching and
//! rendering. All text here is the part after `<p>:`; the prefix is handled by the caller.
//!
//! A legacy pattern is literal text with captures: `<x>` matches one segment (bytes without
//! `:`), `<x...>` any run of bytes (at most one per pattern). The pattern is anchored at both
//! ends: what comes before `<x...>` is matched from the left, what follows it from the
//! right, and `<x...>` takes the middle. Validation makes that deterministic matcher agree
//! with the plain regular-language reading of the pattern (which [`LegacyPattern::nfa`]
//! builds): captures are never adjacent, and a `<x>` before `<x...>` is followed by text
//! holding a `:`, one after it is preceded by such text.
//!
//! A cluster template holds encoded captures and the bucket `<b>`. Encoded captures never
//! contain the bytes that may follow them (validated), so reading a template back is one
//! left-to-right pass.

use super::automaton::{Atom, ByteSet, Nfa};
use super::encoding::{decode_segment, encode_segment, is_encoded_byte, needs_encoding};

/// Most captures one legacy pattern may have; keeps matching free of allocation.
pub(crate) const MAX_CAPTURES: usize = 8;

/// Byte ranges of the captures of a legacy key, by capture slot.
pub(crate) type Spans = [(usize, usize); MAX_CAPTURES];

/// A template as written: literal text and placeholders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    Text(Vec<u8>),
    Prefix,
    Bucket,
    Capture { name: String, many: bool },
}

/// Splits `template` into text and `<...>` placeholders.
pub(crate) fn tokenize(template: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find('<') {
            Some(0) => {
                let close = rest
                    .find('>')
                    .ok_or_else(|| format!("`<` without `>` in `{template}`"))?;
                let inner = &rest[1..close];
                let (name, many) = match inner.strip_suffix("...") {
                    Some(name) => (name, true),
                    None => (inner, false),
                };
                let valid = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !valid {
                    return Err(format!("bad placeholder `<{inner}>` in `{template}`"));
                }
                pieces.push(match (name, many) {
                    ("p", false) => Piece::Prefix,
                    ("b", false) => Piece::Bucket,
                    ("p" | "b", true) => {
                        return Err(format!("`<{inner}>`: `p` and `b` take no `...`"))
                    }
                    _ => Piece::Capture {
                        name: name.to_owned(),
                        many,
                    },
                });
                rest = &rest[close + 1..];
            }
            found => {
                let end = found.unwrap_or(rest.len());
                pieces.push(Piece::Text(rest.as_bytes()[..end].to_vec()));
                rest = &rest[end..];
            }
        }
    }
    Ok(pieces)
}

/// The pieces after a leading `<p>:`; a key template must start with it and hold no other `<p>`.
pub(crate) fn after_prefix(template: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = tokenize(template)?;
    let starts_right = matches!(pieces.first(), Some(Piece::Prefix))
        && matches!(pieces.get(1), Some(Piece::Text(text)) if text.first() == Some(&b':'));
    if !starts_right {
        return Err(format!("`{template}` must start with `<p>:`"));
    }
    pieces.remove(0);
    if let Some(Piece::Text(text)) = pieces.first_mut() {
        text.remove(0);
        if text.is_empty() {
            pieces.remove(0);
        }
    }
    no_prefix(&pieces, template)?;
    Ok(pieces)
}

/// Refuses `<p>` anywhere in `pieces`.
pub(crate) fn no_prefix(pieces: &[Piece], template: &str) -> Result<(), String> {
    if pieces.contains(&Piece::Prefix) {
        return Err(format!("`<p>` may only open a key template: `{template}`"));
    }
    Ok(())
}

#[derive(Clone, Debug)]
enum Elem {
    Lit(Box<[u8]>),
    /// One segment; `glue` is how many bytes of the neighbouring text (the text that ties
    /// it to the `:` that delimits it) sit inside that segment.
    One {
        slot: u8,
        glue: usize,
    },
}

/// A compiled legacy pattern (the part after `<p>:`).
#[derive(Clone, Debug)]
pub(crate) struct LegacyPattern {
    head: Vec<Elem>,
    many: Option<u8>,
    tail: Vec<Elem>,
    names: Vec<String>,
    literal_len: usize,
}

impl LegacyPattern {
    /// Compiles the pieces after `<p>:`.
    pub(crate) fn compile(pieces: &[Piece], template: &str) -> Result<Self, String> {
        let mut names: Vec<String> = Vec::new();
        let mut head = Vec::new();
        let mut tail = Vec::new();
        let mut many = None;
        let mut literal_len = 0;
        for (at, piece) in pieces.iter().enumerate() {
            let elem = match piece {
                Piece::Text(text) => {
                    literal_len += text.len();
                    Elem::Lit(text.clone().into_boxed_slice())
                }
                Piece::Prefix => return Err(format!("`<p>` may only open `{template}`")),
                Piece::Bucket => {
                    return Err(format!("`<b>` belongs in cluster templates: `{template}`"))
                }
                Piece::Capture {
                    name,
                    many: is_many,
                } => {
                    if names.contains(name) {
                        return Err(format!("capture `{name}` appears twice in `{template}`"));
                    }
                    if names.len() == MAX_CAPTURES {
                        return Err(format!("more than {MAX_CAPTURES} captures in `{template}`"));
                    }
                    if matches!(pieces.get(at + 1), Some(Piece::Capture { .. })) {
                        return Err(format!("captures must be separated by text: `{template}`"));
                    }
                    names.push(name.clone());
                    let slot = (names.len() - 1) as u8;
                    if *is_many {
                        if many.is_some() {
                            return Err(format!("more than one `<x...>` in `{template}`"));
                        }
                        many = Some(slot);
                        continue;
                    }
                    Elem::One { slot, glue: 0 }
                }
            };
            if many.is_some() {
                tail.push(elem);
            } else {
                head.push(elem);
            }
        }
        set_glue(&mut head, &mut tail, many.is_some(), template)?;
        Ok(Self {
            head,
            many,
            tail,
            names,
            literal_len,
        })
    }

    /// Names of the captures, by slot.
    pub(crate) fn names(&self) -> &[String] {
        &self.names
    }

    /// Literal bytes in the pattern: the specificity used for precedence.
    pub(crate) fn literal_len(&self) -> usize {
        self.literal_len
    }

    /// The capture spans when `text` (a key without `<p>:`) matches.
    pub(crate) fn matches(&self, text: &[u8]) -> Option<Spans> {
        let mut spans: Spans = [(0, 0); MAX_CAPTURES];
        let head_end = match_head(&self.head, text, &mut spans)?;
        match self.many {
            None => (head_end == text.len()).then_some(spans),
            Some(slot) => {
                let tail_start = match_tail(&self.tail, text, &mut spans)?;
                if head_end > tail_start {
                    return None;
                }
                spans[usize::from(slot)] = (head_end, tail_start);
                Some(spans)
            }
        }
    }

    /// Captures fixed by `literal`, the known start of every key of interest: a capture
    /// before `<x...>` whose segment ends inside `literal`.
    pub(crate) fn pinned_by_start(&self, literal: &[u8]) -> [Option<(usize, usize)>; MAX_CAPTURES] {
        let mut pinned = [None; MAX_CAPTURES];
        let mut pos = 0;
        for (at, elem) in self.head.iter().enumerate() {
            match elem {
                Elem::Lit(lit) => {
                    if !literal[pos..].starts_with(lit) {
                        break;
                    }
                    pos += lit.len();
                }
                Elem::One { slot, glue } => {
                    let last = at + 1 == self.head.len() && self.many.is_none();
                    if last {
                        break;
                    }
                    let Some(colon) = literal[pos..].iter().position(|&b| b == b':') else {
                        break;
                    };
                    let Some(len) = colon.checked_sub(*glue) else {
                        break;
                    };
                    pinned[usize::from(*slot)] = Some((pos, pos + len));
                    pos += len;
                }
            }
        }
        pinned
    }

    /// Writes the legacy text (without `<p>:`) for raw capture values.
    pub(crate) fn render<'a>(&self, value: impl Fn(u8) -> &'a [u8], out: &mut Vec<u8>) {
        let mut put = |elem: &Elem| match elem {
            Elem::Lit(lit) => out.extend_from_slice(lit),
            Elem::One { slot, .. } => out.extend_from_slice(value(*slot)),
        };
        self.head.iter().for_each(&mut put);
        if let Some(slot) = self.many {
            put(&Elem::One { slot, glue: 0 });
        }
        self.tail.iter().for_each(put);
    }

    /// The pattern as an automaton, preceded by `lead` (usually `prefix:`).
    pub(crate) fn nfa(&self, lead: &[u8]) -> Nfa {
        let mut nfa = Nfa::default();
        nfa.push_literal(lead);
        let put = |nfa: &mut Nfa, elem: &Elem| match elem {
            Elem::Lit(lit) => nfa.push_literal(lit),
            Elem::One { .. } => nfa.push(Atom::Loop(ByteSet::all_except(b':'))),
        };
        self.head.iter().for_each(|elem| put(&mut nfa, elem));
        if self.many.is_some() {
            nfa.push(Atom::Loop(ByteSet::all()));
        }
        self.tail.iter().for_each(|elem| put(&mut nfa, elem));
        nfa
    }
}

/// Checks the segment rules of `<x>` captures and records their glue.
fn set_glue(
    head: &mut [Elem],
    tail: &mut [Elem],
    has_many: bool,
    template: &str,
) -> Result<(), String> {
    let head_len = head.len();
    for at in 0..head_len {
        if !matches!(head[at], Elem::One { .. }) {
            continue;
        }
        let glue_len = match head.get(at + 1) {
            Some(Elem::Lit(next)) => next.iter().position(|&b| b == b':'),
            None if !has_many => Some(0),
            _ => None,
        };
        let Some(glue_len) = glue_len else {
            return Err(format!(
                "a `<x>` before `<x...>` must be followed by text with a `:`: `{template}`"
            ));
        };
        if let Elem::One { glue, .. } = &mut head[at] {
            *glue = glue_len;
        }
    }
    for at in 0..tail.len() {
        if !matches!(tail[at], Elem::One { .. }) {
            continue;
        }
        let glue_len = match at.checked_sub(1).and_then(|before| tail.get(before)) {
            Some(Elem::Lit(before)) => before
                .iter()
                .rposition(|&b| b == b':')
                .map(|colon| before.len() - colon - 1),
            _ => None,
        };
        let Some(glue_len) = glue_len else {
            return Err(format!(
                "a `<x>` after `<x...>` must follow text with a `:`: `{template}`"
            ));
        };
        if let Elem::One { glue, .. } = &mut tail[at] {
            *glue = glue_len;
        }
    }
    Ok(())
}

fn match_head(elems: &[Elem], text: &[u8], spans: &mut Spans) -> Option<usize> {
    let mut pos = 0;
    for elem in elems {
        match elem {
            Elem::Lit(lit) => {
                if !text[pos..].starts_with(lit) {
                    return None;
                }
                pos += lit.len();
            }
            Elem::One { slot, glue } => {
                let segment_end = text[pos..]
                    .iter()
                    .position(|&b| b == b':')
                    .map_or(text.len(), |colon| pos + colon);
                let end = segment_end.checked_sub(*glue)?;
                if end < pos {
                    return None;
                }
                spans[usize::from(*slot)] = (pos, end);
                pos = end;
            }
        }
    }
    Some(pos)
}

fn match_tail(elems: &[Elem], text: &[u8], spans: &mut Spans) -> Option<usize> {
    let mut end = text.len();
    for elem in elems.iter().rev() {
        match elem {
            Elem::Lit(lit) => {
                if !text[..end].ends_with(lit) {
                    return None;
                }
                end -= lit.len();
            }
            Elem::One { slot, glue } => {
                let segment_start = text[..end].iter().rposition(|&b| b == b':')? + 1;
                let start = segment_start + glue;
                if start > end {
                    return None;
                }
                spans[usize::from(*slot)] = (start, end);
                end = start;
            }
        }
    }
    Some(end)
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Lit(Box<[u8]>),
    Capture(u8),
    Bucket,
}

/// A compiled cluster-side template: a key body (after `<p>:`) or an index member.
#[derive(Clone, Debug)]
pub(crate) struct ClusterTemplate {
    parts: Vec<Part>,
}

/// Raw capture values read back from a cluster key, by slot.
pub(crate) type Values = [Option<Vec<u8>>; MAX_CAPTURES];

impl ClusterTemplate {
    /// Compiles `pieces`, resolving capture names against the legacy pattern's `names`.
    pub(crate) fn compile(
        pieces: &[Piece],
        names: &[String],
        template: &str,
    ) -> Result<Self, String> {
        let mut parts = Vec::with_capacity(pieces.len());
        for (at, piece) in pieces.iter().enumerate() {
            let next_text = match pieces.get(at + 1) {
                Some(Piece::Text(text)) => Some(text.first().copied()),
                Some(_) => {
                    if !matches!(piece, Piece::Text(_)) {
                        return Err(format!(
                            "placeholders must be separated by text: `{template}`"
                        ));
                    }
                    None
                }
                None => Some(None),
            };
            parts.push(match piece {
                Piece::Text(text) => Part::Lit(text.clone().into_boxed_slice()),
                Piece::Prefix => return Err(format!("`<p>` may only open `{template}`")),
                Piece::Bucket => {
                    if let Some(Some(byte)) = next_text {
                        if byte.is_ascii_digit() {
                            return Err(format!("`<b>` must not be followed by a digit: `{template}`"));
                        }
                    }
                    Part::Bucket
                }
                Piece::Capture { name, .. } => {
                    let slot = names
                        .iter()
                        .position(|known| known == name)
                        .ok_or_else(|| format!("`<{name}>` is not captured by the legacy pattern: `{template}`"))?;
                    if let Some(Some(byte)) = next_text {
                        if !needs_encoding(byte) || byte == b'%' {
                            return Err(format!(
                                "`<{name}>` must be followed by one of `: {{ }} * ? [ ] \\`: `{template}`"
                            ));
                        }
                    }
                    Part::Capture(slot as u8)
                }
            });
        }
        Ok(Self { parts })
    }

    /// Slots of the captures this template uses.
    pub(crate) fn capture_slots(&self) -> impl Iterator<Item = u8> + '_ {
        self.parts.iter().filter_map(|part| match part {
            Part::Capture(slot) => Some(*slot),
            _ => None,
        })
    }

    /// True when the template uses `<b>`.
    pub(crate) fn uses_bucket(&self) -> bool {
        self.parts.contains(&Part::Bucket)
    }

    /// Writes the template for raw capture values (encoded on the way) and a bucket.
    pub(crate) fn render<'a>(&self, value: impl Fn(u8) -> &'a [u8], bucket: u8, out: &mut Vec<u8>) {
        for part in &self.parts {
            match part {
                Part::Lit(lit) => out.extend_from_slice(lit),
                Part::Capture(slot) => encode_segment(value(*slot), out),
                Part::Bucket => push_decimal(bucket, out),
            }
        }
    }

    /// Reads `text` back: the decoded captures into `values` and the bucket, if any.
    /// `None` when `text` is not exactly a rendering of this template.
    pub(crate) fn read(&self, text: &[u8], values: &mut Values) -> Option<Option<u8>> {
        let mut pos = 0;
        let mut bucket = None;
        for part in &self.parts {
            match part {
                Part::Lit(lit) => {
                    if !text[pos..].starts_with(lit) {
                        return None;
                    }
                    pos += lit.len();
                }
                Part::Capture(slot) => {
                    let len = text[pos..]
                        .iter()
                        .position(|&b| !is_encoded_byte(b))
                        .unwrap_or(text.len() - pos);
                    let decoded = decode_segment(&text[pos..pos + len])?;
                    let entry = &mut values[usize::from(*slot)];
                    match entry {
                        Some(earlier) if *earlier != decoded => return None,
                        _ => *entry = Some(decoded),
                    }
                    pos += len;
                }
                Part::Bucket => {
                    let digits = text[pos..]
                        .iter()
                        .take_while(|b| b.is_ascii_digit())
                        .count();
                    let value = parse_bucket(&text[pos..pos + digits])?;
                    bucket = Some(value);
                    pos += digits;
                }
            }
        }
        (pos == text.len()).then_some(bucket)
    }

    /// The hash tag as a sequence of parts (`None` without `{...}`), for checking that two
    /// templates always land in one slot. Errors when the tag could render empty.
    pub(crate) fn hash_tag(&self) -> Result<Option<Vec<TagSymbol>>, String> {
        let mut symbolic: Vec<TagSymbol> = Vec::new();
        for part in &self.parts {
            match part {
                Part::Lit(lit) => symbolic.extend(lit.iter().map(|&b| TagSymbol::Byte(b))),
                Part::Capture(slot) => symbolic.push(TagSymbol::Capture(*slot)),
                Part::Bucket => symbolic.push(TagSymbol::Bucket),
            }
        }
        let Some(open) = symbolic.iter().position(|p| *p == TagSymbol::Byte(b'{')) else {
            return Ok(None);
        };
        let Some(len) = symbolic[open + 1..]
            .iter()
            .position(|p| *p == TagSymbol::Byte(b'}'))
        else {
            return Ok(None);
        };
        let tag = symbolic[open + 1..open + 1 + len].to_vec();
        if !tag
            .iter()
            .any(|p| matches!(p, TagSymbol::Byte(_) | TagSymbol::Bucket))
        {
            return Err(
                "a hash tag needs text or `<b>` besides captures, or it may render empty".into(),
            );
        }
        Ok(Some(tag))
    }
}

/// One symbol of a rendered template, for comparing hash tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TagSymbol {
    Byte(u8),
    Capture(u8),
    Bucket,
}

fn push_decimal(value: u8, out: &mut Vec<u8>) {
    if value >= 100 {
        out.push(b'0' + value / 100);
    }
    if value >= 10 {
        out.push(b'0' + (value / 10) % 10);
    }
    out.push(b'0' + value % 10);
}

/// A bucket number in canonical decimal (no leading zero), below 32.
fn parse_bucket(digits: &[u8]) -> Option<u8> {
    match digits {
        [d] => Some(d - b'0'),
        [b'1'..=b'3', d] => {
            let value = (digits[0] - b'0') * 10 + (d - b'0');
            (u32::from(value) < super::encoding::BUCKET_COUNT).then_some(value)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn legacy(template: &str) -> LegacyPattern {
        LegacyPattern::compile(&after_prefix(template).unwrap(), template).unwrap()
    }

    fn captures(pattern: &LegacyPattern, text: &str) -> Option<Vec<String>> {
        let spans = pattern.matches(text.as_bytes())?;
        Some(
            (0..pattern.names().len())
                .map(|slot| text[spans[slot].0..spans[slot].1].to_owned())
                .collect(),
        )
    }

    #[test]
    fn many_takes_the_middle_and_one_takes_a_segment() {
        let msg = legacy("<p>:msg:<chat...>:<member>");
        assert_eq!(
            captures(&msg, "msg:a:b:c"),
            Some(vec!["a:b".into(), "c".into()])
        );
        assert_eq!(captures(&msg, "msg:m1"), None);
        let user = legacy("<p>:user:<user>:<ns>:<key...>");
        assert_eq!(
            captures(&user, "user:u1:prefs:a:b"),
            Some(vec!["u1".into(), "prefs".into(), "a:b".into()])
        );
        assert_eq!(captures(&user, "user:u1:prefs"), None);
        let durable = legacy("<p>:{durable:<table>}:<rest...>");
        assert_eq!(
            captures(&durable, "{durable:t}b}:x"),
            Some(vec!["t}b".into(), "x".into()])
        );
        let single = legacy("<p>:conv:<id>");
        assert_eq!(captures(&single, "conv:42"), Some(vec!["42".into()]));
        assert_eq!(captures(&single, "conv:4:2"), None);
    }

    #[test]
    fn bad_patterns_are_refused() {
        for template in [
            "<p>:a:<x...>:<y...>",
            "<p>:a:<x><y>",
            "<p>:a:<x>-<y...>",
            "<p>:a:<x...>-<y>",
            "<p>:a:<b>",
            "<p>:a:<x>:<x>",
            "a:<x>",
            "<p>:a:<p>",
            "<p>:a:<x",
            "<p>:a:<x y>",
        ] {
            let compiled =
                after_prefix(template).and_then(|p| LegacyPattern::compile(&p, template));
            assert!(compiled.is_err(), "{template} should be refused");
        }
    }

    #[test]
    fn cluster_templates_read_back_what_they_render() {
        let names = vec!["id".to_owned()];
        let template = "<p>:{ch:<b>}:r:<id>";
        let cluster =
            ClusterTemplate::compile(&after_prefix(template).unwrap(), &names, template).unwrap();
        let mut out = Vec::new();
        cluster.render(|_| b"a:b{c}", 1, &mut out);
        assert_eq!(out, b"{ch:1}:r:a%3Ab%7Bc%7D");
        let mut values: Values = Default::default();
        assert_eq!(cluster.read(&out, &mut values), Some(Some(1)));
        assert_eq!(values[0].as_deref(), Some(&b"a:b{c}"[..]));
        for foreign in [
            &b"{ch:01}:r:x"[..],
            b"{ch:32}:r:x",
            b"{ch:1}:r:a:b",
            b"{ch:1}:r:%3a",
        ] {
            assert_eq!(cluster.read(foreign, &mut Default::default()), None);
        }
    }

    #[test]
    fn capture_followed_by_plain_text_is_refused() {
        let names = vec!["id".to_owned()];
        let template = "<p>:{x:<id>-y}";
        let pieces = after_prefix(template).unwrap();
        assert!(ClusterTemplate::compile(&pieces, &names, template).is_err());
    }
}
