//! Seeded random-weight models at the sizes people serve, so benchmarks and the harness run a production shape
//! without a download: `--model synthetic:qwen3-0.6b` writes the model once into the cache, in the real on-disk
//! format (config.json, bf16 model.safetensors, tokenizer.json, sentence-transformers modules), and loads it as
//! any model directory. The outputs mean nothing; the shapes, file formats and so the work per token are real.
//!
//! The tokenizer is the shipped 4k Qwen2-style byte-level BPE (`workloads/vocab/`): Qwen3's own has 151,669
//! tokens, which changes the size of the embedding table (a gather, and the tied output it never computes) but
//! not the work of the 28 blocks that dominate a forward pass.

use std::path::{Path, PathBuf};

use serde_json::json;

use super::tiny::{write, write_json, write_safetensors, SplitMix};
use crate::error::{Error, Result};

/// What `--model` starts with to name a synthetic model.
pub const PREFIX: &str = "synthetic:";

/// The Qwen2-style BPE the synthetic models tokenize with; its post-processor appends `<|endoftext|>`, as
/// Qwen3-Embedding's does.
const TOKENIZER: &str = include_str!("../../../workloads/vocab/qwen2_style_bpe_4k_tokenizer.json");

/// The shape of a Qwen3-style embedding model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Qwen3Spec {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub intermediate: usize,
    /// sentence-transformers' max_seq_length (the positions a rotary table is made for).
    pub max_seq_length: usize,
    /// Qwen3-Embedding's convention (causal attention, last-token pooling); `false`: pplx-embed's
    /// (bidirectional attention, mean pooling).
    pub causal: bool,
    pub seed: u64,
}

/// Qwen3-Embedding-0.6B's shape (its config.json), causal with last-token pooling.
pub const QWEN3_0_6B: Qwen3Spec = Qwen3Spec {
    hidden: 1024,
    layers: 28,
    heads: 16,
    kv_heads: 8,
    head_dim: 128,
    intermediate: 3072,
    max_seq_length: 512,
    causal: true,
    seed: 0,
};

/// The synthetic models by name.
pub const MODELS: [(&str, Qwen3Spec); 3] = [
    ("qwen3-0.6b", QWEN3_0_6B),
    (
        "qwen3-0.6b-bidirectional",
        Qwen3Spec {
            causal: false,
            ..QWEN3_0_6B
        },
    ),
    // A few megabytes with the same structure, for tests of the path itself.
    (
        "qwen3-tiny",
        Qwen3Spec {
            hidden: 64,
            layers: 2,
            heads: 4,
            kv_heads: 2,
            head_dim: 16,
            intermediate: 96,
            max_seq_length: 128,
            causal: true,
            seed: 0,
        },
    ),
];

/// The directory of `synthetic:NAME`, written into the cache on first use (a few seconds for 0.6B); `None` if
/// `model` does not start with [`PREFIX`].
pub fn resolve(model: &str) -> Option<Result<PathBuf>> {
    let name = model.strip_prefix(PREFIX)?;
    let Some((_, spec)) = MODELS.iter().find(|(n, _)| *n == name) else {
        let names: Vec<&str> = MODELS.iter().map(|(n, _)| *n).collect();
        return Some(Err(Error::model(
            model,
            format!(
                "no synthetic model `{name}`; there are: {}",
                names.join(", ")
            ),
        )));
    };
    let dir = super::fetch::cache_root().join("synthetic").join(name);
    Some(written(&dir, *spec).map(|()| dir))
}

/// Writes `spec` into `dir` unless a complete copy is there: into a folder beside it first, renamed last, so an
/// interrupted write never leaves half a model where the cache looks.
fn written(dir: &Path, spec: Qwen3Spec) -> Result<()> {
    if dir.join("model.safetensors").is_file() {
        return Ok(());
    }
    let parent = dir.parent().unwrap_or(dir);
    std::fs::create_dir_all(parent).map_err(Error::io(parent))?;
    let staging = parent.join(format!(".writing-{}", std::process::id()));
    let result = write_qwen3(&staging, spec).and_then(|()| {
        match std::fs::rename(&staging, dir) {
            // Another process wrote the same model first.
            Err(_) if dir.join("model.safetensors").is_file() => Ok(()),
            other => other.map_err(Error::io(dir)),
        }
    });
    let _ = std::fs::remove_dir_all(&staging);
    result
}

