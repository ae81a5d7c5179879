//! `y = x · Wᵀ + b (+ residual)` through cuBLASLt: bf16 operands, f32 accumulation, f32 output with the bias (and
//! the residual, as cuBLASLt's `C` with β = 1) fused into the GEMM's epilogue, or bf16 output (an operand slot under
//! `--gpu-intermediate bf16`) with neither, the caller's kernel adding the bias after.
//!
//! cuBLASLt's GELU epilogue is the tanh approximation, while BERT's `gelu` is the exact (erf) one, so GELU is not
//! fused: it runs in our `bias_act` kernel after the GEMM, which keeps the CPU backend's semantics.
//!
//! cuBLASLt is column-major. Our row-major `out[m×n]` (row stride `ld`) is the column-major `outᵀ[n×m]`, and
//! `outᵀ = W · xᵀ`: W (`[n×k]` row-major, PyTorch's layout) is the column-major `k×n` matrix read transposed, and
//! the bf16 `x` (`[m×k]` row-major, row stride `x_ld`: `k` for the dense scratch, wider for an operand slot) is the
//! column-major `k×m` one (leading dimension `x_ld`) read as is.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

use cudarc::cublaslt::result as lt;
use cudarc::cublaslt::sys;
use cudarc::driver::{CudaSlice, CudaStream};

use crate::error::{Error, Result};

/// A cuBLASLt handle and its workspace, on the backend's compute stream.
pub struct Lt {
    handle: sys::cublasLtHandle_t,
    workspace: CudaSlice<u8>,
    stream: Arc<CudaStream>,
    /// Each GEMM shape's descriptors and the algorithm the heuristic picked for it, made once, in an eager run (a
    /// capture is preceded by one on the same buffers): asking the heuristic while the stream captures fails on
    /// some cuBLASLt versions, and the descriptors are a dozen cuBLASLt calls that an eager forward made, and
    /// undid, for every GEMM it launched.
    prepared: Mutex<HashMap<Key, Prepared>>,
}

/// Shapes prepared at most: a ladder's shapes many times over.
const PREPARED_KEPT: usize = 4096;

/// What the descriptors and the heuristic's choice depend on: the shape, the epilogue, β, the output's type, the
/// strides and the alignments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    m: usize,
    n: usize,
    k: usize,
    bias: bool,
    residual: bool,
    out_bf16: bool,
    x_ld: usize,
    c_ld: usize,
    out_ld: usize,
    /// Of W, x, C and the output, in bytes.
    aligns: [u32; 4],
}

// SAFETY: a cuBLASLt handle (and descriptors) may be used from any thread; the backend uses them from its compute
// thread only.
unsafe impl Send for Lt {}
// SAFETY: as above; `&Lt` only enqueues work on the stream, which the driver serialises, and the descriptors are
// reached through the mutex.
unsafe impl Sync for Lt {}

/// One GEMM's operands as device addresses (a view's address already includes its column offset).
pub struct Gemm {
    /// Tokens (rows of `x` and `out`), columns of `out`, inner dimension.
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// bf16 `x` and its row stride (at least `k`).
    pub x: u64,
    pub x_ld: usize,
    /// bf16 weight `[n×k]`.
    pub w: u64,
    /// f32 bias `[n]`, fused as the epilogue (f32 output only).
    pub bias: Option<u64>,
    /// f32 residual `(address, row stride)` added through β = 1 (f32 output only).
    pub residual: Option<(u64, usize)>,
    /// Output `(address, row stride)`, f32 or, with `out_bf16`, bf16.
    pub out: (u64, usize),
    pub out_bf16: bool,
}

impl Gemm {
    /// `C`: the residual where there is one (β = 1), else the output (β = 0).
    fn c(&self) -> (u64, usize) {
        self.residual.unwrap_or(self.out)
    }

    /// Bytes per element of `C` and the output.
    fn out_elem(&self) -> usize {
        if self.out_bf16 {
            2
        } else {
            4
        }
    }

