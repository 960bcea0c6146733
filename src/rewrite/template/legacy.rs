//! Legacy patterns: compiling the pieces after `<p>:` into an anchored matcher, and matching
//! legacy keys against it.
//!
//! Invariant: matching is deterministic (head from the left, tail from the right, the one
//! `<x...>` in the middle) and agrees with the regular-language reading [`LegacyPattern::nfa`]
//! builds, because compilation refuses the patterns where the two would differ.

use super::super::automaton::{Atom, ByteSet, Nfa};
use super::{Piece, Spans, MAX_CAPTURES};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::template::after_prefix;

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
}
