//! `y = x · Wᵀ + b (+ residual)` through cuBLASLt: bf16 operands, f32 accumulation and output, the bias (and the
//! residual, as cuBLASLt's `C` with β = 1) fused into the GEMM's epilogue.
//!
//! cuBLASLt's GELU epilogue is the tanh approximation, while BERT's `gelu` is the exact (erf) one, so GELU is not
//! fused: it runs in our `bias_act` kernel after the GEMM, which keeps the CPU backend's semantics.
//!
//! cuBLASLt is column-major. Our row-major `out[m×n]` (row stride `ld`) is the column-major `outᵀ[n×m]`, and
//! `outᵀ = W · xᵀ`: W (`[n×k]` row-major, PyTorch's layout) is the column-major `k×n` matrix read transposed, and
//! the dense bf16 copy of `x` (`[m×k]` row-major) is the column-major `k×m` one read as is.

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
    /// The algorithm the heuristic picked for each GEMM shape. Asked once, in an eager run (a capture is preceded
    /// by one on the same buffers): asking while the stream captures fails on some cuBLASLt versions, and costs
    /// more than a small GEMM.
    algos: Mutex<HashMap<AlgoKey, sys::cublasLtMatmulAlgo_t>>,
}

/// Cached algorithms at most: a ladder's shapes many times over.
const ALGOS_KEPT: usize = 4096;

/// What the heuristic's choice depends on: the shape, the epilogue, β, the strides and the alignments.
type AlgoKey = (usize, usize, usize, bool, bool, usize, usize, [u32; 4]);

// SAFETY: a cuBLASLt handle may be used from any thread; the backend uses it from its compute thread only.
unsafe impl Send for Lt {}
// SAFETY: as above; `&Lt` only enqueues work on the stream, which the driver serialises.
unsafe impl Sync for Lt {}

/// One GEMM's operands as device addresses (a view's address already includes its column offset).
pub struct Gemm {
    /// Tokens (rows of `x` and `out`), columns of `out`, inner dimension.
    pub m: usize,
    pub n: usize,
    pub k: usize,
    /// Dense bf16 `x`, row stride `k`.
    pub x: u64,
    /// bf16 weight `[n×k]`.
    pub w: u64,
    /// f32 bias `[n]`, fused as the epilogue.
    pub bias: Option<u64>,
    /// f32 residual `(address, row stride)` added through β = 1.
    pub residual: Option<(u64, usize)>,
    /// f32 output `(address, row stride)`.
    pub out: (u64, usize),
}

fn err(what: &str) -> impl Fn(lt::CublasError) -> Error + '_ {
    move |e| Error::Device(format!("cuBLASLt {what}: {e:?}"))
}