    fn key(&self) -> Key {
        let (c_ptr, c_ld) = self.c();
        let e = self.out_elem();
        // cuBLASLt assumes 256-byte aligned operands unless told otherwise, and a view of columns (or a row
        // stride) may give less: each operand's address and stride say what it really allows.
        let aligns = [
            alignment(self.w, self.k * 2),
            alignment(self.x, self.x_ld * 2),
            alignment(c_ptr, c_ld * e),
            alignment(self.out.0, self.out.1 * e),
        ];
        Key {
            m: self.m,
            n: self.n,
            k: self.k,
            bias: self.bias.is_some(),
            residual: self.residual.is_some(),
            out_bf16: self.out_bf16,
            x_ld: self.x_ld,
            c_ld,
            out_ld: self.out.1,
            aligns,
        }
    }
}

fn err(what: &str) -> impl Fn(lt::CublasError) -> Error + '_ {
    move |e| Error::Device(format!("cuBLASLt {what}: {e:?}"))
}

/// A GEMM shape's matmul descriptor, its layouts of A, B, C and D, and the algorithm picked for it. Destroys the
/// descriptors when dropped (evicted, or on an error while it is made).
struct Prepared {
    desc: sys::cublasLtMatmulDesc_t,
    /// Null until made.
    layouts: [sys::cublasLtMatrixLayout_t; 4],
    /// Zeros until the heuristic fills it.
    algo: sys::cublasLtMatmulAlgo_t,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        // SAFETY: each was created once by cuBLASLt in `prepare` and is destroyed once, here.
        unsafe {
            for &l in self.layouts.iter().filter(|l| !l.is_null()) {
                let _ = lt::destroy_matrix_layout(l);
            }
            let _ = lt::destroy_matmul_desc(self.desc);
        }
    }
}

/// A matmul preference, destroyed when dropped.
struct Preference(sys::cublasLtMatmulPreference_t);

impl Drop for Preference {
    fn drop(&mut self) {
        // SAFETY: created once in `prepare`, destroyed once here.
        let _ = unsafe { lt::destroy_matmul_pref(self.0) };
    }
}

impl Lt {
    /// 32 MiB of workspace on Hopper and later, 4 MiB before (NVIDIA's recommendation).
    pub fn new(stream: Arc<CudaStream>, compute_major: i32) -> Result<Self> {
        let handle = lt::create_handle().map_err(err("create"))?;
        let bytes = if compute_major >= 9 {
            32 << 20
        } else {
            4 << 20
        };
        let workspace = stream
            .alloc_zeros::<u8>(bytes)
            .map_err(|e| Error::Device(format!("cuBLASLt workspace: {e:?}")))?;
        Ok(Lt {
            handle,
            workspace,
            stream,
            prepared: Mutex::default(),
        })
    }

