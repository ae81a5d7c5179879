//! The precision an engine runs its linear layers in: an engine-level setting that every backend reads.

/// Precision of the linear layers' weights and the activations at their GEMMs.
#[derive(
    Clone,
    Copy,
    Debug,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    #[default]
    F32,
    /// bf16 weights, activations rounded to bf16 at the GEMM boundary, f32 accumulation. A backend that cannot run
    /// it falls back to f32 and says so in its info.
    Bf16,
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        crate::config::fmt_value_enum(self, f)
    }
}
