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
//!
//! This module tokenizes templates; [`legacy`] compiles and matches legacy patterns,
//! [`cluster`] compiles, renders and reads back cluster templates.

mod cluster;
mod legacy;

pub(crate) use cluster::{ClusterTemplate, Values};
pub(crate) use legacy::LegacyPattern;

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
