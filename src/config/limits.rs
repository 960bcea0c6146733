//! The `limits` section: what one client may send and owe (Redis's defaults), and the
//! output-buffer soft limit's form.

use serde::Deserialize;

use crate::protocol::Limits;

/// Limits on client input (Redis's defaults).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// As Redis's `proto-max-bulk-len`.
    pub proto_max_bulk_len: usize,
    /// Most elements in one request.
    pub max_multibulk_len: usize,
    /// Longest inline command.
    pub max_inline_len: usize,
    /// Most commands of one client in flight at once (pipelining depth).
    pub max_pipeline: usize,
    /// What one client may owe (replies not yet read plus the estimate of those in flight)
    /// and still have more requests forwarded; past it the proxy stops reading that client
    /// until it reads (0: no limit but `max_pipeline`). A client that owes nothing may always
    /// send one request.
    pub max_owed_bytes: usize,
    /// The kernel send buffer of each client socket, set at connect (0: the kernel's own,
    /// which grows to megabytes). Bytes the kernel holds for a client are outside the
    /// proxy's accounting; kept small, a client that stops reading owes what it has not
    /// read to the proxy, where flow control sees it and holds the client back.
    pub client_send_buffer_bytes: usize,
}

/// See [`Config::client_output_buffer_soft_limit`](super::Config::client_output_buffer_soft_limit).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct SoftOutputLimit {
    pub bytes: usize,
    pub seconds: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let limits = Limits::default();
        LimitsConfig {
            proto_max_bulk_len: limits.max_bulk_len,
            max_multibulk_len: limits.max_multibulk_len,
            max_inline_len: limits.max_inline_len,
            max_pipeline: 1024,
            max_owed_bytes: 1024 * 1024,
            client_send_buffer_bytes: 256 * 1024,
        }
    }
}

impl LimitsConfig {
    /// The codec's view of these limits.
    pub fn protocol(&self) -> Limits {
        Limits {
            max_bulk_len: self.proto_max_bulk_len,
            max_multibulk_len: self.max_multibulk_len,
            max_inline_len: self.max_inline_len,
        }
    }
}
