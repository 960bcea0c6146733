//! Inline commands: Redis's `sdssplitargs` rules.
