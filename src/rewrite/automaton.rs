//! Small byte automata for questions about patterns, asked once per rule file or listing:
//! can two patterns match a common key, is every key of a glob covered by some rules.
//!
//! A pattern becomes a chain of atoms: a `Step` consumes one byte from a set, a `Loop`
//! consumes any number of bytes from a set. Legacy rule patterns (`<x>` = a loop over
//! non-`:` bytes, `<x...>` = a loop over all bytes) and Redis globs (`?`, `[...]`, `*`) both
//! fit. Searches run on sets of states (subset construction) over one representative byte
//! per class of bytes that no atom tells apart, so they are exact, and they stop after
//! [`MAX_EXPLORED`] product states with an "unknown" answer instead of running long.

use std::collections::{HashMap, VecDeque};

/// Product states a search visits before it gives up with [`Search::Unknown`].
pub(crate) const MAX_EXPLORED: usize = 20_000;

/// A set of bytes, one bit per byte value.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub(crate) struct ByteSet([u64; 4]);

impl ByteSet {
    pub(crate) fn single(byte: u8) -> Self {
        let mut set = Self::default();
        set.insert(byte);
        set
    }

    pub(crate) fn all() -> Self {
        Self([u64::MAX; 4])
    }

    pub(crate) fn all_except(byte: u8) -> Self {
        let mut set = Self::all();
        set.0[usize::from(byte >> 6)] &= !(1u64 << (byte & 63));
        set
    }

    pub(crate) fn insert(&mut self, byte: u8) {
        self.0[usize::from(byte >> 6)] |= 1u64 << (byte & 63);
    }

    pub(crate) fn complement(self) -> Self {
        Self(self.0.map(|word| !word))
    }

    pub(crate) fn contains(&self, byte: u8) -> bool {
        self.0[usize::from(byte >> 6)] & (1u64 << (byte & 63)) != 0
    }
}

/// One link of a pattern chain.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Atom {
    /// Exactly one byte from the set.
    Step(ByteSet),
    /// Zero or more bytes from the set.
    Loop(ByteSet),
}

/// A chain of atoms; state `i` means "the first `i` atoms are matched".
#[derive(Clone, Debug, Default)]
pub(crate) struct Nfa {
    atoms: Vec<Atom>,
}

type StateSet = Vec<u64>;

impl Nfa {
    pub(crate) fn push(&mut self, atom: Atom) {
        self.atoms.push(atom);
    }

    pub(crate) fn push_literal(&mut self, literal: &[u8]) {
        self.atoms.extend(
            literal
                .iter()
                .map(|&byte| Atom::Step(ByteSet::single(byte))),
        );
    }

    fn state_count(&self) -> usize {
        self.atoms.len() + 1
    }

    fn start(&self) -> StateSet {
        let mut set = vec![0u64; self.state_count().div_ceil(64)];
        set[0] = 1;
        self.close(&mut set);
        set
    }

    /// Adds the states reachable by skipping loops; loops only skip forward, so one
    /// ascending pass suffices.
    fn close(&self, set: &mut StateSet) {
        for (index, atom) in self.atoms.iter().enumerate() {
            if matches!(atom, Atom::Loop(_)) && has(set, index) {
                add(set, index + 1);
            }
        }
    }

    fn step(&self, set: &StateSet, byte: u8) -> StateSet {
        let mut next = vec![0u64; set.len()];
        for (index, atom) in self.atoms.iter().enumerate() {
            if !has(set, index) {
                continue;
            }
            match atom {
                Atom::Step(bytes) if bytes.contains(byte) => add(&mut next, index + 1),
                Atom::Loop(bytes) if bytes.contains(byte) => add(&mut next, index),
                _ => {}
            }
        }
        self.close(&mut next);
        next
    }

    fn accepts(&self, set: &StateSet) -> bool {
        has(set, self.atoms.len())
    }

    fn sets(&self) -> impl Iterator<Item = ByteSet> + '_ {
        self.atoms.iter().map(|atom| match atom {
            Atom::Step(bytes) | Atom::Loop(bytes) => *bytes,
        })
    }
}

fn has(set: &StateSet, state: usize) -> bool {
    set.get(state / 64)
        .is_some_and(|word| word & (1u64 << (state % 64)) != 0)
}

fn add(set: &mut StateSet, state: usize) {
    if let Some(word) = set.get_mut(state / 64) {
        *word |= 1u64 << (state % 64);
    }
}

fn is_empty(set: &StateSet) -> bool {
    set.iter().all(|&word| word == 0)
}

/// What a search is looking for.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Goal {
    /// A string every automaton accepts.
    AllAccept,
    /// A string the first automaton accepts and none of the others does.
    FirstOnly,
}

