//! Reads a model directory the way sentence-transformers does: `modules.json` names the pipeline (Transformer,
//! Pooling, Normalize), `1_Pooling/config.json` the pooling (either version's keys), `sentence_bert_config.json` (else
//! `tokenizer_config.json`) the max sequence length.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::config::{read_json, ModelConfig};
use crate::backend::ops::Activation;
use crate::error::{Error, Result};

/// How token states become one vector: one of sentence-transformers' Pooling modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pooling {
    /// The tokens' mean.
    Mean,
    /// The first token's hidden state.
    Cls,
    /// The last token's hidden state (sentence-transformers' `pooling_mode_lasttoken`, decoder models).
    #[serde(rename = "last_token")]
    LastToken,
    /// Each column's maximum over the tokens (`pooling_mode_max_tokens`, the NLI models of Sentence-BERT's paper).
    Max,
    /// The tokens' sum over the square root of their count (`pooling_mode_mean_sqrt_len_tokens`).
    #[serde(rename = "mean_sqrt_len")]
    MeanSqrtLen,
    /// The tokens' mean weighted by position, 1 for the first to n for the last (`pooling_mode_weightedmean_tokens`,
    /// SGPT's for decoders: later tokens have seen more of the text).
    #[serde(rename = "weighted_mean")]
    WeightedMean,
}

/// sentence-transformers' Pooling module: its modes, whose vectors are concatenated in order (each the hidden
/// states' width), and whether a prompt's tokens are pooled (`include_prompt`: INSTRUCTOR's models leave them out,
/// pooling only the text's; a CLS mode then reads the first token after the prompt).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct PoolingModule {
    /// At least one.
    pub modes: Vec<Pooling>,
    pub include_prompt: bool,
}

impl PoolingModule {
    /// One mode over every token: what a directory without a Pooling module gets (the mean).
    pub fn single(mode: Pooling) -> Self {
        PoolingModule {
            modes: vec![mode],
            include_prompt: true,
        }
    }

    /// Width of the pooled vector for hidden states of `hidden` columns.
    pub fn width(&self, hidden: usize) -> usize {
        self.modes.len() * hidden
    }
}

impl Pooling {
    /// The mode `1_Pooling/config.json` names (`pooling_mode`'s spelling; the old flags are mapped to it).
    fn from_config(mode: &str) -> Option<Pooling> {
        Some(match mode {
            "mean" => Pooling::Mean,
            "cls" => Pooling::Cls,
            "lasttoken" => Pooling::LastToken,
            "max" => Pooling::Max,
            "mean_sqrt_len_tokens" => Pooling::MeanSqrtLen,
            "weightedmean" => Pooling::WeightedMean,
            _ => return None,
        })
    }
}

/// The longest sequence the engine runs, whatever a config says: a rotary table is computed at load for every
/// position served (at head_dim 128, 64 MiB here), so `max_position_embeddings` (3,276,832,768 in a fuzzed
/// config; rope-scaled models say millions) must not size it alone. Longer than the context of the embedding
/// models we know of (Qwen3-Embedding's is 32,768); `--max-seq-length` lowers it, never raises it.
pub const MAX_POSITIONS: usize = 1 << 17;

/// A parsed model directory: configuration, pooling, normalisation and where the weights are.
#[derive(Clone, Debug)]
pub struct ModelDir {
    pub root: PathBuf,
    pub config: ModelConfig,
    pub pooling: PoolingModule,
    pub normalize: bool,
    /// sentence-transformers' `max_seq_length`, capped by the position table.
    pub max_seq_length: usize,
    /// The longest sequence the backend loads the model for: the model's positions up to [`MAX_POSITIONS`], or
    /// fewer once an engine truncates sooner ([`ModelDir::serving`]). What position tables computed at load
    /// (Qwen3's rotary one) cover, so a config's `max_position_embeddings` alone never sizes an allocation.
    pub positions: usize,
    /// Prompt prefixes by name from `config_sentence_transformers.json` (e.g. `query` → `"query: "`).
    pub prompts: Vec<(String, String)>,
    /// The prompt sentence-transformers puts before a text that names none (its `default_prompt_name`), one of
    /// `prompts`.
    pub default_prompt: Option<String>,
    /// sentence-transformers' Dense modules after pooling, in order.
    pub dense: Vec<DenseModule>,
    pub weights_path: PathBuf,
    pub tokenizer_path: PathBuf,
}

