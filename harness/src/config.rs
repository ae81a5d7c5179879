//! The engine settings of every command that loads a model: `--config FILE` (a whole [`EngineConfig`] in TOML) and
//! one flag per `EngineConfig` field, named as its knob (`--max-batch-tokens` is `max_batch_tokens`). Only the flags
//! given on the command line are layered over the file (or the defaults): a flag's default never hides the file.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, FromArgMatches};
use engine::{Engine, EngineConfig};
use serde_json::Value;

#[derive(Args, Debug)]
struct Flags {
    /// Model directory (sentence-transformers layout), or `synthetic:NAME` for a seeded random-weight model of a
    /// real shape written into the cache on first use (`qwen3-0.6b`, `qwen3-0.6b-bidirectional`, `qwen3-tiny`);
    /// default: all-MiniLM-L6-v2, fetched on first use.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Engine settings from a TOML file (keys: the flags' names with `_`, as `bench --help` lists them); flags
    /// given as well override it.
    #[arg(long = "config", value_name = "FILE")]
    config_file: Option<PathBuf>,
    #[command(flatten)]
    engine: EngineConfig,
    /// The same as `--overlap false`.
    #[arg(long, conflicts_with = "overlap")]
    no_overlap: bool,
}

/// Engine settings shared by every command that loads a model: the parsed flags, and which were given.
#[derive(Debug)]
pub struct EngineArgs {
    flags: Flags,
    /// `EngineConfig` fields given on the command line.
    given: BTreeSet<String>,
}

impl FromArgMatches for EngineArgs {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        let given = matches
            .ids()
            .map(|id| id.as_str())
            .filter(|id| matches.value_source(id) == Some(ValueSource::CommandLine))
            .map(str::to_owned)
            .collect();
        Ok(EngineArgs {
            flags: Flags::from_arg_matches(matches)?,
            given,
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for EngineArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        Flags::augment_args(cmd)
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Flags::augment_args_for_update(cmd)
    }
}

impl EngineArgs {
    pub fn model_dir(&self) -> Result<PathBuf> {
        match &self.flags.model {
            Some(dir) => match engine::model::synthetic::resolve(&dir.to_string_lossy()) {
                Some(synthetic) => Ok(synthetic?),
                None => Ok(dir.clone()),
            },
            None => Ok(engine::model::fetch::default_model_dir()?),
        }
    }

    /// The file's settings (or the defaults) with the flags given on top, validated.
    pub fn config(&self) -> Result<EngineConfig> {
        let base = match &self.flags.config_file {
            Some(path) => EngineConfig::from_toml_file(path)?,
            None => EngineConfig::default(),
        };
        let mut config = layer(base, &self.flags.engine, &self.given)?;
        if self.flags.no_overlap {
            config.overlap = false;
        }
        config.validate()?;
        Ok(config)
    }

    /// Whether any engine setting was given, in a file or a flag (an external target takes none).
    pub fn any_setting(&self) -> bool {
        self.flags.config_file.is_some()
            || self.flags.no_overlap
            || field_names().iter().any(|f| self.given.contains(f))
    }

    pub fn load(&self) -> Result<Engine> {
        crate::engines::load_engine(&self.model_dir()?, self.config()?)
    }
}

/// The serde names of `EngineConfig`'s fields, which are also its flags' ids and its knobs' names.
pub fn field_names() -> Vec<String> {
    match serde_json::to_value(EngineConfig::default()) {
        Ok(Value::Object(map)) => map.keys().cloned().collect(),
        _ => Vec::new(),
    }
}

/// `base` with the fields named in `given` taken from `flags`.
fn layer(
    base: EngineConfig,
    flags: &EngineConfig,
    given: &BTreeSet<String>,
) -> Result<EngineConfig> {
    let (Value::Object(mut out), Value::Object(flags)) =
        (serde_json::to_value(base)?, serde_json::to_value(flags)?)
    else {
        bail!("an engine configuration is not a JSON object");
    };
    for (name, value) in flags {
        if given.contains(&name) {
            out.insert(name, value);
        }
    }
    serde_json::from_value(Value::Object(out)).context("layering the flags over the configuration")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        engine: EngineArgs,
    }

    fn parse(args: &[&str]) -> EngineArgs {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .unwrap()
            .engine
    }

    #[test]
    fn every_config_field_is_a_flag_of_the_same_name() {
        let command = Cli::command();
        let longs: Vec<&str> = command
            .get_arguments()
            .filter_map(|a| a.get_long())
            .collect();
        let names = field_names();
        assert!(names.contains(&"replicas".to_owned()), "{names:?}");
        for name in names {
            let flag = name.replace('_', "-");
            assert!(
                longs.contains(&flag.as_str()),
                "--{flag} missing: {longs:?}"
            );
        }
    }

    #[test]
    fn flags_given_override_the_file_and_defaults_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("engine.toml");
        let file = EngineConfig {
            max_batch_tokens: 1024,
            threads: 3,
            overlap: false,
            capture: engine::plan::CaptureMode::Off,
            replicas: 2,
            ..EngineConfig::default()
        };
        std::fs::write(&path, file.to_toml().unwrap()).unwrap();
        let file_arg = path.to_str().unwrap();

        // Nothing given: the file, whole (the flags' defaults, 8192 tokens and overlap on, do not win).
        assert_eq!(parse(&["--config", file_arg]).config().unwrap(), file);
        // Given flags win, whatever their order relative to --config.
        let config = parse(&[
            "--max-batch-tokens",
            "256",
            "--config",
            file_arg,
            "--overlap",
            "true",
        ])
        .config()
        .unwrap();
        assert_eq!((config.max_batch_tokens, config.overlap), (256, true));
        assert_eq!((config.threads, config.replicas), (3, 2));
        assert_eq!(config.capture, engine::plan::CaptureMode::Off);
        // Without a file, the defaults with the flags on top.
        let config = parse(&[
            "--no-overlap",
            "--max-batch-seqs",
            "8",
            "--max-seq-length",
            "64",
        ])
        .config()
        .unwrap();
        assert!(!config.overlap);
        assert_eq!(
            (config.max_batch_seqs, config.max_seq_length),
            (8, Some(64))
        );
        assert_eq!(
            config.max_batch_tokens,
            EngineConfig::default().max_batch_tokens
        );
    }

    #[test]
    fn capture_eager_is_read_as_startup() {
        let config = parse(&["--capture", "eager"]).config().unwrap();
        assert_eq!(config.capture, engine::plan::CaptureMode::Startup);
        let config = parse(&["--capture", "startup"]).config().unwrap();
        assert_eq!(config.capture, engine::plan::CaptureMode::Startup);
    }

    #[test]
    fn a_bad_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "max_batch_tokens = 256\nbatch_size = 3\n").unwrap();
        let e = format!(
            "{:#}",
            parse(&["--config", path.to_str().unwrap()])
                .config()
                .unwrap_err()
        );
        assert!(e.contains("bad.toml") && e.contains("batch_size"), "{e}");
        let e = format!(
            "{:#}",
            parse(&["--config", "/nonexistent.toml"])
                .config()
                .unwrap_err()
        );
        assert!(e.contains("/nonexistent.toml"), "{e}");
    }
}