    /// Makes the descriptors of `g`'s shape (`key`) and asks the heuristic for its algorithm.
    fn prepare(&self, g: &Gemm, key: &Key) -> Result<Prepared> {
        use sys::cublasLtMatmulDescAttributes_t as A;
        use sys::cudaDataType_t::{CUDA_R_16BF, CUDA_R_32F};
        let desc = lt::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, CUDA_R_32F)
            .map_err(err("matmul desc"))?;
        let mut p = Prepared {
            desc,
            layouts: [std::ptr::null_mut(); 4],
            algo: sys::cublasLtMatmulAlgo_t { data: [0; 8] },
        };
        // cublasOperation_t, a C enum (int32): CUBLAS_OP_T = 1.
        let transpose: i32 = 1;
        let epilogue = if g.bias.is_some() {
            sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS
        } else {
            sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT
        };
        // SAFETY: each attribute buffer is a live value of the type and size cuBLASLt documents for it; the
        // descriptor is live (owned by `p`).
        unsafe {
            lt::set_matmul_desc_attribute(
                p.desc,
                A::CUBLASLT_MATMUL_DESC_TRANSA,
                (&transpose as *const i32).cast(),
                size_of::<i32>(),
            )
            .map_err(err("transa"))?;
            lt::set_matmul_desc_attribute(
                p.desc,
                A::CUBLASLT_MATMUL_DESC_EPILOGUE,
                (&epilogue as *const sys::cublasLtEpilogue_t).cast(),
                size_of::<sys::cublasLtEpilogue_t>(),
            )
            .map_err(err("epilogue"))?;
        }
        // The heuristic sees a real bias pointer, as it did when descriptors were made per call.
        set_bias(&p, g)?;
        let (m, n, k) = (g.m as u64, g.n as u64, g.k as u64);
        let c_ld = g.c().1;
        let out_type = if g.out_bf16 { CUDA_R_16BF } else { CUDA_R_32F };
        // A = W: column-major k×n (ld k), transposed; B = x: column-major k×m (ld x_ld); C, D: column-major n×m.
        for (slot, (ty, rows, cols, ld)) in p.layouts.iter_mut().zip([
            (CUDA_R_16BF, k, n, g.k),
            (CUDA_R_16BF, k, m, g.x_ld),
            (out_type, n, m, c_ld),
            (out_type, n, m, g.out.1),
        ]) {
            *slot = lt::create_matrix_layout(ty, rows, cols, ld as i64).map_err(err("layout"))?;
        }
        let pref = Preference(lt::create_matmul_pref().map_err(err("preference"))?);
        let ws = self.workspace.len();
        use sys::cublasLtMatmulPreferenceAttributes_t as P;
        let aligns = key.aligns;
        // SAFETY: the preference is live (owned by `pref`); each value is a live usize or u32, the types cuBLASLt
        // documents for these attributes; the descriptors and layouts are live (owned by `p`).
        unsafe {
            lt::set_matmul_pref_attribute(
                pref.0,
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws as *const usize).cast(),
                size_of::<usize>(),
            )
            .map_err(err("workspace preference"))?;
            for (attr, bytes) in [
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
            ]
            .into_iter()
            .zip(aligns)
            {
                lt::set_matmul_pref_attribute(
                    pref.0,
                    attr,
                    (&bytes as *const u32).cast(),
                    size_of::<u32>(),
                )
                .map_err(err("alignment preference"))?;
            }
            let [a, b, c, d] = p.layouts;
            let h = lt::get_matmul_algo_heuristic(self.handle, p.desc, a, b, c, d, pref.0)
                .map_err(err("no algorithm for this shape"))?;
            p.algo = h.algo;
        }
        Ok(p)
    }

    /// Enqueues one GEMM on the compute stream (or records it, under stream capture).
    pub fn linear(&self, g: &Gemm) -> Result<()> {
        if g.out_bf16 && (g.bias.is_some() || g.residual.is_some()) {
            return Err(Error::Device(
                "a bf16-output GEMM takes no bias or residual epilogue".into(),
            ));
        }
        let key = g.key();
        let mut prepared = self
            .prepared
            .lock()
            .map_err(|_| Error::Device("cuBLASLt descriptor cache poisoned".into()))?;
        if !prepared.contains_key(&key) {
            // Batches past the ladder bring a new `m` each: bound the cache. Every GEMM of one forward has the
            // same `m`, so keeping that `m`'s entries keeps what the forward in progress made: a capture's eager
            // run never loses what its capture will ask for.
            if prepared.len() >= PREPARED_KEPT {
                prepared.retain(|k, _| k.m == g.m);
            }
            let p = self.prepare(g, &key)?;
            prepared.insert(key, p);
        }
        let p = &prepared[&key];
        let [a, b, c, d] = p.layouts;
        let (c_ptr, _) = g.c();
        let (alpha, beta) = (1.0f32, if g.residual.is_some() { 1.0f32 } else { 0.0 });
        let ws = self.workspace.len();
        let (ws_ptr, _sync) = cudarc::driver::DevicePtr::device_ptr(&self.workspace, &self.stream);
        set_bias(p, g)?;
        // SAFETY: the descriptor and layouts are live (the map owns them, and they are evicted only under the lock
        // held here); the matmul takes the descriptor's values (the bias pointer just set) when it is enqueued or
        // recorded, so a later GEMM setting another bias pointer does not change this one. The addresses are
        // device memory of the shapes the layouts describe (the caller's views, checked by the op against the
        // matrices' extents), the workspace is ours and its size is what the preference allowed.
        unsafe {
            lt::matmul(
                self.handle,
                p.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                g.w as *const c_void,
                a,
                g.x as *const c_void,
                b,
                c_ptr as *const c_void,
                c,
                g.out.0 as *mut c_void,
                d,
                &p.algo,
                ws_ptr as *mut c_void,
                ws,
                self.stream.cu_stream() as sys::cudaStream_t,
            )
            .map_err(err("matmul"))
        }
    }
}

