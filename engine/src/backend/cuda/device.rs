//! The GPU itself: [`Cuda`] opens the device, compiles (or loads) the kernels and holds the compute stream and
//! cuBLASLt; as the op set's [`Device`] it uploads weights at load (linear layers in bf16, the rest in f32).

use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream};

use super::gemm::Lt;
use super::nvrtc;
use crate::backend::ops::Device;
use crate::config::{GpuAttention, GpuIntermediate};
use crate::error::{Error, Result};
use crate::model::Tensor;

pub(super) fn driver(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::Device(format!("CUDA {what}: {e:?}"))
}

/// The GPU: its context, the compute stream every pass runs on, the kernels and cuBLASLt.
pub struct Cuda {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) stream: Arc<CudaStream>,
    functions: HashMap<&'static str, CudaFunction>,
    pub(super) attention: GpuAttention,
    pub(super) intermediate: GpuIntermediate,
    pub(super) lt: Lt,
    /// The widest GEMM input of the layers uploaded so far: the bf16 scratch a pass needs per token.
    max_inner: std::sync::atomic::AtomicUsize,
}

impl Cuda {
    /// Opens GPU `ordinal`, compiles (or loads from the disk cache) every kernel for its architecture, and makes
    /// the compute stream and cuBLASLt handle; `attention` picks the attention kernel, `intermediate` the
    /// feed-forward intermediate's precision.
    pub fn new(
        ordinal: usize,
        attention: GpuAttention,
        intermediate: GpuIntermediate,
    ) -> Result<Self> {
        // SAFETY: only dlopens the driver library under its candidate names; nothing is called.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(Error::Device(
                "the CUDA driver (libcuda.so) was not found: no NVIDIA driver on this machine"
                    .into(),
            ));
        }
        let count = CudaContext::device_count().map_err(driver("device count"))?;
        if ordinal >= count.max(0) as usize {
            return Err(Error::Device(format!(
                "GPU {ordinal} asked for, {count} visible"
            )));
        }
        let ctx = CudaContext::new(ordinal).map_err(driver("context"))?;
        // The backend orders its streams itself, with events (one compute stream, one copy stream).
        // SAFETY: no slice exists yet; every later one is used on the compute stream, or read by the copy stream
        // only after an event recorded on the compute stream, and freed only after the copy's event completes.
        unsafe { ctx.disable_event_tracking() };
        keep_freed_memory(&ctx)?;
        let stream = ctx.new_stream().map_err(driver("stream"))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(driver("compute capability"))?;
        let arch = nvrtc::Arch {
            major: major as u32,
            minor: minor as u32,
        };
        if attention == GpuAttention::TensorCores && arch.major < 8 {
            return Err(Error::Device(format!(
                "tensor-core attention needs sm_80 or later (bf16 mma.sync); this GPU is {arch}"
            )));
        }
        let version = nvrtc::version()?;
        let cache = nvrtc::DiskCache::default_location();
        let mut functions = HashMap::new();
        for source in nvrtc::SOURCES {
            let (cubin, _) = cache.load_or_compile(source, arch, version)?;
            let module = ctx
                .load_module(cudarc::nvrtc::Ptx::from_binary(cubin))
                .map_err(driver("module load"))?;
            for &f in source.functions {
                functions.insert(f, module.load_function(f).map_err(driver("function"))?);
            }
        }
        // SAFETY: only dlopens the library under its candidate names; nothing is called.
        if !unsafe { cudarc::cublaslt::sys::is_culib_present() } {
            return Err(Error::Device(
                "cuBLASLt (libcublasLt.so) was not found on the library path (LD_LIBRARY_PATH)"
                    .into(),
            ));
        }
        let lt = Lt::new(stream.clone(), major)?;
        Ok(Cuda {
            ctx,
            stream,
            functions,
            attention,
            intermediate,
            lt,
            max_inner: Default::default(),
        })
    }

    /// bf16 floats per token of the GEMM input scratch a pass needs.
    pub fn gemm_scratch(&self) -> usize {
        self.max_inner.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn function(&self, name: &str) -> &CudaFunction {
        // Every name asked for is in `nvrtc::SOURCES`, loaded in `new`.
        &self.functions[name]
    }

    /// Readies the attention kernel for heads of `d`: the block's dynamic shared memory past the 48 KiB every
    /// kernel gets is opted into (the `_wide` kernels for heads past 128 need it), and refused where this GPU
    /// allows a block less.
    pub(super) fn prepare_attention(&self, d: usize) -> Result<()> {
        use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
        if !super::ops::head_dim_supported(d) {
            return Err(Error::Device(format!(
                "the CUDA attention kernels take heads of a multiple of 32 up to {}; this model's are {d}",
                super::ops::HEAD_DIM_MAX
            )));
        }
        let (name, _, smem) = super::ops::attention_launch(self.attention, d);
        if smem <= super::ops::DEFAULT_SMEM_BYTES {
            return Ok(());
        }
        let allowed = self
            .ctx
            .attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(driver("shared memory per block"))?;
        if smem > allowed.max(0) as usize {
            return Err(Error::Device(format!(
                "{name} needs {} KiB of shared memory per block for heads of {d}; this GPU allows {} KiB",
                smem >> 10,
                allowed >> 10
            )));
        }
        self.function(name)
            .set_attribute(
                CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem as i32,
            )
            .map_err(driver("attention shared memory"))
    }

    /// The GPU in words: name, compute capability, memory, driver, for `/info` and results.
    pub fn describe(&self) -> String {
        let name = self.ctx.name().unwrap_or_else(|_| "unknown GPU".into());
        let (major, minor) = self.ctx.compute_capability().unwrap_or((0, 0));
        let mem = self.ctx.total_mem().unwrap_or(0) as f64 / (1u64 << 30) as f64;
        let mut version = 0;
        // SAFETY: the driver is loaded (checked in `new`); `version` is valid for one write.
        let driver = unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) }
            .result()
            .map(|_| format!("{}.{}", version / 1000, version % 1000 / 10))
            .unwrap_or_else(|_| "?".into());
        format!("{name} (sm_{major}{minor}, {mem:.0} GiB, CUDA driver {driver})")
    }
}

