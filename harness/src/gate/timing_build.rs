//! What the timing gate prepares: the baseline binary (a path, or a git revision built in a temporary worktree
//! and cached by commit), the model (a MiniLM-shaped random BERT, written once) and the input files.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The baseline `bench`: `against` itself when it is a file, else the git revision it names, built once with
/// `cargo build --release -p harness` in a temporary worktree and kept under the cache as `<sha>/bench`.
/// Returns the binary and how to name it.
pub fn baseline_binary(against: &str, root: &Path) -> Result<(PathBuf, String)> {
    let path = Path::new(against);
    if path.is_file() {
        let abs = path
            .canonicalize()
            .with_context(|| format!("resolving {against}"))?;
        return Ok((abs, against.to_owned()));
    }
    let out = Command::new("git")
        .current_dir(root)
        .args(["rev-parse", "--verify", "--quiet"])
        .arg(format!("{against}^{{commit}}"))
        .output()
        .context("running git")?;
    let sha = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if !out.status.success() || sha.is_empty() {
        bail!("--against {against}: neither a file nor a git revision");
    }
    let label = format!("{against} ({})", &sha[..sha.len().min(10)]);
    let cache = super::cache_dir();
    let binary = cache.join(&sha).join("bench");
    if binary.is_file() {
        eprintln!("gate timing: baseline {label} from {}", binary.display());
        return Ok((binary, label));
    }
    let worktree = cache.join(format!("worktree-{sha}-{}", std::process::id()));
    std::fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let status = Command::new("git")
        .current_dir(root)
        .args(["worktree", "add", "--detach", "--quiet"])
        .arg(&worktree)
        .arg(&sha)
        .status()
        .context("running git worktree add")?;
    if !status.success() {
        bail!("git worktree add for {label} failed");
    }
    eprintln!("gate timing: building the baseline {label} (cargo build --release -p harness; once per commit)");
    let built = Command::new("cargo")
        .current_dir(&worktree)
        .args(["build", "--release", "--quiet", "-p", "harness"])
        // Shared by every baseline build, so a second revision reuses the compiled dependencies.
        .env("CARGO_TARGET_DIR", cache.join("target"))
        .status()
        .context("running cargo");
    let copied = match built {
        Ok(s) if s.success() => {
            let dir = cache.join(&sha);
            let tmp = dir.join(format!("bench.{}", std::process::id()));
            std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::copy(cache.join("target/release/bench"), &tmp))
                .and_then(|_| std::fs::rename(&tmp, &binary))
                .with_context(|| format!("keeping the baseline binary in {}", dir.display()))
        }
        Ok(_) => Err(anyhow::anyhow!("building the baseline {label} failed")),
        Err(e) => Err(e),
    };
    let _ = Command::new("git")
        .current_dir(root)
        .args(["worktree", "remove", "--force"])
        .arg(&worktree)
        .status();
    copied?;
    Ok((binary, label))
}

/// A random BERT of all-MiniLM-L6-v2's shape (6 layers, hidden 384, 12 heads, 1536 intermediate), written once
/// to the cache: the same work per token as the real model, without a download. Its tokenizer is the tiny
/// model's (letters and a few words).
pub fn gate_model() -> Result<PathBuf> {
    let dir = super::cache_dir().join("model-minilm-shape-v1");
    if dir.join("config.json").is_file() {
        return Ok(dir);
    }
    let tmp = super::cache_dir().join(format!("model-tmp-{}", std::process::id()));
    let spec = engine::model::tiny::TinySpec {
        hidden: 384,
        layers: 6,
        heads: 12,
        intermediate: 1536,
        max_positions: 512,
        max_seq_length: 256,
        seed: 11,
    };
    engine::model::tiny::write_tiny_bert(&tmp, spec).context("writing the gate's model")?;
    if let Err(e) = std::fs::rename(&tmp, &dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another gate may have written it meanwhile.
        if !dir.join("config.json").is_file() {
            return Err(e).with_context(|| format!("moving the gate's model to {}", dir.display()));
        }
    }
    Ok(dir)
}

/// `words` words of the gate model's vocabulary: `words + 2` tokens with `[CLS]` and `[SEP]`.
fn text(words: usize, salt: usize) -> String {
    const W: [&str; 10] = [
        "the", "search", "query", "of", "and", "embed", "to", "in", "is", "a",
    ];
    (0..words)
        .map(|i| W[(i * 3 + salt) % W.len()])
        .collect::<Vec<_>>()
        .join(" ")
}

fn jsonl(texts: impl Iterator<Item = String>) -> String {
    texts
        .map(|t| serde_json::json!({ "text": t }).to_string() + "\n")
        .collect()
}

/// The benchmarks' inputs in `dir`: 32 queries of 12 tokens, 64 texts of 128 tokens, 48 passages and passages
/// x 10 for the tokenizer.
pub fn write_inputs(root: &Path, dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let passages_path = root.join("workloads/text/passages_en.jsonl");
    let passages = std::fs::read_to_string(&passages_path)
        .with_context(|| format!("reading {}", passages_path.display()))?;
    let files = [
        ("queries-1x12.jsonl", jsonl((0..32).map(|s| text(10, s)))),
        ("batch-32x128.jsonl", jsonl((0..64).map(|s| text(126, s)))),
        (
            "bulk.jsonl",
            passages
                .lines()
                .take(48)
                .map(|l| format!("{l}\n"))
                .collect(),
        ),
        ("tokenize.jsonl", passages.repeat(10)),
    ];
    for (name, content) in files {
        std::fs::write(dir.join(name), content)
            .with_context(|| format!("writing {}", dir.join(name).display()))?;
    }
    Ok(())
}