/// The answer of [`search`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Search {
    /// A shortest string that meets the goal.
    Found(Vec<u8>),
    /// No string meets the goal.
    None,
    /// The search hit [`MAX_EXPLORED`].
    Unknown,
}

/// One byte for every class of bytes that the atoms of `automata` cannot tell apart.
fn representative_bytes(automata: &[&Nfa]) -> Vec<u8> {
    let mut distinct: Vec<ByteSet> = Vec::new();
    for set in automata.iter().flat_map(|nfa| nfa.sets()) {
        if !distinct.contains(&set) {
            distinct.push(set);
        }
    }
    let mut seen: HashMap<Vec<u64>, ()> = HashMap::new();
    let mut representatives = Vec::new();
    for byte in 0..=u8::MAX {
        let mut signature = vec![0u64; distinct.len().div_ceil(64)];
        for (index, set) in distinct.iter().enumerate() {
            if set.contains(byte) {
                signature[index / 64] |= 1u64 << (index % 64);
            }
        }
        if seen.insert(signature, ()).is_none() {
            representatives.push(byte);
        }
    }
    representatives
}

/// Breadth-first search of the product of `automata` for a string meeting `goal`.
pub(crate) fn search(automata: &[&Nfa], goal: Goal) -> Search {
    let alphabet = representative_bytes(automata);
    let start: Vec<StateSet> = automata.iter().map(|nfa| nfa.start()).collect();
    let mut visited: HashMap<Vec<StateSet>, usize> = HashMap::new();
    // (state, parent index, byte that led here)
    let mut nodes: Vec<(Vec<StateSet>, usize, u8)> = Vec::new();
    let mut queue = VecDeque::new();
    visited.insert(start.clone(), 0);
    nodes.push((start, 0, 0));
    queue.push_back(0usize);
    while let Some(node) = queue.pop_front() {
        let sets = nodes[node].0.clone();
        let accepted: Vec<bool> = automata
            .iter()
            .zip(&sets)
            .map(|(nfa, set)| nfa.accepts(set))
            .collect();
        let met = match goal {
            Goal::AllAccept => accepted.iter().all(|&a| a),
            Goal::FirstOnly => accepted[0] && !accepted[1..].iter().any(|&a| a),
        };
        if met {
            return Search::Found(witness(&nodes, node));
        }
        for &byte in &alphabet {
            let next: Vec<StateSet> = automata
                .iter()
                .zip(&sets)
                .map(|(nfa, set)| nfa.step(set, byte))
                .collect();
            let dead = match goal {
                Goal::AllAccept => next.iter().any(is_empty),
                Goal::FirstOnly => is_empty(&next[0]),
            };
            if dead || visited.contains_key(&next) {
                continue;
            }
            if nodes.len() >= MAX_EXPLORED {
                return Search::Unknown;
            }
            visited.insert(next.clone(), nodes.len());
            nodes.push((next, node, byte));
            queue.push_back(nodes.len() - 1);
        }
    }
    Search::None
}

fn witness(nodes: &[(Vec<StateSet>, usize, u8)], mut node: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    while node != 0 {
        bytes.push(nodes[node].2);
        node = nodes[node].1;
    }
    bytes.reverse();
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(parts: &[&str]) -> Nfa {
        let mut nfa = Nfa::default();
        for part in parts {
            match *part {
                "<one>" => nfa.push(Atom::Loop(ByteSet::all_except(b':'))),
                "<many>" => nfa.push(Atom::Loop(ByteSet::all())),
                literal => nfa.push_literal(literal.as_bytes()),
            }
        }
        nfa
    }

    #[test]
    fn overlapping_patterns_yield_a_common_string() {
        let leader = chain(&["p:co:leader:", "<many>"]);
        let term = chain(&["p:co:leader:", "<many>", ":term"]);
        match search(&[&leader, &term], Goal::AllAccept) {
            Search::Found(example) => assert_eq!(example, b"p:co:leader::term"),
            other => panic!("expected an example, got {other:?}"),
        }
    }

    #[test]
    fn disjoint_patterns_have_no_common_string() {
        let chat = chain(&["p:chat:", "<many>"]);
        let contact = chain(&["p:contact:", "<many>"]);
        assert_eq!(search(&[&chat, &contact], Goal::AllAccept), Search::None);
        let one = chain(&["p:x:", "<one>"]);
        let two = chain(&["p:x:", "<one>", ":", "<one>"]);
        assert_eq!(search(&[&one, &two], Goal::AllAccept), Search::None);
    }

    #[test]
    fn inclusion_in_a_union() {
        let narrow = chain(&["p:chat:", "<many>"]);
        let broad = chain(&["p:", "<many>"]);
        assert_eq!(search(&[&narrow, &broad], Goal::FirstOnly), Search::None);
        assert!(matches!(
            search(&[&broad, &narrow], Goal::FirstOnly),
            Search::Found(_)
        ));
    }
}
