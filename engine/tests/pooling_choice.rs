//! `--pooling` (TEI's): a model pooled as the flag says instead of as its files do — a dense mode over the token
//! states, or SPLADE over a bare `*ForMaskedLM` checkpoint's MLM head — equals the sentence-transformers reference of
//! the model whose files say so; what it cannot change is refused, naming why.

mod common;

use std::path::Path;

use common::models::{copy_into, fixtures};
use engine::{Engine, EngineConfig, PoolingChoice};

/// Fixture `name` copied into `to`, weights included, without the files named in `leave_out`.
fn copy(name: &str, to: &Path, leave_out: &[&str]) {
    copy_into(name, to);
    for file in leave_out {
        let path = to.join(file);
        match path.is_dir() {
            true => std::fs::remove_dir_all(path),
            false => std::fs::remove_file(path),
        }
        .expect("leave out");
    }
}

fn load(dir: &Path, pooling: Option<PoolingChoice>) -> engine::Result<Engine> {
    let config = EngineConfig {
        threads: 2,
        pooling,
        ..Default::default()
    };
    Engine::load(dir, config)
}

/// The largest error of `got` against `name`'s reference embeddings, relative to each reference's length.
fn worst_error(name: &str, got: &[Vec<f32>]) -> f64 {
    let length = |v: &[f32]| v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
    fixtures(name)
        .iter()
        .zip(got)
        .map(|(f, g)| {
            let diff: Vec<f32> = f.embedding.iter().zip(g).map(|(a, b)| a - b).collect();
            length(&diff) / length(&f.embedding)
        })
        .fold(0.0, f64::max)
}

fn texts(name: &str) -> Vec<String> {
    fixtures(name).into_iter().map(|f| f.text).collect()
}

/// roberta_cls with its Pooling module rewritten to the mean pools by the mean (off the CLS reference), and with
/// `--pooling cls` by the first token again (on it, to float rounding).
#[test]
fn a_dense_pooling_choice_replaces_the_files_mode() {
    let tmp = tempfile::tempdir().expect("tmp");
    copy("roberta_cls", tmp.path(), &[]);
    let pooling = tmp.path().join("1_Pooling/config.json");
    let file = std::fs::read_to_string(&pooling).expect("read");
    std::fs::write(&pooling, file.replace("\"cls\"", "\"mean\"")).expect("write");
    let texts = texts("roberta_cls");
    let files = load(tmp.path(), None).expect("load");
    assert!(worst_error("roberta_cls", &files.embed(&texts).expect("embed")) > 0.1);
    let chosen = load(tmp.path(), Some(PoolingChoice::Cls)).expect("load");
    assert_eq!(chosen.info().pooling.modes, [engine::model::Pooling::Cls]);
    let error = worst_error("roberta_cls", &chosen.embed(&texts).expect("embed"));
    assert!(
        error <= 2e-5,
        "--pooling cls is off the CLS reference by {error:.2e}"
    );
}

/// bert_splade's checkpoint alone (no modules.json: a bare BertForMaskedLM) is a dense model pooled by the mean;
/// with `--pooling splade` it is the SparseEncoder the fixture's files make of it.
#[test]
fn splade_pooling_makes_a_bare_masked_lm_checkpoint_sparse() {
    let tmp = tempfile::tempdir().expect("tmp");
    let st_files = [
        "modules.json",
        "1_SpladePooling",
        "sentence_bert_config.json",
        "config_sentence_transformers.json",
    ];
    copy("bert_splade", tmp.path(), &st_files);
    let dense = load(tmp.path(), None).expect("load");
    assert!(!dense.info().sparse);
    assert_eq!(dense.info().dim, 64);
    let sparse = load(tmp.path(), Some(PoolingChoice::Splade)).expect("load");
    assert!(sparse.info().sparse);
    let got = sparse.embed(&texts("bert_splade")).expect("embed");
    let error = worst_error("bert_splade", &got);
    assert!(
        error <= 2e-5,
        "--pooling splade is off the reference by {error:.2e}"
    );
}

/// What a pooling choice cannot change is refused: a cross-encoder's head, a sparse model's SpladePooling, Dense
/// modules over several concatenated modes, SPLADE where Normalize follows pooling or over a checkpoint without
/// an MLM head, and a StaticEmbedding's own mean.
#[test]
fn a_pooling_choice_it_cannot_apply_is_refused_naming_why() {
    for (name, choice, says) in [
        ("bert_cross_encoder", PoolingChoice::Cls, "cross-encoder"),
        ("bert_splade", PoolingChoice::Mean, "sparse model"),
        (
            "distilbert_cls_mean_dense",
            PoolingChoice::Cls,
            "Dense modules",
        ),
        ("xlmr_mean", PoolingChoice::Splade, "without Normalize"),
        (
            "bert_max",
            PoolingChoice::Splade,
            "BertModel, which holds no MLM head",
        ),
        (
            "static_mean",
            PoolingChoice::Cls,
            "--pooling cls: a StaticEmbedding averages",
        ),
    ] {
        let Err(e) = load(&common::models::dir(name), Some(choice)) else {
            panic!("{name} with --pooling {choice:?}: loaded");
        };
        assert!(e.to_string().contains(says), "{name}: {e}");
    }
}