/// Makes the device's memory pool keep what is freed instead of returning it to the driver at the next
/// synchronisation (its default release threshold is 0). cudarc allocates stream-ordered from that pool, and an
/// eager forward allocates its buffers and frees them after the copy out; with the default, the completion
/// thread's wait on each copy's event released them, so every eager batch mapped its activations afresh (at a
/// 32,768-token batch of a BGE-large-sized model, over a GiB). Kept, a freed buffer is reused by the next
/// allocation of its size, as PyTorch's caching allocator does; the pool holds the largest working set seen.
fn keep_freed_memory(ctx: &CudaContext) -> Result<()> {
    if !ctx.has_async_alloc() {
        // cudarc allocates synchronously (cuMemAlloc) where the device has no memory pools.
        return Ok(());
    }
    use cudarc::driver::{result, sys};
    let mut threshold = u64::MAX;
    // SAFETY: the device ordinal is the context's own; CU_MEMPOOL_ATTR_RELEASE_THRESHOLD's value is a cuuint64_t,
    // and `threshold` is a live u64 for the duration of the call.
    unsafe {
        let pool = result::device::get_mem_pool(ctx.cu_device()).map_err(driver("memory pool"))?;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .map_err(driver("memory pool release threshold"))
    }
}

/// A linear layer on the GPU: bf16 weight `[out×inp]`, f32 bias.
pub struct CudaLinear {
    pub(super) weight: CudaSlice<u16>,
    pub(super) bias: Option<CudaSlice<f32>>,
    pub(super) out: usize,
    pub(super) inp: usize,
}

/// A parameter (norm weights, embedding and rotary tables) in f32.
pub struct CudaParam {
    pub(super) data: CudaSlice<f32>,
}

impl Device for Cuda {
    type Linear = CudaLinear;
    type Param = CudaParam;

    fn linear(
        &self,
        weight: &[f32],
        bias: Option<&[f32]>,
        out: usize,
        inp: usize,
    ) -> Result<CudaLinear> {
        crate::backend::ops::check_linear(weight, bias, out, inp)?;
        let bits: Vec<u16> = weight
            .iter()
            .map(|&w| half::bf16::from_f32(w).to_bits())
            .collect();
        let weight = self
            .stream
            .clone_htod(&bits)
            .map_err(driver("weight upload"))?;
        let bias = bias
            .map(|b| self.stream.clone_htod(b))
            .transpose()
            .map_err(driver("bias upload"))?;
        self.max_inner
            .fetch_max(inp, std::sync::atomic::Ordering::Relaxed);
        Ok(CudaLinear {
            weight,
            bias,
            out,
            inp,
        })
    }

    fn param(&self, t: Tensor) -> Result<CudaParam> {
        let data = self
            .stream
            .clone_htod(t.data())
            .map_err(driver("parameter upload"))?;
        Ok(CudaParam { data })
    }

    fn position_projection(&self, _: Tensor) -> Result<CudaParam> {
        Err(Error::Device(
            "DeBERTa's disentangled attention runs on the CPU backend only: the CUDA attention kernels do not \
             take its position terms (use --backend cpu)"
                .into(),
        ))
    }
}
