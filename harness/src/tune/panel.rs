//! The knobs `bench tune` shows on its panel: the load's, the scheduler's (applied live) and those that need a new
//! engine, each at its current value with the step its keys take.

use anyhow::{bail, Result};
use engine::backend::BackendKind;
use engine::EngineConfig;
use tui::{Knob, KnobKind, Step};

use super::live::Offered;
use crate::workload::{Drive, Workload};

/// A setting's value as the panel shows it and a `set` takes it.
pub(super) fn knob_value(config: &EngineConfig, name: &str) -> Result<String> {
    let json = serde_json::to_value(config)?;
    Ok(match json.get(name) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => bail!("unknown knob `{name}`"),
    })
}

/// The knobs on the panel: the load's first, then the scheduler's, then those that need a new engine.
pub(super) fn knob_panel(
    config: &EngineConfig,
    workload: &Workload,
    offered: Offered,
    engine: bool,
) -> Result<Vec<Knob>> {
    let scale = |factor, integer| Step::Scale { factor, integer };
    let mut knobs = Vec::new();
    if workload.steps_rate() {
        knobs.push(Knob {
            name: "rate".into(),
            value: offered.rate.to_string(),
            kind: KnobKind::Load,
            step: scale(1.25, false),
        });
    }
    if workload
        .classes
        .iter()
        .any(|c| matches!(c.drive, Drive::Closed { .. }))
    {
        knobs.push(Knob {
            name: "batch_clients".into(),
            value: offered.clients.to_string(),
            kind: KnobKind::Load,
            step: Step::Add(1.0),
        });
    }
    if engine {
        knobs.extend(engine_knobs(config)?);
    }
    Ok(knobs)
}

/// The scheduler's knobs and those that need a new engine, at `config`'s values.
fn engine_knobs(config: &EngineConfig) -> Result<Vec<Knob>> {
    let scale = |factor, integer| Step::Scale { factor, integer };
    let choice = |v: &[&str]| Step::Choice(v.iter().map(|s| s.to_string()).collect());
    let mut knobs = Vec::new();
    let steps: [(&str, KnobKind, Step); 14] = [
        ("max_batch_tokens", KnobKind::Live, scale(2.0, true)),
        ("max_batch_seqs", KnobKind::Live, scale(2.0, true)),
        ("max_wait_ms", KnobKind::Live, Step::Add(1.0)),
        ("overlap", KnobKind::Live, Step::Toggle),
        ("max_queue_tokens", KnobKind::Live, scale(2.0, true)),
        ("max_queue_requests", KnobKind::Live, scale(2.0, true)),
        ("online_deadline_ms", KnobKind::Live, scale(2.0, true)),
        ("batch_deadline_ms", KnobKind::Live, scale(2.0, true)),
        ("batch_min_share", KnobKind::Live, Step::Add(0.05)),
        ("online_batch_share", KnobKind::Live, Step::Add(0.05)),
        ("dtype", KnobKind::Engine, choice(&["f32", "bf16"])),
        ("threads", KnobKind::Engine, Step::Add(1.0)),
        (
            "capture",
            KnobKind::Engine,
            choice(&["off", "lazy", "startup"]),
        ),
        (
            "tokenizer",
            KnobKind::Engine,
            choice(&["auto", "fast", "hf"]),
        ),
    ];
    for (name, kind, step) in steps {
        knobs.push(Knob {
            name: name.into(),
            value: knob_value(config, name)?,
            kind,
            step,
        });
    }
    knobs.push(Knob {
        name: "replicas".into(),
        value: config.replicas.to_string(),
        kind: KnobKind::Engine,
        step: Step::Add(1.0),
    });
    // Only a GPU has two attention kernels and two feed-forward precisions; on the CPU these knobs would change
    // nothing.
    if config.backend == BackendKind::Cuda {
        for (name, values) in [
            ("gpu_attention", ["cuda-cores", "tensor-cores"]),
            ("gpu_intermediate", ["f32", "bf16"]),
        ] {
            knobs.push(Knob {
                name: name.into(),
                value: knob_value(config, name)?,
                kind: KnobKind::Engine,
                step: choice(&values),
            });
        }
    }
    Ok(knobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attention kernel and the feed-forward precision are knobs where they change what runs: on a CUDA
    /// engine, not on the CPU.
    #[test]
    fn the_gpu_knobs_are_offered_for_a_cuda_engine_only() {
        let names = |c: &EngineConfig| -> Vec<String> {
            engine_knobs(c)
                .unwrap()
                .into_iter()
                .map(|k| k.name)
                .collect()
        };
        let cpu = EngineConfig::default();
        assert!(!names(&cpu).iter().any(|n| n.starts_with("gpu_")));
        let cuda = EngineConfig {
            backend: BackendKind::Cuda,
            ..EngineConfig::default()
        };
        let knobs = engine_knobs(&cuda).unwrap();
        for (name, default, other) in [
            ("gpu_attention", "cuda-cores", "tensor-cores"),
            ("gpu_intermediate", "f32", "bf16"),
        ] {
            let knob = knobs
                .iter()
                .find(|k| k.name == name)
                .unwrap_or_else(|| panic!("a CUDA engine offers {name}"));
            assert_eq!(knob.value, default);
            assert_eq!(knob.step, Step::Choice(vec![default.into(), other.into()]));
        }
    }
}
