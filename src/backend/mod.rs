//! backend (to be written).
