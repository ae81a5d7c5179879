//! Weights memory-mapped from `model.safetensors`: f32 tensors are read in place from the page cache; f16/bf16
//! tensors are widened once at load. (The linear layers' weights are then packed into the kernels' panel layout,
//! a copy made once, by the backend's device.)

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use safetensors::tensor::Metadata;
use safetensors::{Dtype, SafeTensors};

use crate::error::{Error, Result};

/// A dense f32 tensor, either a view into the mapped file or owned (widened or repacked at load).
#[derive(Clone)]
pub struct Tensor {
    storage: Storage,
}

#[derive(Clone)]
enum Storage {
    Mapped {
        map: Arc<Mmap>,
        start: usize,
        len: usize,
    },
    Owned(Arc<Vec<f32>>),
}

impl Tensor {
    pub fn from_vec(data: Vec<f32>) -> Self {
        Tensor {
            storage: Storage::Owned(Arc::new(data)),
        }
    }

    pub fn data(&self) -> &[f32] {
        match &self.storage {
            Storage::Mapped { map, start, len } => {
                let bytes = &map[*start..*start + *len * 4];
                // Alignment was checked when the view was made.
                bytemuck_f32(bytes)
            }
            Storage::Owned(v) => v,
        }
    }

    /// Whether the tensor is read in place from the mapped file.
    pub fn is_mapped(&self) -> bool {
        matches!(self.storage, Storage::Mapped { .. })
    }
}

/// A tensor's bytes in its mapped file, checked ([`Weights::get`]).
struct Raw<'a> {
    map: &'a Arc<Mmap>,
    /// Where the bytes start in the file.
    start: usize,
    data: &'a [u8],
    dtype: Dtype,
}

/// Little-endian values of a floating `dtype` ([`Weights::raw`] checked it is one) widened to f32.
fn widen(dtype: Dtype, data: &[u8]) -> Vec<f32> {
    match dtype {
        Dtype::F32 => data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        Dtype::F16 => data
            .chunks_exact(2)
            .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
        // model2vec's per-token weights may be numpy's default float64.
        Dtype::F64 => data
            .chunks_exact(8)
            .map(|b| {
                let bytes = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
                f64::from_le_bytes(bytes) as f32
            })
            .collect(),
        // BF16, the one width left.
        _ => data
            .chunks_exact(2)
            .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
            .collect(),
    }
}

fn bytemuck_f32(bytes: &[u8]) -> &[f32] {
    // SAFETY: every bit pattern is a valid f32; `align_to` only reinterprets the aligned middle.
    let (head, body, tail) = unsafe { bytes.align_to::<f32>() };
    assert!(
        head.is_empty() && tail.is_empty(),
        "tensor view lost its alignment"
    );
    body
}

/// One memory-mapped safetensors file.
struct Shard {
    path: PathBuf,
    map: Arc<Mmap>,
    /// The parsed header, and where the data section starts in the file.
    meta: Metadata,
    data_start: usize,
}

impl Shard {
    fn open(path: &Path) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(Error::io(path))?;
        // SAFETY: the file is opened read-only and we never hand out a view past the map's lifetime (Arc).
        let map = unsafe { Mmap::map(&file) }.map_err(Error::io(path))?;
        let (header, meta) = SafeTensors::read_metadata(&map)
            .map_err(|e| Error::model(path, format!("not a valid safetensors file: {e}")))?;
        Ok(Shard {
            path: path.to_owned(),
            map: Arc::new(map),
            meta,
            data_start: 8 + header,
        })
    }
}

/// transformers' `model.safetensors.index.json`: which file of a sharded checkpoint holds each tensor.
#[derive(serde::Deserialize)]
struct ShardIndex {
    weight_map: HashMap<String, String>,
}

/// The tensors of a checkpoint, found by name, with shapes checked: one safetensors file, or the shards a
/// `*.safetensors.index.json` lists (as transformers saves models past a few GB: gte-Qwen2, e5-mistral).
pub struct Weights {
    /// The file opened: the weights, or the shards' index.
    path: PathBuf,
    shards: Vec<Shard>,
    /// For a sharded checkpoint, the shard of each tensor (by its full name).
    index: Option<HashMap<String, usize>>,
    /// Prefix every tensor name carries in this file (`"bert."` or `"roberta."` in some checkpoints, `""` in others).
    prefix: String,
}

