//! The key layout rules engine: legacy key names <-> cluster:v1 key names (in progress).

mod automaton;
pub mod encoding;
pub mod glob;
