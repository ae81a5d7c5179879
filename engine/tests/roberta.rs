//! The RoBERTa family (BERT's network, positions numbered after the padding id) against sentence-transformers,
//! on the tiny random-weight models `scripts/make_roberta_fixtures.py` made: XLM-RoBERTa with an XLM-R-style
//! Unigram tokenizer, mean pooling and Normalize (multilingual-e5's shape), and RoBERTa with a byte-level BPE and
//! `RobertaProcessing`, CLS pooling, no Normalize. Their texts put `<pad>` inside sequences (it takes the padding
//! row and does not advance the positions after it), `<mask>` after whitespace it strips, and run past
//! max_seq_length; the default, in-house tokenizer must give sentence-transformers' ids.

use engine::Dtype;

mod common;
use common::models::{assert_batch_invariant_and_replay_bitwise, bf16_runs, check};

const MODELS: [&str; 2] = ["xlmr_mean", "roberta_cls"];

#[test]
fn f32_matches_sentence_transformers() {
    for name in MODELS {
        check(name, Dtype::F32, 0.9999);
    }
}

#[test]
fn bf16_reaches_0_999() {
    if bf16_runs("xlmr_mean") {
        for name in MODELS {
            check(name, Dtype::Bf16, 0.999);
        }
    }
}

#[test]
fn batch_invariance_and_replay_are_bitwise() {
    for name in MODELS {
        assert_batch_invariant_and_replay_bitwise(name);
    }
}