/// The prefixes tensor names may carry: none, or the base model's attribute in a checkpoint saved from a model
/// with a head (`BertForMaskedLM`'s `bert.`, `XLMRobertaForMaskedLM`'s `roberta.`, `MPNetForMaskedLM`'s `mpnet.`,
/// `DistilBertForMaskedLM`'s `distilbert.`, `AlbertForMaskedLM`'s `albert.`, `ElectraForPreTraining`'s `electra.`,
/// `DebertaV2ForSequenceClassification`'s `deberta.`, `GteForSequenceClassification`'s `gte.`,
/// `Qwen3ForCausalLM`'s `model.`, Alibaba GTE's `new.`).
const PREFIXES: [&str; 11] = [
    "",
    "bert.",
    "roberta.",
    "mpnet.",
    "distilbert.",
    "albert.",
    "electra.",
    "deberta.",
    "gte.",
    "model.",
    "new.",
];

impl Weights {
    /// Opens `path` (a safetensors file, or a sharded checkpoint's `.index.json`) and finds the prefix its tensor
    /// names carry (none, or a head's base-model prefix such as `bert.`) by looking for `probe`, a tensor every
    /// checkpoint of the architecture has.
    pub fn open(path: &Path, probe: &str) -> Result<Self> {
        let (shards, index) = if path.to_string_lossy().ends_with(".index.json") {
            let (shards, index) = open_shards(path)?;
            (shards, Some(index))
        } else {
            (vec![Shard::open(path)?], None)
        };
        let mut weights = Weights {
            path: path.to_owned(),
            shards,
            index,
            prefix: String::new(),
        };
        let prefix = PREFIXES
            .into_iter()
            .find(|p| weights.find(&format!("{p}{probe}")).is_some())
            .ok_or_else(|| {
                Error::model(
                    path,
                    format!(
                        "no tensor `{probe}` (nor with a prefix of {:?}): not a checkpoint of the architecture \
                         the directory names",
                        &PREFIXES[1..]
                    ),
                )
            })?;
        weights.prefix = prefix.to_owned();
        Ok(weights)
    }

    /// The file the tensors are read from (a sharded checkpoint's index).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The shard holding tensor `full` (its name with the prefix), and its header entry.
    fn find(&self, full: &str) -> Option<(&Shard, &safetensors::tensor::TensorInfo)> {
        let shard = match &self.index {
            Some(index) => self.shards.get(*index.get(full)?)?,
            None => self.shards.first()?,
        };
        Some((shard, shard.meta.info(full)?))
    }

    /// Whether the checkpoint has the tensor `name` (without the file's prefix): which of two naming schemes it
    /// follows.
    pub fn has(&self, name: &str) -> bool {
        self.find(&format!("{}{name}", self.prefix)).is_some()
    }