/// A sentence-transformers Dense module: `act(x · Wᵀ + b)` on each pooled row (LaBSE's, distiluse's, EmbeddingGemma's
/// projections), its weights in its own folder.
#[derive(Clone, Debug, PartialEq)]
pub struct DenseModule {
    pub weights_path: PathBuf,
    pub in_features: usize,
    pub out_features: usize,
    pub bias: bool,
    pub activation: Activation,
}

/// A Dense module's `config.json`.
#[derive(Deserialize)]
struct DenseFile {
    in_features: usize,
    out_features: usize,
    #[serde(default = "default_true")]
    bias: bool,
    /// A torch class path; sentence-transformers' default is tanh.
    #[serde(default = "default_dense_activation")]
    activation_function: String,
    /// What it reads and writes (sentence-transformers ≥ 6): the sentence embedding, unless set otherwise.
    module_input_name: Option<String>,
    module_output_name: Option<String>,
    /// Refused when set: the input added back to the output (sentence-transformers ≥ 6).
    #[serde(default)]
    use_residual: bool,
}

fn default_dense_activation() -> String {
    "torch.nn.modules.activation.Tanh".into()
}

impl DenseModule {
    /// Reads the module in `folder`, whose input must be `inp` wide (the previous module's output).
    fn read(folder: &Path, inp: usize) -> Result<Self> {
        let config_path = folder.join("config.json");
        let f: DenseFile = read_json(&config_path)?;
        // As sentence-transformers: a class outside torch is not imported (without trust_remote_code), tanh runs.
        let class = match f.activation_function.strip_prefix("torch.") {
            Some(path) => path.rsplit('.').next().unwrap_or_default(),
            None => "Tanh",
        };
        let activation = match class {
            "Tanh" => Activation::Tanh,
            "Identity" => Activation::None,
            _ => {
                return Err(Error::model(
                    &config_path,
                    format!(
                        "unsupported activation_function {:?}: expected Tanh or Identity",
                        f.activation_function
                    ),
                ))
            }
        };
        if f.use_residual {
            return Err(Error::model(
                &config_path,
                "unsupported: a Dense module with use_residual = true",
            ));
        }
        let names = [&f.module_input_name, &f.module_output_name];
        if let Some(name) = names
            .into_iter()
            .flatten()
            .find(|n| *n != "sentence_embedding")
        {
            return Err(Error::model(
                &config_path,
                format!("unsupported: a Dense module on {name:?} (on the sentence embedding only)"),
            ));
        }
        if f.in_features != inp || f.out_features == 0 {
            return Err(Error::model(
                &config_path,
                format!(
                    "a Dense module of {} to {} features after a module of {inp}",
                    f.in_features, f.out_features
                ),
            ));
        }
        Ok(DenseModule {
            weights_path: require(
                folder.join("model.safetensors"),
                "the Dense module's weights as model.safetensors (pytorch_model.bin is not read)",
            )?,
            in_features: f.in_features,
            out_features: f.out_features,
            bias: f.bias,
            activation,
        })
    }
}

#[derive(Deserialize)]
struct Module {
    #[serde(default)]
    path: String,
    #[serde(rename = "type")]
    kind: String,
}

/// `1_Pooling/config.json`: sentence-transformers ≥ 6 writes `pooling_mode`; earlier versions one flag per mode
/// (read when `pooling_mode` is absent, as sentence-transformers does).
#[derive(Deserialize)]
struct PoolingFile {
    pooling_mode: Option<PoolingModes>,
    #[serde(default = "default_true")]
    include_prompt: bool,
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
}

/// One pooling mode, or several whose outputs sentence-transformers concatenates.
#[derive(Deserialize)]
#[serde(untagged)]
enum PoolingModes {
    One(String),
    Several(Vec<String>),
}

fn default_true() -> bool {
    true
}

#[derive(Deserialize)]
struct SentenceBertFile {
    max_seq_length: Option<usize>,
    #[serde(default)]
    do_lower_case: bool,
}