/// Destroys what it holds when dropped, so every return path frees the descriptors.
struct Descriptors {
    desc: sys::cublasLtMatmulDesc_t,
    layouts: Vec<sys::cublasLtMatrixLayout_t>,
    pref: Option<sys::cublasLtMatmulPreference_t>,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each was created once by cuBLASLt below and is destroyed once, here.
        unsafe {
            for &l in &self.layouts {
                let _ = lt::destroy_matrix_layout(l);
            }
            if let Some(p) = self.pref {
                let _ = lt::destroy_matmul_pref(p);
            }
            let _ = lt::destroy_matmul_desc(self.desc);
        }
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
            algos: Mutex::default(),
        })
    }

    /// Enqueues one GEMM on the compute stream (or records it, under stream capture).
    pub fn linear(&self, g: &Gemm) -> Result<()> {
        use sys::cublasLtMatmulDescAttributes_t as A;
        use sys::cudaDataType_t::{CUDA_R_16BF, CUDA_R_32F};
        let desc = lt::create_matmul_desc(sys::cublasComputeType_t::CUBLAS_COMPUTE_32F, CUDA_R_32F)
            .map_err(err("matmul desc"))?;
        let mut d = Descriptors {
            desc,
            layouts: Vec::new(),
            pref: None,
        };
        // cublasOperation_t, a C enum (int32): CUBLAS_OP_T = 1.
        let transpose: i32 = 1;
        let epilogue = if g.bias.is_some() {
            sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS
        } else {
            sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT
        };
        // SAFETY: each attribute buffer is a live value of the type and size cuBLASLt documents for it; the
        // descriptor is live (owned by `d`).
        unsafe {
            lt::set_matmul_desc_attribute(
                d.desc,
                A::CUBLASLT_MATMUL_DESC_TRANSA,
                (&transpose as *const i32).cast(),
                size_of::<i32>(),
            )
            .map_err(err("transa"))?;
            lt::set_matmul_desc_attribute(
                d.desc,
                A::CUBLASLT_MATMUL_DESC_EPILOGUE,
                (&epilogue as *const sys::cublasLtEpilogue_t).cast(),
                size_of::<sys::cublasLtEpilogue_t>(),
            )
            .map_err(err("epilogue"))?;
            if let Some(bias) = &g.bias {
                lt::set_matmul_desc_attribute(
                    d.desc,
                    A::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    (bias as *const u64).cast(),
                    size_of::<u64>(),
                )
                .map_err(err("bias"))?;
            }
        }
        let (m, n, k) = (g.m as u64, g.n as u64, g.k as u64);
        let mut layout = |ty, rows, cols, ld: usize| -> Result<sys::cublasLtMatrixLayout_t> {
            let l = lt::create_matrix_layout(ty, rows, cols, ld as i64).map_err(err("layout"))?;
            d.layouts.push(l);
            Ok(l)
        };
        // A = W: column-major k×n (ld k), transposed; B = x: column-major k×m (ld k); C, D: column-major n×m.
        let a = layout(CUDA_R_16BF, k, n, g.k)?;
        let b = layout(CUDA_R_16BF, k, m, g.k)?;
        let (c_ptr, c_ld) = g.residual.unwrap_or(g.out);
        let c = layout(CUDA_R_32F, n, m, c_ld)?;
        let out = layout(CUDA_R_32F, n, m, g.out.1)?;
        let pref = lt::create_matmul_pref().map_err(err("preference"))?;
        d.pref = Some(pref);
        let ws = self.workspace.len();
        let (alpha, beta) = (1.0f32, if g.residual.is_some() { 1.0f32 } else { 0.0 });
        let (ws_ptr, _sync) = cudarc::driver::DevicePtr::device_ptr(&self.workspace, &self.stream);
        // SAFETY: the descriptors are live; the addresses are device memory of the shapes the layouts describe
        // (the caller's views, checked by the op against the matrices' extents), the workspace is ours and its
        // size is what the preference allows.
        unsafe {
            lt::set_matmul_pref_attribute(
                pref,
                sys::cublasLtMatmulPreferenceAttributes_t::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                (&ws as *const usize).cast(),
                size_of::<usize>(),
            )
            .map_err(err("workspace preference"))?;
            // cuBLASLt assumes 256-byte aligned operands unless told otherwise, and a view of columns (or a row
            // stride) may give less: tell it what each operand's address and stride really allow.
            use sys::cublasLtMatmulPreferenceAttributes_t as P;
            let mut aligns = [0u32; 4];
            for (i, (attr, addr, stride)) in [
                (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, g.w, g.k * 2),
                (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, g.x, g.k * 2),
                (
                    P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    c_ptr,
                    c_ld * 4,
                ),
                (
                    P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                    g.out.0,
                    g.out.1 * 4,
                ),
            ]
            .into_iter()
            .enumerate()
            {
                let bytes = alignment(addr, stride);
                aligns[i] = bytes;
                lt::set_matmul_pref_attribute(
                    pref,
                    attr,
                    (&bytes as *const u32).cast(),
                    size_of::<u32>(),
                )
                .map_err(err("alignment preference"))?;
            }
            let key = (
                g.m,
                g.n,
                g.k,
                g.bias.is_some(),
                g.residual.is_some(),
                c_ld,
                g.out.1,
                aligns,
            );
            let mut algos = self
                .algos
                .lock()
                .map_err(|_| Error::Device("cuBLASLt algorithm cache poisoned".into()))?;
            let algo = match algos.get(&key) {
                Some(&algo) => algo,
                None => {
                    let h = lt::get_matmul_algo_heuristic(self.handle, d.desc, a, b, c, out, pref)
                        .map_err(err("no algorithm for this shape"))?;
                    // Batches past the ladder bring a new `m` each: bound the cache (a capture's eager run
                    // refills what it needs).
                    if algos.len() >= ALGOS_KEPT {
                        algos.clear();
                    }
                    *algos.entry(key).or_insert(h.algo)
                }
            };
            drop(algos);
            lt::matmul(
                self.handle,
                d.desc,
                (&alpha as *const f32).cast(),
                (&beta as *const f32).cast(),
                g.w as *const c_void,
                a,
                g.x as *const c_void,
                b,
                c_ptr as *const c_void,
                c,
                g.out.0 as *mut c_void,
                out,
                &algo,
                ws_ptr as *mut c_void,
                ws,
                self.stream.cu_stream() as sys::cudaStream_t,
            )
            .map_err(err("matmul"))
        }
    }
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
    use super::alignment;

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
