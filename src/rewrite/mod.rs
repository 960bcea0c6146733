//! rewrite (to be written).