/// The names sentence-transformers reads the Transformer module's config from, the first that exists.
const SENTENCE_CONFIGS: [&str; 7] = [
    "sentence_bert_config.json",
    "sentence_roberta_config.json",
    "sentence_distilbert_config.json",
    "sentence_camembert_config.json",
    "sentence_albert_config.json",
    "sentence_xlm-roberta_config.json",
    "sentence_xlnet_config.json",
];

/// The tokenizer's `model_max_length` from `tokenizer_config.json`: where sentence-transformers takes the
/// sequence limit from when its own config names none. transformers writes 10^30 for "no limit" (too big for an
/// integer), read as unbounded; a whole number written as a float (`512.0`) is that number.
fn tokenizer_max_length(root: &Path) -> Result<Option<usize>> {
    let path = root.join("tokenizer_config.json");
    if !path.is_file() {
        return Ok(None);
    }
    let config: serde_json::Value = read_json(&path)?;
    let limit = &config["model_max_length"];
    Ok(limit
        .as_u64()
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
        .or_else(|| {
            limit
                .as_f64()
                .filter(|n| *n >= 1.0 && n.fract() == 0.0)
                // A float cast saturates: 10^30 becomes usize::MAX.
                .map(|n| n as usize)
        }))
}

/// Whether `tokenizer.json`'s normaliser lowercases (BERT's with `lowercase`, or a `Lowercase` step): then
/// sentence-transformers' `do_lower_case` changes nothing.
fn tokenizer_lowercases(path: &Path) -> Result<bool> {
    let json: serde_json::Value = read_json(path)?;
    let lowercases = |n: &serde_json::Value| match n["type"].as_str() {
        Some("Lowercase") => true,
        Some("BertNormalizer") => n["lowercase"].as_bool().unwrap_or(true),
        _ => false,
    };
    let normalizer = &json["normalizer"];
    Ok(lowercases(normalizer)
        || normalizer["normalizers"]
            .as_array()
            .is_some_and(|steps| steps.iter().any(lowercases)))
}

#[derive(Deserialize, Default)]
struct SentenceTransformersFile {
    /// A `null` prompt is an empty one, as sentence-transformers reads it.
    #[serde(default)]
    prompts: std::collections::BTreeMap<String, Option<String>>,
    default_prompt_name: Option<String>,
}

fn require(path: PathBuf, what: &str) -> Result<PathBuf> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::model(path, format!("missing: expected {what}")))
    }
}

impl ModelDir {
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        let root = root.as_ref().to_owned();
        if !root.is_dir() {
            return Err(Error::model(
                &root,
                "not a directory: expected a model directory with config.json, model.safetensors and tokenizer.json",
            ));
        }
        let config_path = require(root.join("config.json"), "the model's config.json")?;
        let config = ModelConfig::read(&config_path)?;
        // One file, else a sharded checkpoint's index (transformers shards models past a few GB).
        let single = root.join("model.safetensors");
        let sharded = root.join("model.safetensors.index.json");
        let weights_path = if sharded.is_file() && !single.is_file() {
            sharded
        } else {
            require(
                single,
                "the weights as model.safetensors (or sharded, with model.safetensors.index.json)",
            )?
        };
        let tokenizer_path = require(root.join("tokenizer.json"), "a Hugging Face tokenizer.json")?;