    /// The shape of tensor `name` (without the file's prefix), if the checkpoint has it.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        let (_, info) = self.find(&format!("{}{name}", self.prefix))?;
        Some(&info.shape)
    }

    /// The integer tensor `name` (without the file's prefix) of `len` entries, I64 or I32, each below `bound`: an
    /// index into another tensor's rows (model2vec's token `mapping`).
    pub fn indices(&self, name: &str, len: usize, bound: usize) -> Result<Vec<usize>> {
        let full = format!("{}{name}", self.prefix);
        let missing = || Error::model(&self.path, format!("missing tensor `{full}`"));
        let (shard, info) = self.find(&full).ok_or_else(missing)?;
        let bad = |what: String| Error::model(&shard.path, format!("tensor `{full}`: {what}"));
        if info.shape != [len] {
            return Err(bad(format!("shape {:?}, expected [{len}]", info.shape)));
        }
        let width = match info.dtype {
            Dtype::I64 => 8,
            Dtype::I32 => 4,
            other => return Err(bad(format!("dtype {other:?}, expected I64 or I32"))),
        };
        let (start, end) = (
            shard.data_start + info.data_offsets.0,
            shard.data_start + info.data_offsets.1,
        );
        let data = shard
            .map
            .get(start..end)
            .filter(|d| d.len() == len * width)
            .ok_or_else(|| bad("data range does not match its shape".into()))?;
        data.chunks_exact(width)
            .map(|b| {
                let i = match b.try_into() {
                    Ok(b8) => i64::from_le_bytes(b8),
                    Err(_) => i64::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                };
                usize::try_from(i)
                    .ok()
                    .filter(|&i| i < bound)
                    .ok_or_else(|| bad(format!("index {i} outside 0..{bound}")))
            })
            .collect()
    }

    /// The tensor `name` (without the file's prefix), which must have exactly `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let raw = self.raw(name, shape)?;
        let storage = match raw.dtype {
            Dtype::F32 if raw.start % 4 == 0 => Storage::Mapped {
                map: raw.map.clone(),
                start: raw.start,
                len: shape.iter().product(),
            },
            dtype => Storage::Owned(Arc::new(widen(dtype, raw.data))),
        };
        Ok(Tensor { storage })
    }

    /// Row `i` of the 2-D tensor `name` of `shape`, widened to f32 alone: a few rows of a vocabulary-wide table (a
    /// LogitScore head's) without widening the table.
    pub fn row(&self, name: &str, shape: [usize; 2], i: usize) -> Result<Vec<f32>> {
        let raw = self.raw(name, &shape)?;
        if i >= shape[0] {
            return Err(Error::model(
                &self.path,
                format!("row {i} of tensor `{name}`, which has {}", shape[0]),
            ));
        }
        let width = raw.data.len() / (shape[0] * shape[1]).max(1);
        let row = shape[1] * width;
        Ok(widen(raw.dtype, &raw.data[i * row..(i + 1) * row]))
    }

    /// Tensor `name`'s bytes in its file, checked to have exactly `shape` and a floating dtype.
    fn raw(&self, name: &str, shape: &[usize]) -> Result<Raw<'_>> {
        let full = format!("{}{name}", self.prefix);
        let (shard, info) = self.find(&full).ok_or_else(|| {
            Error::model(
                &self.path,
                format!("missing tensor `{full}` (expected shape {shape:?})"),
            )
        })?;
        let path = &shard.path;
        if info.shape != shape {
            return Err(Error::model(
                path,
                format!(
                    "tensor `{full}` has shape {:?}, expected {shape:?}",
                    info.shape
                ),
            ));
        }
        let (start, end) = (
            shard.data_start + info.data_offsets.0,
            shard.data_start + info.data_offsets.1,
        );
        let n: usize = shape.iter().product();
        let width = match info.dtype {
            Dtype::F64 => 8,
            Dtype::F32 => 4,
            Dtype::F16 | Dtype::BF16 => 2,
            other => {
                return Err(Error::model(
                    path,
                    format!("tensor `{full}` has dtype {other:?}, expected F32, F16, BF16 or F64"),
                ))
            }
        };
        let data = shard
            .map
            .get(start..end)
            .filter(|d| d.len() == n * width)
            .ok_or_else(|| {
                Error::model(
                    path,
                    format!("tensor `{full}`: data range does not match its shape"),
                )
            })?;
        Ok(Raw {
            map: &shard.map,
            start,
            data,
            dtype: info.dtype,
        })
    }
}

/// The shards `index_path` lists, each opened once, and the shard of each tensor. Shard names are plain file
/// names beside the index (as transformers writes them): a path elsewhere is refused, not followed.
fn open_shards(index_path: &Path) -> Result<(Vec<Shard>, HashMap<String, usize>)> {
    let text = std::fs::read_to_string(index_path).map_err(Error::io(index_path))?;
    let index: ShardIndex = serde_json::from_str(&text).map_err(|source| Error::Json {
        path: index_path.to_owned(),
        source,
    })?;
    let dir = index_path.parent().unwrap_or(Path::new("."));
    let mut files: Vec<&str> = index.weight_map.values().map(String::as_str).collect();
    files.sort_unstable();
    files.dedup();
    if let Some(bad) = files
        .iter()
        .find(|f| Path::new(f).file_name().and_then(|n| n.to_str()) != Some(**f))
    {
        return Err(Error::model(
            index_path,
            format!("shard {bad:?}: expected a file name beside the index"),
        ));
    }
    let shards = files
        .iter()
        .map(|f| {
            let path = dir.join(f);
            // A regular file: opening a FIFO or a device would block or read without end.
            if !path.is_file() {
                return Err(Error::model(&path, "missing: a shard the index names"));
            }
            Shard::open(&path)
        })
        .collect::<Result<Vec<_>>>()?;
    let of = index
        .weight_map
        .iter()
        .map(|(name, file)| {
            // Every file is in `files`: the search finds it.
            let i = files.binary_search(&file.as_str()).unwrap_or_default();
            (name.clone(), i)
        })
        .collect();
    Ok((shards, of))
}
