//! A reply as the offline tools see it: a small owned value read from one frame, strings
//! sharing the frame's buffer.

use bytes::Bytes;

use super::MigrateError;
use crate::protocol::{reply_nesting, ReplyView, MAX_PARSED_NESTING};

/// One reply, reduced to what the tools look at.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A null reply (missing key, nil bulk).
    Nil,
    /// An integer.
    Int(i64),
    /// A bulk or simple string.
    Data(Bytes),
    /// An array (or set, or map flattened to key, value, ...).
    List(Vec<Reply>),
    /// An error reply, with its text.
    Error(String),
}

impl Reply {
    /// Reads `raw`, one complete reply frame.
    pub(super) fn read(raw: &Bytes) -> Result<Reply, MigrateError> {
        // Building the tree recurses: a reply deeper than any the tools ask for is refused.
        let nesting = reply_nesting(raw).map_err(|e| MigrateError::Redis(e.0))?;
        if nesting > MAX_PARSED_NESTING {
            return Err(MigrateError::Redis(format!(
                "Protocol error: reply nests deeper than {MAX_PARSED_NESTING} levels"
            )));
        }
        let view = ReplyView::parse(raw).map_err(|e| MigrateError::Redis(e.0))?;
        Ok(Reply::from_view(raw, view))
    }

    fn from_view(raw: &Bytes, view: ReplyView<'_>) -> Reply {
        match view {
            ReplyView::Null => Reply::Nil,
            ReplyView::Int(n) => Reply::Int(n),
            ReplyView::Boolean(b) => Reply::Int(i64::from(b)),
            ReplyView::Double(text) => Reply::Data(
                std::str::from_utf8(text)
                    .ok()
                    .and_then(|t| t.parse::<f64>().ok())
                    .map_or_else(|| raw.slice_ref(text), |d| Bytes::from(d.to_string())),
            ),
            ReplyView::Bulk(text)
            | ReplyView::Simple(text)
            | ReplyView::BigNumber(text)
            | ReplyView::Verbatim { text, .. } => Reply::Data(raw.slice_ref(text)),
            ReplyView::Error(text) => Reply::Error(String::from_utf8_lossy(text).into_owned()),
            // A map reads as its keys and values in turn.
            ReplyView::Aggregate(_, items) => {
                Reply::List(items.map(|item| Reply::from_view(raw, item)).collect())
            }
        }
    }

    /// The reply as bytes, when it is a string.
    pub fn data(&self) -> Option<&Bytes> {
        match self {
            Reply::Data(data) => Some(data),
            _ => None,
        }
    }

    /// The reply as an integer (an integer reply, or a string holding one).
    pub fn int(&self) -> Option<i64> {
        match self {
            Reply::Int(value) => Some(*value),
            Reply::Data(data) => std::str::from_utf8(data).ok()?.parse().ok(),
            _ => None,
        }
    }

    /// The reply's error text, when it is an error.
    pub fn error(&self) -> Option<&str> {
        match self {
            Reply::Error(text) => Some(text),
            _ => None,
        }
    }
}
