//! The kernels of `kernels/*.cu`, compiled by NVRTC for the device's architecture and cached on disk.
//!
//! Each `.cu` file is one program with `common.cuh` prepended. Its binary (a CUBIN for `sm_XY`) is cached under
//! the key `sha256(program text) · arch · NVRTC version`, so an edited kernel, another GPU generation or another
//! NVRTC all compile afresh and never load a stale binary. A compile fails on any error **or warning**: NVRTC's log
//! of a clean compile is empty, and anything in it is treated as a failure.

use std::ffi::CString;
use std::path::{Path, PathBuf};

use cudarc::nvrtc::{result, sys};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// One NVRTC program: a kernel file and the functions it defines.
#[derive(Clone, Copy, Debug)]
pub struct Source {
    pub file: &'static str,
    pub functions: &'static [&'static str],
    text: &'static str,
}

const COMMON: &str = include_str!("../../../../kernels/common.cuh");

/// Every kernel file, with the functions the backend loads from it.
pub const SOURCES: &[Source] = &[
    Source {
        file: "embed.cu",
        functions: &["embed"],
        text: include_str!("../../../../kernels/embed.cu"),
    },
    Source {
        file: "norm.cu",
        functions: &["layer_norm", "rms_norm"],
        text: include_str!("../../../../kernels/norm.cu"),
    },
    Source {
        file: "elementwise.cu",
        functions: &[
            "bias_act",
            "bias_act_bf16",
            "glu",
            "glu_bf16",
            "rotary",
            "to_bf16",
        ],
        text: include_str!("../../../../kernels/elementwise.cu"),
    },
    Source {
        file: "attention.cu",
        functions: &["attention", "attention_wide"],
        text: include_str!("../../../../kernels/attention.cu"),
    },
    Source {
        file: "attention_mma.cu",
        functions: &["attention_mma", "attention_mma_wide"],
        text: include_str!("../../../../kernels/attention_mma.cu"),
    },
    Source {
        file: "pool.cu",
        functions: &["pool"],
        text: include_str!("../../../../kernels/pool.cu"),
    },
    Source {
        file: "quantize.cu",
        functions: &["quantize_int8"],
        text: include_str!("../../../../kernels/quantize.cu"),
    },
];

impl Source {
    /// The program NVRTC compiles: the sizes the host and the kernels must agree on (defined from the host's
    /// constants, so a tile list or a shared-memory size can never disagree with the kernel), the shared helpers,
    /// then the file (line numbers kept for the log).
    pub fn program(&self) -> String {
        format!(
            "#define QUERIES {}\n#define KEYS {}\n#define WARPS {}\n#define HEAD_DIM_NARROW {}\n\
             #define HEAD_DIM_MAX {}\n#define MMA_KEYS {}\n#define MMA_WARPS {}\n#define MMA_PAD {}\n\
             #line 1 \"common.cuh\"\n{COMMON}\n#line 1 \"{}\"\n{}",
            super::inputs::QUERY_TILE,
            super::ops::ATTENTION_KEYS,
            super::ops::ATTENTION_WARPS,
            super::ops::HEAD_DIM_NARROW,
            super::ops::HEAD_DIM_MAX,
            super::ops::MMA_KEYS,
            super::ops::MMA_WARPS,
            super::ops::MMA_PAD,
            self.file,
            self.text
        )
    }
}

/// A GPU architecture, `sm_{major}{minor}`: what NVRTC compiles for, and part of the cache key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arch {
    pub major: u32,
    pub minor: u32,
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "sm_{}{}", self.major, self.minor)
    }
}

/// Whether the NVRTC library can be loaded (cudarc's loader looks up `libnvrtc.so`, `.so.13`, `.so.12`, … on the
/// dynamic loader's path, `LD_LIBRARY_PATH` included). cudarc panics on a call without it, so every entry point
/// here asks first.
pub fn available() -> bool {
    // SAFETY: only tries to dlopen the library under its candidate names; nothing is called.
    unsafe { sys::is_culib_present() }
}

fn require() -> Result<()> {
    if available() {
        Ok(())
    } else {
        Err(Error::Device(
            "NVRTC (libnvrtc.so) was not found on the library path (LD_LIBRARY_PATH); install the CUDA toolkit's \
             NVRTC or PyPI's nvidia-cuda-nvrtc"
                .into(),
        ))
    }
}

