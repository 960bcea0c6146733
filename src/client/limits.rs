//! The limits of one client that a reload changes for connected clients too, as CONFIG SET
//! does on Redis, and the watch over Redis's soft output buffer limit.

use std::time::Duration;

use tokio::time::Instant;

/// What a session reads from the configuration at connect and after each reload.
#[derive(Clone, Copy)]
pub struct ClientLimits {
    pub max_pipeline: usize,
    /// What the client may owe and still send requests (`limits.max_owed_bytes`).
    pub max_owed: usize,
    pub idle_timeout: Option<Duration>,
    /// The hard output limit (`client_output_buffer_limit_bytes`, 0: none).
    pub output_limit: usize,
    pub soft_limit: Option<SoftLimit>,
}

impl ClientLimits {
    pub fn of(config: &crate::config::Config) -> ClientLimits {
        let soft = &config.client_output_buffer_soft_limit;
        ClientLimits {
            max_pipeline: config.limits.max_pipeline,
            max_owed: config.limits.max_owed_bytes,
            idle_timeout: (config.timeout > 0).then(|| Duration::from_secs(config.timeout)),
            output_limit: config.client_output_buffer_limit_bytes,
            soft_limit: (soft.bytes > 0).then(|| SoftLimit {
                bytes: soft.bytes,
                seconds: Duration::from_secs(soft.seconds),
            }),
        }
    }
}

/// Redis's soft output buffer limit: replies held over `bytes` for `seconds` close the client.
#[derive(Clone, Copy, Debug)]
pub struct SoftLimit {
    pub bytes: usize,
    pub seconds: Duration,
}

/// Since when a client's held replies are over its soft limit.
#[derive(Default)]
pub struct SoftWatch {
    since: Option<Instant>,
}

impl SoftWatch {
    /// Whether `held` bytes at `now` have been over `limit` for its seconds.
    pub fn exceeded(&mut self, limit: SoftLimit, held: usize, now: Instant) -> bool {
        if held <= limit.bytes {
            self.since = None;
            return false;
        }
        let since = *self.since.get_or_insert(now);
        now.saturating_duration_since(since) >= limit.seconds
    }

    /// When the client is closed if it stays over `limit` (a timer for a client that sends
    /// and reads nothing meanwhile).
    pub fn deadline(&self, limit: Option<SoftLimit>) -> Option<Instant> {
        Some(self.since? + limit?.seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn over_the_soft_limit_for_its_seconds_closes_and_dropping_below_resets() {
        let limit = SoftLimit {
            bytes: 100,
            seconds: Duration::from_secs(2),
        };
        let start = Instant::now();
        let at = |secs: u64| start + Duration::from_secs(secs);
        let mut watch = SoftWatch::default();
        assert!(!watch.exceeded(limit, 50, at(0)));
        assert_eq!(watch.deadline(Some(limit)), None);
        assert!(!watch.exceeded(limit, 150, at(0)));
        assert_eq!(watch.deadline(Some(limit)), Some(at(2)));
        assert!(!watch.exceeded(limit, 150, at(1)));
        // Below it for a moment: the count starts again.
        assert!(!watch.exceeded(limit, 10, at(1)));
        assert!(!watch.exceeded(limit, 150, at(2)));
        assert_eq!(watch.deadline(Some(limit)), Some(at(4)));
        assert!(!watch.exceeded(limit, 150, at(3)));
        assert!(watch.exceeded(limit, 150, at(4)));
        assert_eq!(watch.deadline(None), None);
    }
}
