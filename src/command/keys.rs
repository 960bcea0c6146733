//! Key positions from Redis 7 key specs.

/// What a command does with a key (from the key spec flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeyFlags(pub u16);

impl KeyFlags {
    pub const RO: u16 = 1 << 0;
    pub const RW: u16 = 1 << 1;
    pub const OW: u16 = 1 << 2;
    pub const RM: u16 = 1 << 3;
    pub const ACCESS: u16 = 1 << 4;
    pub const UPDATE: u16 = 1 << 5;
    pub const INSERT: u16 = 1 << 6;
    pub const DELETE: u16 = 1 << 7;
    pub const CHANNEL: u16 = 1 << 8;

    pub fn has(self, flag: u16) -> bool {
        self.0 & flag != 0
    }

    /// Whether the command may create, change or delete the key.
    pub fn writes(self) -> bool {
        self.0 & (Self::RW | Self::OW | Self::RM | Self::INSERT | Self::DELETE | Self::UPDATE) != 0
    }
}

/// One key of a request: its argument index and what the command does with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyPos {
    pub index: usize,
    pub flags: KeyFlags,
}