/// Writes a Qwen3-style model of `spec` into `dir` (created if needed), weights in bf16 as Qwen3 ships them.
pub fn write_qwen3(dir: &Path, spec: Qwen3Spec) -> Result<()> {
    std::fs::create_dir_all(dir.join("1_Pooling")).map_err(Error::io(dir))?;
    let tokenizer: serde_json::Value =
        serde_json::from_str(TOKENIZER).map_err(|source| Error::Json {
            path: PathBuf::from("workloads/vocab/qwen2_style_bpe_4k_tokenizer.json"),
            source,
        })?;
    let vocab = vocab_size(&tokenizer);
    let Qwen3Spec {
        hidden: h,
        intermediate: f,
        ..
    } = spec;
    let (q, kv) = (spec.heads * spec.head_dim, spec.kv_heads * spec.head_dim);
    let mut rng = SplitMix(spec.seed);
    // Transformers' initialisation: normal with std 0.02 (here uniform with that std); norms near one.
    let mut tensor = |name: String, shape: Vec<usize>, std: f32, offset: f32| {
        let scale = std * 3f32.sqrt();
        let n: usize = shape.iter().product();
        let bytes = (0..n)
            .flat_map(|_| bf16(offset + scale * rng.next_f32()).to_le_bytes())
            .collect();
        (name, shape, bytes)
    };
    let mut tensors = vec![tensor(
        "embed_tokens.weight".into(),
        vec![vocab, h],
        0.02,
        0.0,
    )];
    for l in 0..spec.layers {
        let p = format!("layers.{l}");
        for (name, out, inp) in [
            ("self_attn.q_proj", q, h),
            ("self_attn.k_proj", kv, h),
            ("self_attn.v_proj", kv, h),
            ("self_attn.o_proj", h, q),
            ("mlp.gate_proj", f, h),
            ("mlp.up_proj", f, h),
            ("mlp.down_proj", h, f),
        ] {
            tensors.push(tensor(
                format!("{p}.{name}.weight"),
                vec![out, inp],
                0.02,
                0.0,
            ));
        }
        for (name, dim) in [
            ("input_layernorm", h),
            ("post_attention_layernorm", h),
            ("self_attn.q_norm", spec.head_dim),
            ("self_attn.k_norm", spec.head_dim),
        ] {
            tensors.push(tensor(format!("{p}.{name}.weight"), vec![dim], 0.05, 1.0));
        }
    }
    tensors.push(tensor("norm.weight".into(), vec![h], 0.05, 1.0));
    write_safetensors(
        &dir.join("model.safetensors"),
        safetensors::Dtype::BF16,
        tensors,
    )?;

    let config = json!({
        "architectures": ["Qwen3Model"], "model_type": "qwen3", "vocab_size": vocab, "hidden_size": h,
        "num_hidden_layers": spec.layers, "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads, "head_dim": spec.head_dim, "intermediate_size": f,
        "max_position_embeddings": 32768, "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
        "hidden_act": "silu", "tie_word_embeddings": true, "attention_bias": false,
        "torch_dtype": "bfloat16", "is_causal": spec.causal
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
        &json!({"word_embedding_dimension": h, "pooling_mode_cls_token": false,
                "pooling_mode_mean_tokens": !spec.causal, "pooling_mode_lasttoken": spec.causal,
                "include_prompt": true}),
    )?;
    write_json(
        &dir.join("sentence_bert_config.json"),
        &json!({"max_seq_length": spec.max_seq_length, "do_lower_case": false}),
    )?;
    // Qwen3-Embedding's query instruction, as its config_sentence_transformers.json has it.
    write_json(
        &dir.join("config_sentence_transformers.json"),
        &json!({"prompts": {
            "query": "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery:",
            "document": ""
        }, "default_prompt_name": null, "similarity_fn_name": "cosine"}),
    )?;
    write(&dir.join("tokenizer.json"), TOKENIZER.as_bytes())
}

/// One more than the largest id in the tokenizer's vocabulary or added tokens.
fn vocab_size(tokenizer: &serde_json::Value) -> usize {
    let vocab = tokenizer["model"]["vocab"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(_, id)| id);
    let added = tokenizer["added_tokens"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| &t["id"]);
    vocab
        .chain(added)
        .filter_map(serde_json::Value::as_u64)
        .max()
        .map_or(0, |m| m as usize + 1)
}

/// Rounds to bfloat16 (nearest, ties to even), as torch's `.to(torch.bfloat16)` does.
fn bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Engine, EngineConfig};

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(bf16(1.0), 0x3f80);
        assert_eq!(bf16(-2.0), 0xc000);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
        assert_eq!(bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(bf16(1.0 + 3.0 / 256.0), 0x3f82);
    }

    #[test]
    fn an_unknown_synthetic_model_names_the_known_ones() {
        assert!(resolve("/some/dir").is_none());
        let e = resolve("synthetic:qwen9").unwrap().unwrap_err().to_string();
        assert!(e.contains("qwen3-0.6b") && e.contains("qwen3-tiny"), "{e}");
    }

    /// The synthetic directory is a model the engine loads like any other: its config, pooling, prompts and
    /// tokenizer are read, and embeddings come out unit-length and deterministic.
    #[test]
    fn a_synthetic_model_loads_and_embeds() {
        let dir = tempfile::tempdir().unwrap();
        for causal in [true, false] {
            let spec = Qwen3Spec {
                causal,
                ..MODELS[2].1
            };
            let path = dir.path().join(format!("causal-{causal}"));
            write_qwen3(&path, spec).unwrap();
            let engine = Engine::load(&path, EngineConfig::default()).unwrap();
            let info = engine.info();
            assert_eq!(info.dim, 64);
            assert!(info.prompts.iter().any(|p| p.name == "query"));
            let texts = ["a query about search", "a passage"];
            let a = engine.embed(&texts).unwrap();
            let b = engine.embed(&texts).unwrap();
            assert_eq!(a, b);
            for e in &a {
                let norm: f32 = e.iter().map(|x| x * x).sum::<f32>().sqrt();
                assert!((norm - 1.0).abs() < 1e-4, "{norm}");
            }
        }
    }

    /// Qwen3-0.6B has 0.44B parameters outside its embeddings: a token's forward is twice that in FLOPs, plus
    /// attention over the positions it sees.
    #[test]
    fn flops_per_token_count_the_published_parameters() {
        let config: crate::model::DecoderConfig = serde_json::from_value(json!({
            "vocab_size": 151669, "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
            "max_position_embeddings": 32768
        }))
        .unwrap();
        let config = crate::model::ModelConfig::Decoder(config);
        let params = config.flops_per_token(0) / 2.0;
        assert!((params / 0.4404e9 - 1.0).abs() < 1e-3, "{params}");
        // A causal token sees (128 + 1) / 2 positions on average: 4 FLOPs per position and query width (an empty
        // sequence has none).
        let attention = config.flops_per_token(128) - config.flops_per_token(0);
        assert!(
            (attention - 28.0 * 4.0 * 64.5 * 2048.0).abs() < 1.0,
            "{attention}"
        );
    }
}
