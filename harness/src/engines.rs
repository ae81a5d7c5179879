//! Loading engines for the commands and the harness's targets: one, with its start-up line on stderr, or the
//! replicas behind a gateway.

use std::path::Path;

use anyhow::{Context, Result};
use engine::{Engine, EngineConfig};

pub fn load_engine(dir: &Path, config: EngineConfig) -> Result<Engine> {
    let auto = config.auto_budget();
    let engine = Engine::load(dir, config)
        .with_context(|| format!("loading the model from {}", dir.display()))?;
    let info = engine.backend().info();
    let requested = engine.config().dtype;
    let fallback = if info.dtype != requested {
        format!(" ({requested} requested: this CPU lacks AVX512-BF16)")
    } else {
        String::new()
    };
    let startup = info.startup_capture.map_or(String::new(), |t| {
        format!(
            ", {} plans captured at start-up in {t:.2?}",
            info.startup_plans
        )
    });
    let budget = engine.config().max_batch_tokens;
    let budget = if auto {
        format!("{budget} (auto: 95% of the measured peak tokens/s)")
    } else {
        budget.to_string()
    };
    eprintln!(
        "engine: {} backend ({}), {} threads, {}{fallback}, capture {}{startup}, batch budget {budget} tokens",
        info.name, info.device, info.threads, info.dtype, info.capture
    );
    Ok(engine)
}

/// `config.replicas` engines of the model in `dir`; with `threads` 0 they share the cores between them.
pub fn load_replicas(dir: &Path, mut config: EngineConfig) -> Result<Vec<Engine>> {
    let replicas = config.replicas.max(1);
    if config.threads == 0 {
        config.threads = (config.resolved_threads() / replicas).max(1);
    }
    (0..replicas)
        .map(|_| load_engine(dir, config.clone()))
        .collect()
}
