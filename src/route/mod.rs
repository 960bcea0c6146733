//! Where a key lives: hash slots, the slot map, redirect answers. Pure, no IO.

pub mod draw;
mod redirect;
mod slot;
mod slot_map;

pub use redirect::Redirect;
pub use slot::{key_slot, tag_in_slot, SLOT_COUNT};
pub use slot_map::{NodeAddr, NodePort, SlotMap};