        // Without modules.json the directory is a bare transformers model: sentence-transformers then defaults to
        // mean pooling without normalisation, and so do we.
        let (mut pooling, mut normalize, mut pooled) =
            (PoolingModule::single(Pooling::Mean), false, false);
        let mut dense: Vec<DenseModule> = Vec::new();
        let modules_path = root.join("modules.json");
        if modules_path.is_file() {
            let modules: Vec<Module> = read_json(&modules_path)?;
            for m in &modules {
                match m.kind.rsplit('.').next().unwrap_or_default() {
                    "Transformer" => {}
                    "Pooling" => {
                        pooling = read_pooling(&root.join(&m.path).join("config.json"))?;
                        pooled = true;
                    }
                    "Dense" if pooled && !normalize => {
                        let inp = dense.last().map_or_else(
                            || pooling.width(config.hidden_size()),
                            |d| d.out_features,
                        );
                        dense.push(DenseModule::read(&root.join(&m.path), inp)?);
                    }
                    "Dense" => {
                        return Err(Error::model(
                            &modules_path,
                            "unsupported: a Dense module before Pooling or after Normalize",
                        ))
                    }
                    "Normalize" => normalize = true,
                    other => {
                        return Err(Error::model(
                            &modules_path,
                            format!(
                                "unsupported module {other:?}: expected Transformer, Pooling, Dense and Normalize \
                                 modules"
                            ),
                        ))
                    }
                }
            }
        }
        let positions = config.max_positions().min(MAX_POSITIONS);
        // As sentence-transformers: the limit its config names, else the tokenizer's, within the positions.
        // sentence-transformers reads the first of these names that exists and is not empty (`{}`).
        let mut sentence = None;
        for path in SENTENCE_CONFIGS.iter().map(|name| root.join(name)) {
            if path.is_file() {
                let value: serde_json::Value = read_json(&path)?;
                if value.as_object().is_some_and(|o| o.is_empty()) {
                    continue;
                }
                let config =
                    serde_json::from_value::<SentenceBertFile>(value).map_err(|source| {
                        Error::Json {
                            path: path.clone(),
                            source,
                        }
                    })?;
                sentence = Some((config, path));
                break;
            }
        }
        if let Some((s, path)) = &sentence {
            if s.do_lower_case && !tokenizer_lowercases(&tokenizer_path)? {
                return Err(Error::model(
                    path,
                    "unsupported: do_lower_case = true with a tokenizer that keeps case (sentence-transformers \
                     would lowercase the text first)",
                ));
            }
        }
        let max_seq_length = match sentence.and_then(|(s, _)| s.max_seq_length) {
            Some(n) => Some(n),
            None => tokenizer_max_length(&root)?,
        }
        .map_or(positions, |n| n.min(positions));
        let st_path = root.join("config_sentence_transformers.json");
        let st = if st_path.is_file() {
            read_json::<SentenceTransformersFile>(&st_path)?
        } else {
            SentenceTransformersFile::default()
        };
        // As sentence-transformers, which refuses a default that names no prompt.
        let default_prompt = st.default_prompt_name;
        if let Some(name) = default_prompt
            .as_ref()
            .filter(|n| !st.prompts.contains_key(*n))
        {
            return Err(Error::model(
                &st_path,
                format!(
                    "default_prompt_name {name:?} is not one of its prompts ({:?})",
                    st.prompts.keys().collect::<Vec<_>>()
                ),
            ));
        }
        let prompts = st
            .prompts
            .into_iter()
            .map(|(name, text)| (name, text.unwrap_or_default()))
            .collect();
        Ok(ModelDir {
            root,
            positions,
            config,
            pooling,
            normalize,
            max_seq_length,
            prompts,
            default_prompt,
            dense,
            weights_path,
            tokenizer_path,
        })
    }
}

impl ModelDir {
    /// Width of the sentence embedding: the last Dense module's output, else the pooled vector's.
    pub fn dim(&self) -> usize {
        self.dense.last().map_or_else(
            || self.pooling.width(self.config.hidden_size()),
            |d| d.out_features,
        )
    }

    /// Whether the embedding is the hidden states pooled by one mode, nothing after it but Normalize: then a
    /// sequence's token states are in the embedding's space (served by `/embed_all`), and a backend may normalize
    /// rows as it pools them.
    pub fn pools_last(&self) -> bool {
        self.dense.is_empty() && self.pooling.modes.len() == 1
    }

    /// The directory as an engine that truncates every input to `max_len` tokens runs it.
    pub fn serving(mut self, max_len: usize) -> Self {
        self.positions = self.positions.min(max_len);
        self
    }
}

