//! The precision an engine runs its linear layers in: an engine-level setting that every backend reads.

/// Precision of the linear layers' weights and the activations at their GEMMs.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    #[default]
    F32,
    /// bf16 weights, activations rounded to bf16 at the GEMM boundary, f32 accumulation. A backend that cannot run
    /// it falls back to f32 and says so in its info.
    Bf16,
}

impl std::str::FromStr for Dtype {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "f32" => Ok(Dtype::F32),
            "bf16" => Ok(Dtype::Bf16),
            other => Err(crate::Error::Config {
                name: "dtype",
                message: format!("unknown dtype {other:?} (expected f32 or bf16)"),
            }),
        }
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
        })
    }
}
