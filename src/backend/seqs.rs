//! The sequence numbers of a batch's requests, in the order their replies come back.
//!
//! A batch carries the requests one client read holds for one node, so their sequence
//! numbers rise and most batches span fewer than 64 of them: those are kept as the first and
//! a bit per offset from it. Every in-flight batch is queued (and moved) as part of
//! its connection's in-flight entry, once per request at one request per client read; a list
//! inline (72 bytes before) put that entry across two cache lines, and at a thousand clients
//! the queue's lines are out of the cache by the time it comes round.

/// See the module documentation. Empty by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seqs {
    /// Rising numbers within 64 of `first`: bit `i` of `mask` is `first + i`.
    Near { first: u64, mask: u64 },
    /// Any others, in order, from `next` on.
    Listed { seqs: Vec<u64>, next: usize },
}

impl Default for Seqs {
    fn default() -> Self {
        Seqs::Near { first: 0, mask: 0 }
    }
}

impl Seqs {
    /// The numbers of `seqs`, in order.
    pub(super) fn of(seqs: &[u64]) -> Seqs {
        let mut all = Seqs::default();
        for &seq in seqs {
            all.push(seq);
        }
        all
    }

    /// Adds `seq` after the others.
    #[inline]
    pub(super) fn push(&mut self, seq: u64) {
        if let Seqs::Near { first, mask } = self {
            if *mask == 0 {
                (*first, *mask) = (seq, 1);
                return;
            }
            // No bit at or above the offset: `seq` is above every number so far.
            let offset = seq.checked_sub(*first);
            if let Some(offset) = offset.filter(|&offset| offset < 64 && *mask >> offset == 0) {
                *mask |= 1 << offset;
                return;
            }
        }
        self.push_listed(seq);
    }

    /// `push` of a number too far from the first, or not above the others (rare: a retried
    /// request, a batch of many reads).
    #[cold]
    fn push_listed(&mut self, seq: u64) {
        match self {
            Seqs::Listed { seqs, .. } => seqs.push(seq),
            Seqs::Near { .. } => {
                let mut seqs = self.to_vec();
                seqs.push(seq);
                *self = Seqs::Listed { seqs, next: 0 };
            }
        }
    }

    /// Takes the first number left.
    #[inline]
    pub(super) fn pop_front(&mut self) -> Option<u64> {
        match self {
            Seqs::Near { mask: 0, .. } => None,
            Seqs::Near { first, mask } => {
                let seq = *first + u64::from(mask.trailing_zeros());
                // Clears the lowest bit set.
                *mask &= *mask - 1;
                Some(seq)
            }
            Seqs::Listed { seqs, next } => {
                let seq = seqs.get(*next).copied()?;
                *next += 1;
                Some(seq)
            }
        }
    }

    /// How many numbers are left.
    pub(super) fn len(&self) -> usize {
        match self {
            Seqs::Near { mask, .. } => mask.count_ones() as usize,
            Seqs::Listed { seqs, next } => seqs.len() - next,
        }
    }

    /// Whether none is left (without `len`'s bit count: a call per request and per reply).
    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        match self {
            Seqs::Near { mask, .. } => *mask == 0,
            Seqs::Listed { seqs, next } => *next >= seqs.len(),
        }
    }

    /// The numbers left, in order.
    fn to_vec(&self) -> Vec<u64> {
        let mut rest = self.clone();
        std::iter::from_fn(|| rest.pop_front()).collect()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::Seqs;

    #[test]
    fn a_batch_in_one_read_stays_inline() {
        let mut seqs = Seqs::of(&[7, 9, 70]);
        assert!(matches!(seqs, Seqs::Near { first: 7, .. }));
        assert_eq!(seqs.len(), 3);
        assert_eq!(seqs.pop_front(), Some(7));
        assert_eq!(seqs.to_vec(), [9, 70]);
        assert!(std::mem::size_of::<Seqs>() <= 32);
    }

    #[test]
    fn far_or_falling_numbers_are_listed_in_order() {
        let far = Seqs::of(&[1, 65]);
        assert!(matches!(far, Seqs::Listed { .. }));
        assert_eq!(far.to_vec(), [1, 65]);
        let falling = Seqs::of(&[5, 3, 4]);
        assert!(matches!(falling, Seqs::Listed { .. }));
        assert_eq!(falling.to_vec(), [5, 3, 4]);
        let repeated = Seqs::of(&[2, 2]);
        assert_eq!(repeated.to_vec(), [2, 2]);
    }

    proptest! {
        /// Whatever the numbers, they come back as pushed, interleaved pops included.
        #[test]
        fn numbers_come_back_in_the_order_pushed(
            steps in prop::collection::vec(prop_oneof![
                (0u64..200).prop_map(Some),
                Just(None),
            ], 0..80),
            base in prop_oneof![Just(0u64), Just(u64::MAX - 300)],
        ) {
            let mut seqs = Seqs::default();
            let mut model = std::collections::VecDeque::new();
            for step in steps {
                match step {
                    Some(offset) => {
                        seqs.push(base + offset);
                        model.push_back(base + offset);
                    }
                    None => prop_assert_eq!(seqs.pop_front(), model.pop_front()),
                }
                prop_assert_eq!(seqs.len(), model.len());
            }
            prop_assert_eq!(seqs.to_vec(), Vec::from(model));
        }
    }
}