/// Points the epilogue of `p` (made for `g`'s key) at `g`'s bias, if it has one.
fn set_bias(p: &Prepared, g: &Gemm) -> Result<()> {
    let Some(bias) = &g.bias else {
        return Ok(());
    };
    // SAFETY: the descriptor is live (owned by `p`); the value is a live u64, the attribute's documented type.
    unsafe {
        lt::set_matmul_desc_attribute(
            p.desc,
            sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
            (bias as *const u64).cast(),
            size_of::<u64>(),
        )
    }
    .map_err(err("bias"))
}

/// The alignment, in bytes, that both an operand's address and its row stride (in bytes) have: the largest power of
/// two dividing both, at most 256 (what cuBLASLt asks at most).
fn alignment(addr: u64, stride_bytes: usize) -> u32 {
    let tz = (addr | stride_bytes as u64 | 256).trailing_zeros();
    1 << tz
}

impl Drop for Lt {
    fn drop(&mut self) {
        // SAFETY: created in `new`, destroyed once here.
        let _ = unsafe { lt::destroy_handle(self.handle) };
    }
}

#[cfg(test)]
mod tests {
    use super::{alignment, Gemm};

    #[test]
    fn gemms_share_prepared_descriptors_only_where_shape_epilogue_types_and_alignments_agree() {
        let base = 0x7f00_0000_0000u64;
        let g =
            |x: u64, bias: Option<u64>, residual: Option<(u64, usize)>, out: (u64, usize)| Gemm {
                m: 12,
                n: 384,
                k: 384,
                x,
                x_ld: 384,
                w: base + (1 << 20),
                bias,
                residual,
                out,
                out_bf16: false,
            };
        let plain = g(base, Some(base + 4096), None, (base + (2 << 20), 384));
        // Other layers' weights, biases and buffers at the same alignments: the same descriptors.
        let moved = Gemm {
            w: base + (8 << 20),
            ..g(base + 512, Some(base + 8192), None, (base + (4 << 20), 384))
        };
        assert_eq!(plain.key(), moved.key());
        // An output 32 floats into its buffer (128-byte aligned, all else equal), a residual, no bias, another
        // row count: not.
        let view = g(base, Some(base + 4096), None, (base + (2 << 20) + 128, 384));
        let residual = g(base, Some(base), Some((base, 384)), (base, 384));
        let no_bias = g(base, None, None, (base + (2 << 20), 384));
        let taller = Gemm {
            m: 16,
            ..g(base, Some(base), None, (base, 384))
        };
        // The same GEMM writing bf16 (an operand slot), or reading its input from a wider bf16 matrix: not.
        let bf16_out = Gemm {
            out_bf16: true,
            ..g(base, None, None, (base + (2 << 20), 384))
        };
        let strided_x = Gemm {
            x_ld: 768,
            ..g(base, Some(base + 4096), None, (base + (2 << 20), 384))
        };
        // Only the output's type differs from `no_bias`.
        assert_ne!(bf16_out.key(), no_bias.key());
        for other in [view, residual, no_bias, taller, bf16_out, strided_x] {
            assert_ne!(plain.key(), other.key());
        }
    }

    #[test]
    fn alignment_is_what_both_address_and_stride_allow_up_to_256() {
        assert_eq!(alignment(0x7f00_0000_0000, 1536 * 2), 256);
        // A view 32 floats into a 384-wide row: 128-byte offset.
        assert_eq!(alignment(0x7f00_0000_0000 + 128, 384 * 4), 128);
        // An odd stride of floats: 4 bytes.
        assert_eq!(alignment(0x7f00_0000_0000, 37 * 4), 4);
        assert_eq!(alignment(0x7f00_0000_0002, 1024), 2);
    }
}
