//! Cluster templates: compiling the pieces of a cluster key body or index member, rendering
//! them from capture values and a bucket, and reading captures back from a rendered key.
//!
//! Invariant: encoded captures never contain the bytes that may follow them (checked at
//! compile time), so reading back is one left-to-right pass and rejects foreign keys.

use super::super::encoding::{decode_segment, encode_segment, is_encoded_byte, needs_encoding};
use super::{Piece, MAX_CAPTURES};

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
            (u32::from(value) < super::super::encoding::BUCKET_COUNT).then_some(value)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rewrite::template::after_prefix;

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
