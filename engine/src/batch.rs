//! The ragged batch: sequences concatenated with no padding, delimited by cumulative offsets.

use crate::error::{Error, Result};

/// Token ids of several sequences, concatenated, with `offsets[i]..offsets[i + 1]` the tokens of sequence `i`.
///
/// No padding: a batch of a 3-token and a 5-token sequence holds 8 ids.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    ids: Vec<u32>,
    offsets: Vec<usize>,
    max_len: usize,
}

impl Batch {
    pub fn new() -> Self {
        Batch {
            ids: Vec::new(),
            offsets: vec![0],
            max_len: 0,
        }
    }

    pub fn from_sequences<'a>(seqs: impl IntoIterator<Item = &'a [u32]>) -> Self {
        let mut b = Batch::new();
        for s in seqs {
            b.push(s);
        }
        b
    }

    /// Appends one sequence.
    pub fn push(&mut self, seq: &[u32]) {
        self.ids.extend_from_slice(seq);
        self.offsets.push(self.ids.len());
        self.max_len = self.max_len.max(seq.len());
    }

    /// Number of sequences.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Total tokens over all sequences.
    pub fn tokens(&self) -> usize {
        self.ids.len()
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Cumulative offsets, `len() + 1` of them, starting at 0.
    pub fn offsets(&self) -> &[usize] {
        &self.offsets
    }

    pub fn seq(&self, i: usize) -> &[u32] {
        &self.ids[self.offsets[i]..self.offsets[i + 1]]
    }

    pub fn seqs(&self) -> impl Iterator<Item = &[u32]> + '_ {
        self.offsets.windows(2).map(|w| &self.ids[w[0]..w[1]])
    }

    /// Checks the batch against a model's limits, so a bad id is refused before it reaches a kernel.
    pub fn validate(&self, vocab_size: usize, max_positions: usize) -> Result<()> {
        if let Some(i) = self.seqs().position(|s| s.is_empty()) {
            return Err(Error::Batch(format!(
                "sequence {i} is empty (a tokenized input has at least its special tokens)"
            )));
        }
        if self.max_len > max_positions {
            return Err(Error::Batch(format!(
                "a sequence has {} tokens, more than the model's {max_positions} positions",
                self.max_len
            )));
        }
        if let Some(&id) = self.ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(Error::Batch(format!(
                "token id {id} is outside the vocabulary of {vocab_size}"
            )));
        }
        Ok(())
    }
}
