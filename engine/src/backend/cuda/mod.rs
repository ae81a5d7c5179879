//! The CUDA backend (feature `cuda`). **It has not run on a GPU**: it is built and its kernels are compiled by
//! NVRTC in CI, but no forward pass of it has been executed yet.
//!
//! `nvrtc`: the kernels of `kernels/*.cu`, compiled for the device's architecture and cached on disk.

pub mod nvrtc;
