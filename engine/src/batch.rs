//! The ragged batch: sequences concatenated with no padding, delimited by cumulative offsets.

use crate::error::{Error, Result};

/// What a sequence's answer is: one pooled embedding (the model's Pooling module), the last hidden state of every
/// token (TEI's `/embed_all`), unpooled and unnormalized, or a multi-vector model's vector per token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Readout {
    /// Pooled over the tokens from the `skip`-th on: a prompt's tokens, left out where the model's Pooling module
    /// excludes the prompt (sentence-transformers' `include_prompt: false`; its special token at the start with
    /// them). A sequence no longer than `skip` pools its last token.
    Pooled {
        skip: u32,
    },
    Tokens,
    /// A multi-vector (late-interaction, ColBERT) model's answer: every token through the model's per-token
    /// modules (Dense, Normalize). Where `expansion` names a token, the sequence's trailing run of it (ColBERT's
    /// query expansion, sentence-transformers' `attend: false`) is attended to by no token: those positions read
    /// the tokens before them and are read by none ([`Batch::keys`]).
    Vectors {
        expansion: Option<u32>,
    },
}

impl Readout {
    /// Pooled over every token.
    pub const POOLED: Readout = Readout::Pooled { skip: 0 };
}

impl Default for Readout {
    fn default() -> Self {
        Readout::POOLED
    }
}

/// Token ids of several sequences, concatenated, with `offsets[i]..offsets[i + 1]` the tokens of sequence `i`.
///
/// No padding: a batch of a 3-token and a 5-token sequence holds 8 ids. Each sequence has its [`Readout`]: its
/// output rows are `out_offsets[i]..out_offsets[i + 1]` (one when pooled, one per token otherwise). A sequence
/// that is a pair of texts (a cross-encoder's query and passage) may say where its tokens of type 1 start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    ids: Vec<u32>,
    offsets: Vec<usize>,
    readouts: Vec<Readout>,
    type1_from: Vec<Option<u32>>,
    /// How many leading tokens of each sequence are attended to ([`Batch::keys`]).
    keys: Vec<usize>,
    out_offsets: Vec<usize>,
    max_len: usize,
}

impl Default for Batch {
    fn default() -> Self {
        Batch::new()
    }
}

impl Batch {
    pub fn new() -> Self {
        Batch {
            ids: Vec::new(),
            offsets: vec![0],
            readouts: Vec::new(),
            type1_from: Vec::new(),
            keys: Vec::new(),
            out_offsets: vec![0],
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

    /// Appends one sequence, to be pooled.
    pub fn push(&mut self, seq: &[u32]) {
        self.push_as(seq, Readout::POOLED);
    }

    /// Appends one sequence with the answer it wants.
    pub fn push_as(&mut self, seq: &[u32], readout: Readout) {
        self.push_pair(seq, readout, None);
    }

    /// Appends one sequence whose tokens from the `type1_from`-th on (if any) are of token type 1: the second
    /// text of a pair, as BERT's pair template types it (`[CLS] A [SEP]` type 0, `B [SEP]` type 1).
    pub fn push_pair(&mut self, seq: &[u32], readout: Readout, type1_from: Option<u32>) {
        self.type1_from.push(type1_from);
        self.ids.extend_from_slice(seq);
        self.offsets.push(self.ids.len());
        self.max_len = self.max_len.max(seq.len());
        let rows = match readout {
            Readout::Pooled { .. } => 1,
            Readout::Tokens | Readout::Vectors { .. } => seq.len(),
        };
        self.keys.push(match readout {
            Readout::Vectors {
                expansion: Some(id),
            } => Batch::attended(seq, id),
            _ => seq.len(),
        });
        self.readouts.push(readout);
        self.out_offsets.push(self.out_rows() + rows);
    }

    /// How many leading tokens of `seq` are attended to where its trailing run of `expansion` is not: all but that
    /// run, the first token always.
    pub fn attended(seq: &[u32], expansion: u32) -> usize {
        seq.len()
            - seq
                .iter()
                .skip(1)
                .rev()
                .take_while(|&&t| t == expansion)
                .count()
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

    /// Rows of output the batch writes: one per pooled sequence, one per token of the others.
    pub fn out_rows(&self) -> usize {
        self.out_offsets.last().copied().unwrap_or(0)
    }

    /// Cumulative output rows, `len() + 1` of them, starting at 0.
    pub fn out_offsets(&self) -> &[usize] {
        &self.out_offsets
    }

    pub fn readout(&self, i: usize) -> Readout {
        self.readouts[i]
    }

    /// How many leading tokens of each sequence its tokens attend to: all of them, but for a query's expansion
    /// that is not attended ([`Readout::Vectors`]). At least one for a sequence that is not empty.
    pub fn keys(&self) -> &[usize] {
        &self.keys
    }

    /// Where sequence `i`'s tokens of type 1 start; `None` where all are of type 0. A model without token types
    /// reads every token as type 0, as the tokenizers of such models give no `token_type_ids`.
    pub fn type1_from(&self, i: usize) -> Option<u32> {
        self.type1_from[i]
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
                "sequence {i} is empty: no token to embed"
            )));
        }
        if let Some(i) = (0..self.len())
            .find(|&i| self.type1_from[i].is_some_and(|from| from as usize > self.seq(i).len()))
        {
            return Err(Error::Batch(format!(
                "sequence {i}'s tokens of type 1 start past its end"
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