/// NVRTC's version, `(major, minor)`.
pub fn version() -> Result<(i32, i32)> {
    require()?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: the library is present (checked above); both pointers are valid for one write.
    unsafe { sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| Error::Device(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// Compiles `source` for `arch` and returns its CUBIN. Fails with NVRTC's log on an error, and on a clean compile
/// whose log is not empty (a warning).
pub fn compile(source: &Source, arch: Arch) -> Result<Vec<u8>> {
    let (cubin, log) = compile_with(source, arch, &[])?;
    if log.is_empty() {
        Ok(cubin)
    } else {
        Err(Error::Device(format!(
            "NVRTC, {} for {arch}: warnings (treated as errors): {log}",
            source.file
        )))
    }
}

/// ptxas's report of every kernel of `source` compiled for `arch`: registers, stack frame and spills per entry
/// function (`--ptxas-options=-v`), as NVRTC's log gives it.
pub fn ptxas_report(source: &Source, arch: Arch) -> Result<String> {
    compile_with(source, arch, &["--ptxas-options=-v"]).map(|(_, log)| log)
}

/// Compiles `source` for `arch` with `extra` options; its CUBIN and NVRTC's log. Fails on a compile error.
fn compile_with(source: &Source, arch: Arch, extra: &[&str]) -> Result<(Vec<u8>, String)> {
    require()?;
    let fail = |what: &str, detail: String| {
        Error::Device(format!(
            "NVRTC, {} for {arch}: {what}: {detail}",
            source.file
        ))
    };
    let text = CString::new(source.program()).map_err(|e| fail("source", e.to_string()))?;
    let name = CString::new(source.file).map_err(|e| fail("name", e.to_string()))?;
    let prog =
        result::create_program(&text, Some(&name)).map_err(|e| fail("create", format!("{e:?}")))?;
    let mut options = vec![
        format!("--gpu-architecture={arch}"),
        "--std=c++17".to_owned(),
    ];
    options.extend(extra.iter().map(|o| o.to_string()));
    // SAFETY: `prog` was created just above and is destroyed once, below; `text` and `name` outlive it.
    let compiled = unsafe { result::compile_program(prog, &options) };
    // SAFETY: as above.
    let log = unsafe { result::get_program_log(prog) }
        .map(|l| {
            let bytes: Vec<u8> = l
                .iter()
                .take_while(|&&c| c != 0)
                .map(|&c| c as u8)
                .collect();
            String::from_utf8_lossy(&bytes).trim().to_owned()
        })
        .unwrap_or_default();
    let cubin = match compiled {
        Err(e) => Err(fail("compile error", format!("{e:?}\n{log}"))),
        // SAFETY: as above; the program compiled.
        Ok(()) => unsafe { cubin(prog) }
            .map(|c| (c, log))
            .map_err(|e| fail("CUBIN", format!("{e:?}"))),
    };
    // SAFETY: as above; not used after this.
    let _ = unsafe { result::destroy_program(prog) };
    cubin
}

/// The compiled binary of `prog`.
///
/// # Safety
/// `prog` is a live program that compiled for a real architecture (`sm_XY`).
unsafe fn cubin(prog: sys::nvrtcProgram) -> std::result::Result<Vec<u8>, result::NvrtcError> {
    let mut size = 0usize;
    // SAFETY: the caller's contract; `size` is valid for one write.
    unsafe { sys::nvrtcGetCUBINSize(prog, &mut size) }.result()?;
    let mut bin = vec![0u8; size];
    // SAFETY: `bin` holds the `size` bytes NVRTC said it writes.
    unsafe { sys::nvrtcGetCUBIN(prog, bin.as_mut_ptr().cast()) }.result()?;
    Ok(bin)
}

/// The cache key of one program's binary: its text, the architecture and NVRTC's version, hashed.
pub fn cache_key(program: &str, arch: Arch, nvrtc: (i32, i32)) -> String {
    let mut h = Sha256::new();
    h.update(program.as_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
    format!("{hex}-{arch}-nvrtc{}.{}", nvrtc.0, nvrtc.1)
}

/// Compiled kernels on disk, one file per cache key. Writes go through a temporary file and a rename, so a
/// concurrent start-up or a crash never leaves a half-written binary under a valid key.
pub struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        DiskCache { dir: dir.into() }
    }

    /// `$EMBED_WORKBENCH_CACHE/kernels` (see [`crate::model::fetch::cache_root`]).
    pub fn default_location() -> Self {
        DiskCache::new(crate::model::fetch::cache_root().join("kernels"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.cubin"))
    }

    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        std::fs::read(self.path(key)).ok().filter(|b| !b.is_empty())
    }

    pub fn put(&self, key: &str, binary: &[u8]) -> Result<()> {
        let path = self.path(key);
        let io = |e| Error::io(&path)(e);
        std::fs::create_dir_all(&self.dir).map_err(io)?;
        let tmp = self.dir.join(format!(".{key}.{}.tmp", std::process::id()));
        std::fs::write(&tmp, binary).map_err(|e| Error::io(&tmp)(e))?;
        std::fs::rename(&tmp, &path).map_err(io)
    }

    /// The binary of `source` for `arch`: from the cache, or compiled (and cached) when the key is new. Says which
    /// through `compiled`.
    pub fn load_or_compile(
        &self,
        source: &Source,
        arch: Arch,
        nvrtc: (i32, i32),
    ) -> Result<(Vec<u8>, bool)> {
        self.get_or(&cache_key(&source.program(), arch, nvrtc), || {
            compile(source, arch)
        })
    }

    fn get_or(&self, key: &str, make: impl FnOnce() -> Result<Vec<u8>>) -> Result<(Vec<u8>, bool)> {
        if let Some(bin) = self.get(key) {
            return Ok((bin, false));
        }
        let bin = make()?;
        // A cache that cannot be written costs the next start-up a compile, nothing more.
        let _ = self.put(key, &bin);
        Ok((bin, true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SM90: Arch = Arch { major: 9, minor: 0 };
    const SM80: Arch = Arch { major: 8, minor: 0 };

    #[test]
    fn the_key_changes_with_the_source_the_arch_and_nvrtc() {
        let p = SOURCES[0].program();
        let k = cache_key(&p, SM90, (13, 0));
        assert_eq!(k, cache_key(&p, SM90, (13, 0)), "the key is deterministic");
        assert_ne!(k, cache_key(&format!("{p} "), SM90, (13, 0)));
        assert_ne!(k, cache_key(&p, SM80, (13, 0)));
        assert_ne!(k, cache_key(&p, SM90, (12, 9)));
        assert!(k.ends_with("-sm_90-nvrtc13.0"), "{k}");
    }

    #[test]
    fn every_program_has_the_host_sizes_the_shared_helpers_and_a_distinct_key() {
        let keys: std::collections::HashSet<_> = SOURCES
            .iter()
            .map(|s| {
                let p = s.program();
                assert!(p.contains(COMMON) && p.contains(s.text), "{}", s.file);
                // The sizes the host's tile list and shared-memory bound use, as the kernels are given them.
                assert!(
                    p.starts_with(&format!(
                        "#define QUERIES {}\n",
                        super::super::inputs::QUERY_TILE
                    )),
                    "{}",
                    s.file
                );
                for f in s.functions {
                    assert!(
                        s.text.contains(&format!("void {f}("))
                            || s.text.contains(&format!("\n    {f}("))
                            || s.text.contains(&format!("ATTENTION_ENTRY({f}, ")),
                        "{} does not define {f}",
                        s.file
                    );
                }
                cache_key(&p, SM90, (13, 0))
            })
            .collect();
        assert_eq!(keys.len(), SOURCES.len());
    }

    #[test]
    fn a_cached_binary_is_reused_and_a_new_key_compiles() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(dir.path().join("kernels"));
        let mut compiles = 0;
        let mut make = |bin: &'static [u8]| {
            compiles += 1;
            Ok(bin.to_vec())
        };
        let (b, fresh) = cache.get_or("k1", || make(b"one")).unwrap();
        assert_eq!((b.as_slice(), fresh), (&b"one"[..], true));
        let (b, fresh) = cache.get_or("k1", || make(b"other")).unwrap();
        assert_eq!(
            (b.as_slice(), fresh),
            (&b"one"[..], false),
            "reused, not recompiled"
        );
        let (b, fresh) = cache.get_or("k2", || make(b"two")).unwrap();
        assert_eq!((b.as_slice(), fresh), (&b"two"[..], true));
        assert_eq!(compiles, 2);
        // No temporary file is left behind.
        let names: Vec<_> = std::fs::read_dir(cache.dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
    }

    #[test]
    fn an_empty_cache_file_is_a_miss_and_a_failed_compile_caches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache::new(dir.path());
        std::fs::write(dir.path().join("k.cubin"), b"").unwrap();
        let err = cache.get_or("k", || Err(Error::Device("no".into())));
        assert!(err.is_err());
        assert!(cache.get("k").is_none());
        let (b, fresh) = cache.get_or("k", || Ok(vec![7])).unwrap();
        assert_eq!((b, fresh), (vec![7], true));
    }
}
