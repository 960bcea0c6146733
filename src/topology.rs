//! topology (to be written).
