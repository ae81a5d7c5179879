//! Loading engines for the commands and the harness's targets: one, with its start-up line on stderr, or the
//! replicas behind a gateway, each line said through the caller (above a sweep's progress bars, which a bare
//! line on stderr would tear).

use std::path::Path;

use anyhow::{Context, Result};
use engine::{Engine, EngineConfig};

pub fn load_engine(dir: &Path, config: EngineConfig) -> Result<Engine> {
    load_saying(dir, config, &|line| eprintln!("{line}"))
}

/// One engine, its start-up line given to `say`.
fn load_saying(dir: &Path, config: EngineConfig, say: &dyn Fn(String)) -> Result<Engine> {
    let auto = config.auto_budget();
    let engine = Engine::load(dir, config)
        .with_context(|| format!("loading the model from {}", dir.display()))?;
    let info = engine.backend().info();
    let requested = engine.config().dtype;
    let fallback = info.dtype_note.map_or(String::new(), |why| {
        format!(" ({requested} requested: {why})")
    });
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
    say(format!(
        "engine: {} backend ({}), {} threads, {}{fallback}, capture {}{startup}, batch budget {budget} tokens",
        info.name, info.device, info.threads, info.dtype, info.capture
    ));
    Ok(engine)
}

/// `config.replicas` engines of the model in `dir`; with `threads` 0 they share the cores between them. Their
/// start-up lines go to `say`.
pub fn load_replicas(
    dir: &Path,
    mut config: EngineConfig,
    say: &dyn Fn(String),
) -> Result<Vec<Engine>> {
    let replicas = config.replicas.max(1);
    if config.threads == 0 {
        config.threads = (config.resolved_threads() / replicas).max(1);
    }
    (0..replicas)
        .map(|_| load_saying(dir, config.clone(), say))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_start_up_lines_go_to_the_caller_not_straight_to_stderr() {
        let dir = tempfile::tempdir().unwrap();
        engine::model::tiny::write_tiny_bert(dir.path(), Default::default()).unwrap();
        let lines = std::cell::RefCell::new(Vec::new());
        let config = EngineConfig {
            replicas: 2,
            threads: 1,
            ..Default::default()
        };
        load_replicas(dir.path(), config, &|l| lines.borrow_mut().push(l)).unwrap();
        let lines = lines.into_inner();
        assert_eq!(lines.len(), 2);
        assert!(
            lines.iter().all(|l| l.starts_with("engine: cpu backend")),
            "{lines:?}"
        );
    }
}