fn read_pooling(path: &Path) -> Result<PoolingModule> {
    let p: PoolingFile = read_json(path)?;
    let modes = match p.pooling_mode {
        Some(PoolingModes::One(mode)) => vec![mode],
        Some(PoolingModes::Several(modes)) => modes,
        None => {
            let legacy = [
                (p.pooling_mode_cls_token, "cls"),
                (p.pooling_mode_max_tokens, "max"),
                (p.pooling_mode_mean_tokens, "mean"),
                (p.pooling_mode_mean_sqrt_len_tokens, "mean_sqrt_len_tokens"),
                (p.pooling_mode_weightedmean_tokens, "weightedmean"),
                (p.pooling_mode_lasttoken, "lasttoken"),
            ];
            let on: Vec<String> = legacy
                .iter()
                .filter(|(set, _)| *set)
                .map(|(_, mode)| mode.to_string())
                .collect();
            // sentence-transformers pools by the mean when no mode is set.
            if on.is_empty() {
                vec!["mean".into()]
            } else {
                on
            }
        }
    };
    if modes.is_empty() {
        return Err(Error::model(
            path,
            "pooling_mode is an empty list: no pooled vector",
        ));
    }
    let modes = modes
        .iter()
        .map(|mode| {
            Pooling::from_config(mode).ok_or_else(|| {
                Error::model(
                    path,
                    format!(
                        "unsupported pooling mode {mode:?}: expected mean, cls, lasttoken, max, \
                         mean_sqrt_len_tokens or weightedmean"
                    ),
                )
            })
        })
        .collect::<Result<_>>()?;
    Ok(PoolingModule {
        modes,
        include_prompt: p.include_prompt,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fixture with EmbeddingGemma's head (Pooling, Dense, Dense, Normalize), copied where a test may edit it.
    fn dense_fixture() -> tempfile::TempDir {
        let from =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/distilbert_dense_mean");
        let dir = tempfile::tempdir().expect("tempdir");
        for entry in walk(&from) {
            let to = dir.path().join(entry.strip_prefix(&from).expect("inside"));
            std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
            std::fs::copy(&entry, to).expect("copy");
        }
        dir
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        std::fs::read_dir(dir)
            .expect("read_dir")
            .flat_map(|e| {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    walk(&p)
                } else {
                    vec![p]
                }
            })
            .collect()
    }

    fn edit(path: &Path, f: impl FnOnce(&mut serde_json::Value)) {
        let mut json: serde_json::Value = read_json(path).expect("JSON");
        f(&mut json);
        std::fs::write(path, json.to_string()).expect("write");
    }

    /// Dense modules load in order, their widths chained; what would run wrong is refused, naming the cause.
    #[test]
    fn dense_modules_chain_and_what_cannot_run_is_refused() {
        let dir = dense_fixture();
        let model = ModelDir::open(dir.path()).expect("loads");
        let shape: Vec<_> = model
            .dense
            .iter()
            .map(|d| (d.in_features, d.out_features, d.bias, d.activation))
            .collect();
        assert_eq!(
            shape,
            [
                (64, 256, false, Activation::None),
                (256, 48, false, Activation::None)
            ]
        );
        assert_eq!(model.dim(), 48);
        type Edit = fn(&Path);
        let cases: [(Edit, &str); 7] = [
            (
                |d| {
                    edit(&d.join("2_Dense/config.json"), |j| {
                        j["activation_function"] = "torch.nn.modules.activation.ReLU".into()
                    })
                },
                "activation_function",
            ),
            (
                |d| {
                    edit(&d.join("2_Dense/config.json"), |j| {
                        j["use_residual"] = true.into()
                    })
                },
                "use_residual",
            ),
            (
                |d| {
                    edit(&d.join("3_Dense/config.json"), |j| {
                        j["in_features"] = 64.into()
                    })
                },
                "after a module of 256",
            ),
            (
                |d| {
                    edit(&d.join("2_Dense/config.json"), |j| {
                        j["module_input_name"] = "token_embeddings".into()
                    })
                },
                "token_embeddings",
            ),
            (
                |d| std::fs::remove_file(d.join("3_Dense/model.safetensors")).expect("rm"),
                "pytorch_model.bin is not read",
            ),
            // Normalize before a Dense module.
            (
                |d| {
                    edit(&d.join("modules.json"), |j| {
                        j.as_array_mut().expect("list").swap(3, 4)
                    })
                },
                "after Normalize",
            ),
            // A Dense module before Pooling.
            (
                |d| {
                    edit(&d.join("modules.json"), |j| {
                        j.as_array_mut().expect("list").swap(1, 2)
                    })
                },
                "before Pooling",
            ),
        ];
        for (change, cause) in cases {
            let dir = dense_fixture();
            change(dir.path());
            let err = ModelDir::open(dir.path()).expect_err(cause).to_string();
            assert!(err.contains(cause), "{cause}: {err}");
        }
    }
}
