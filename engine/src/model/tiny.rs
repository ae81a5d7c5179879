//! A tiny BERT with deterministic random weights, written to a directory in the real on-disk format (config.json,
//! model.safetensors, tokenizer.json, sentence-transformers modules), for tests and examples that must not
//! download anything. Its outputs mean nothing; its shapes and file formats are real.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::json;

use crate::error::{Error, Result};

/// Shape of the tiny model.
#[derive(Clone, Copy, Debug)]
pub struct TinySpec {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub intermediate: usize,
    pub max_positions: usize,
    /// sentence-transformers' max_seq_length.
    pub max_seq_length: usize,
    pub seed: u64,
}

impl Default for TinySpec {
    fn default() -> Self {
        TinySpec {
            hidden: 32,
            layers: 2,
            heads: 4,
            intermediate: 64,
            max_positions: 64,
            max_seq_length: 48,
            seed: 7,
        }
    }
}

/// Vocabulary of the tiny tokenizer: specials, lowercase letters, their `##` continuations, and a few words.
fn vocab() -> Vec<String> {
    let mut v: Vec<String> = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
        .map(String::from)
        .to_vec();
    v.extend(".,!?'-".chars().map(String::from));
    v.extend(('a'..='z').map(String::from));
    v.extend(('a'..='z').map(|c| format!("##{c}")));
    v.extend(
        [
            "the", "a", "of", "and", "to", "in", "is", "search", "query", "embed", "##ing", "##s",
            "##ed",
        ]
        .map(String::from),
    );
    v
}

/// SplitMix64: a few lines of deterministic randomness, so the weights do not depend on a crate's RNG stream.
pub(super) struct SplitMix(pub u64);
impl SplitMix {
    /// Uniform in [-1, 1).
    pub fn next_f32(&mut self) -> f32 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// Writes the tiny model into `dir` (created if needed).
pub fn write_tiny_bert(dir: &Path, spec: TinySpec) -> Result<()> {
    std::fs::create_dir_all(dir.join("1_Pooling")).map_err(Error::io(dir))?;
    let vocab = vocab();
    let (h, f) = (spec.hidden, spec.intermediate);
    let mut rng = SplitMix(spec.seed);
    let mut tensors: BTreeMap<String, (Vec<usize>, Vec<f32>)> = BTreeMap::new();
    let mut add = |name: String, shape: Vec<usize>, scale: f32, offset: f32| {
        let n = shape.iter().product();
        let data = (0..n).map(|_| offset + scale * rng.next_f32()).collect();
        tensors.insert(name, (shape, data));
    };
    add(
        "embeddings.word_embeddings.weight".into(),
        vec![vocab.len(), h],
        0.5,
        0.0,
    );
    add(
        "embeddings.position_embeddings.weight".into(),
        vec![spec.max_positions, h],
        0.2,
        0.0,
    );
    add(
        "embeddings.token_type_embeddings.weight".into(),
        vec![2, h],
        0.1,
        0.0,
    );
    add("embeddings.LayerNorm.weight".into(), vec![h], 0.1, 1.0);
    add("embeddings.LayerNorm.bias".into(), vec![h], 0.1, 0.0);
    for l in 0..spec.layers {
        let p = format!("encoder.layer.{l}");
        for (name, out, inp) in [
            ("attention.self.query", h, h),
            ("attention.self.key", h, h),
            ("attention.self.value", h, h),
            ("attention.output.dense", h, h),
            ("intermediate.dense", f, h),
            ("output.dense", h, f),
        ] {
            let scale = 1.0 / (inp as f32).sqrt();
            add(format!("{p}.{name}.weight"), vec![out, inp], scale, 0.0);
            add(format!("{p}.{name}.bias"), vec![out], 0.05, 0.0);
        }
        for name in ["attention.output.LayerNorm", "output.LayerNorm"] {
            add(format!("{p}.{name}.weight"), vec![h], 0.1, 1.0);
            add(format!("{p}.{name}.bias"), vec![h], 0.1, 0.0);
        }
    }
    let tensors = tensors
        .into_iter()
        .map(|(name, (shape, data))| {
            let bytes = data.iter().flat_map(|v| v.to_le_bytes()).collect();
            (name, shape, bytes)
        })
        .collect();
    write_safetensors(
        &dir.join("model.safetensors"),
        safetensors::Dtype::F32,
        tensors,
    )?;

    let config = json!({
        "architectures": ["BertModel"], "model_type": "bert", "vocab_size": vocab.len(), "hidden_size": h,
        "num_hidden_layers": spec.layers, "num_attention_heads": spec.heads, "intermediate_size": f,
        "max_position_embeddings": spec.max_positions, "type_vocab_size": 2, "layer_norm_eps": 1e-12,
        "hidden_act": "gelu", "position_embedding_type": "absolute"
    });
    write_json(&dir.join("config.json"), &config)?;
    write_json(
        &dir.join("modules.json"),
        &json!([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
        ]),
    )?;
    write_json(
        &dir.join("1_Pooling/config.json"),
        &json!({"word_embedding_dimension": h, "pooling_mode_cls_token": false, "pooling_mode_mean_tokens": true}),
    )?;
    write_json(
        &dir.join("sentence_bert_config.json"),
        &json!({"max_seq_length": spec.max_seq_length, "do_lower_case": false}),
    )?;
    write_json(
        &dir.join("config_sentence_transformers.json"),
        &json!({"prompts": {"query": "query: ", "passage": "passage: "}}),
    )?;
    write_json(&dir.join("tokenizer.json"), &tokenizer_json(&vocab))?;
    Ok(())
}

/// A BERT WordPiece `tokenizer.json` in the layout the `tokenizers` crate writes.
fn tokenizer_json(vocab: &[String]) -> serde_json::Value {
    let ids: serde_json::Map<String, serde_json::Value> = vocab
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), json!(i)))
        .collect();
    let id = |t: &str| vocab.iter().position(|v| v == t).unwrap_or(0);
    let special = |t: &str| {
        json!({"id": id(t), "content": t, "single_word": false, "lstrip": false,
                                   "rstrip": false, "normalized": false, "special": true})
    };
    json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [special("[PAD]"), special("[UNK]"), special("[CLS]"), special("[SEP]"), special("[MASK]")],
        "normalizer": {"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true,
                       "strip_accents": null, "lowercase": true},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                       {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}},
                     {"SpecialToken": {"id": "[SEP]", "type_id": 1}}],
            "special_tokens": {
                "[CLS]": {"id": "[CLS]", "ids": [id("[CLS]")], "tokens": ["[CLS]"]},
                "[SEP]": {"id": "[SEP]", "ids": [id("[SEP]")], "tokens": ["[SEP]"]}
            }
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": ids}
    })
}

/// Writes named tensors of one dtype (little-endian bytes) as a safetensors file.
pub(super) fn write_safetensors(
    path: &Path,
    dtype: safetensors::Dtype,
    tensors: Vec<(String, Vec<usize>, Vec<u8>)>,
) -> Result<()> {
    let views = tensors
        .iter()
        .map(|(name, shape, data)| {
            let view = safetensors::tensor::TensorView::new(dtype, shape.clone(), data)
                .map_err(|e| Error::model(path, format!("tensor {name}: {e}")))?;
            Ok((name.clone(), view))
        })
        .collect::<Result<Vec<_>>>()?;
    safetensors::serialize_to_file(views, None, path).map_err(|e| Error::model(path, e.to_string()))
}

pub(super) fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(Error::io(path))
}

pub(super) fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|source| Error::Json {
        path: path.to_owned(),
        source,
    })?;
    write(path, text.as_bytes())
}
