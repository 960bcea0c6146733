//! Classifying a backend error reply: redirect, retryable, or final.

/// What an error reply from a cluster node asks the proxy to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Redirect {}
