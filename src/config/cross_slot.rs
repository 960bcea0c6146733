//! `cross_slot`: whether the proxy computes cross-slot reads and stores, and carries out
//! moves and multi-key blocking pops, itself (see `crossslot`) or refuses them with `-CROSSSLOT` as Redis Cluster
//! does, and the sizes it computes in memory at most.

use serde::Deserialize;

/// Emulate or refuse one class of cross-slot commands.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Emulation {
    /// Computed in the proxy from each key's master.
    #[default]
    Emulate,
    /// `-CROSSSLOT`, naming the setting that would allow it.
    Refuse,
}

/// The `cross_slot` section.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct CrossSlotConfig {
    /// SUNION, SINTER, SDIFF, SINTERCARD, ZUNION, ZINTER, ZDIFF, ZINTERCARD, LCS, PFCOUNT,
    /// and XREAD without BLOCK.
    pub reads: Emulation,
    /// The STORE forms, BITOP, PFMERGE, COPY.
    pub stores: Emulation,
    /// RENAME, RENAMENX, SMOVE, LMOVE, RPOPLPUSH, BLMOVE, BRPOPLPUSH: copied, then removed
    /// from the source.
    pub moves: Emulation,
    /// BLPOP, BRPOP, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP: the first key in order with data
    /// popped, else a wait that takes nothing on every key (see `crossslot::blocking`);
    /// and LMPOP, ZMPOP, the same probe and pop without the wait; and XREAD with BLOCK
    /// (see `crossslot::streams`).
    /// Emulated by default, as the other classes: an app written for one Redis waits on
    /// its queues instead of getting an error it cannot handle; what it costs is a
    /// connection per key while the client waits, and a poll for sorted sets.
    pub blocking: Emulation,
    /// Members read over all the keys of one set or sorted-set command.
    pub max_members: u64,
    /// Bytes read over all the keys of one LCS, BITOP, PFCOUNT or PFMERGE, and the
    /// serialized value one RENAME, RENAMENX or COPY moves.
    pub max_bytes: u64,
    /// Cells of one LCS's table.
    pub max_lcs_cells: u64,
}

impl Default for CrossSlotConfig {
    fn default() -> Self {
        let limits = crate::crossslot::Limits::default();
        CrossSlotConfig {
            reads: Emulation::Emulate,
            stores: Emulation::Emulate,
            moves: Emulation::Emulate,
            blocking: Emulation::Emulate,
            max_members: limits.max_members,
            max_bytes: limits.max_bytes,
            max_lcs_cells: limits.max_lcs_cells,
        }
    }
}

impl CrossSlotConfig {
    /// The limits `crossslot::compute` applies.
    pub fn limits(&self) -> crate::crossslot::Limits {
        crate::crossslot::Limits {
            max_members: self.max_members,
            max_bytes: self.max_bytes,
            max_lcs_cells: self.max_lcs_cells,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn defaults_emulate_every_class_with_crossslot_limits() {
        let config = Config::default().cross_slot;
        assert_eq!(config.reads, Emulation::Emulate);
        assert_eq!(config.stores, Emulation::Emulate);
        assert_eq!(config.moves, Emulation::Emulate);
        assert_eq!(config.blocking, Emulation::Emulate);
        assert_eq!(config.limits(), crate::crossslot::Limits::default());
    }

    #[test]
    fn classes_and_limits_are_read_from_yaml() {
        let config = Config::from_yaml("cross_slot: {reads: refuse, max_members: 7}\n").unwrap();
        assert_eq!(config.cross_slot.reads, Emulation::Refuse);
        assert_eq!(config.cross_slot.stores, Emulation::Emulate);
        assert_eq!(config.cross_slot.limits().max_members, 7);
        assert!(Config::from_yaml("cross_slot: {reads: maybe}\n").is_err());
        let config = Config::from_yaml("cross_slot: {moves: refuse}\n").unwrap();
        assert_eq!(config.cross_slot.moves, Emulation::Refuse);
        assert_eq!(config.cross_slot.reads, Emulation::Emulate);
        let config = Config::from_yaml("cross_slot: {blocking: refuse}\n").unwrap();
        assert_eq!(config.cross_slot.blocking, Emulation::Refuse);
        assert_eq!(config.cross_slot.moves, Emulation::Emulate);
        assert!(Config::from_yaml("cross_slot: {waits: emulate}\n").is_err());
    }
}
