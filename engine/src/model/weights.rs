//! Weights memory-mapped from `model.safetensors`: f32 tensors are read in place from the page cache; f16/bf16
//! tensors are widened once at load. (The linear layers' weights are then packed into the kernels' panel layout,
//! a copy made once, by the backend's device.)

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

fn bytemuck_f32(bytes: &[u8]) -> &[f32] {
    // SAFETY: every bit pattern is a valid f32; `align_to` only reinterprets the aligned middle.
    let (head, body, tail) = unsafe { bytes.align_to::<f32>() };
    assert!(
        head.is_empty() && tail.is_empty(),
        "tensor view lost its alignment"
    );
    body
}

/// The tensors of one safetensors file, found by name, with shapes checked.
pub struct Weights {
    path: PathBuf,
    map: Arc<Mmap>,
    /// The parsed header, and where the data section starts in the file.
    meta: Metadata,
    data_start: usize,
    /// Prefix every tensor name carries in this file (`"bert."` or `"roberta."` in some checkpoints, `""` in others).
    prefix: String,
}

/// The prefixes tensor names may carry: none, or the base model's attribute in a checkpoint saved from a model
/// with a head (`BertForMaskedLM`'s `bert.`, `XLMRobertaForMaskedLM`'s `roberta.`, `MPNetForMaskedLM`'s `mpnet.`,
/// `DistilBertForMaskedLM`'s `distilbert.`, `Qwen3ForCausalLM`'s `model.`).
const PREFIXES: [&str; 6] = ["", "bert.", "roberta.", "mpnet.", "distilbert.", "model."];

impl Weights {
    /// Opens `path` and finds the prefix its tensor names carry (none, or a head's base-model prefix such as
    /// `bert.`) by looking for `probe`, a tensor every checkpoint of the architecture has.
    pub fn open(path: &Path, probe: &str) -> Result<Self> {
        let file = std::fs::File::open(path).map_err(Error::io(path))?;
        // SAFETY: the file is opened read-only and we never hand out a view past the map's lifetime (Arc).
        let map = unsafe { Mmap::map(&file) }.map_err(Error::io(path))?;
        let (header, meta) = SafeTensors::read_metadata(&map)
            .map_err(|e| Error::model(path, format!("not a valid safetensors file: {e}")))?;
        let prefix = PREFIXES
            .into_iter()
            .find(|p| meta.info(&format!("{p}{probe}")).is_some())
            .ok_or_else(|| {
                Error::model(
                    path,
                    format!(
                        "no tensor `{probe}` (nor with a prefix of {:?}): not a checkpoint of the architecture \
                         config.json names",
                        &PREFIXES[1..]
                    ),
                )
            })?;
        Ok(Weights {
            path: path.to_owned(),
            map: Arc::new(map),
            meta,
            data_start: 8 + header,
            prefix: prefix.to_owned(),
        })
    }

    /// The file the tensors are read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The tensor `name` (without the file's prefix), which must have exactly `shape`.
    pub fn get(&self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let full = format!("{}{name}", self.prefix);
        let info = self.meta.info(&full).ok_or_else(|| {
            Error::model(
                &self.path,
                format!("missing tensor `{full}` (expected shape {shape:?})"),
            )
        })?;
        if info.shape != shape {
            return Err(Error::model(
                &self.path,
                format!(
                    "tensor `{full}` has shape {:?}, expected {shape:?}",
                    info.shape
                ),
            ));
        }
        let (start, end) = (
            self.data_start + info.data_offsets.0,
            self.data_start + info.data_offsets.1,
        );
        let n: usize = shape.iter().product();
        let width = match info.dtype {
            Dtype::F32 => 4,
            _ => 2,
        };
        let data = self
            .map
            .get(start..end)
            .filter(|d| d.len() == n * width)
            .ok_or_else(|| {
                Error::model(
                    &self.path,
                    format!("tensor `{full}`: data range does not match its shape"),
                )
            })?;
        let storage = match info.dtype {
            Dtype::F32 if start % 4 == 0 => Storage::Mapped {
                map: self.map.clone(),
                start,
                len: n,
            },
            Dtype::F32 => Storage::Owned(Arc::new(
                data.chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            )),
            Dtype::F16 => Storage::Owned(Arc::new(
                data.chunks_exact(2)
                    .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
            )),
            Dtype::BF16 => Storage::Owned(Arc::new(
                data.chunks_exact(2)
                    .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
            )),
            other => {
                return Err(Error::model(
                    &self.path,
                    format!("tensor `{full}` has dtype {other:?}, expected F32, F16 or BF16"),
                ))
            }
        };
        Ok(Tensor { storage })
    }
}
