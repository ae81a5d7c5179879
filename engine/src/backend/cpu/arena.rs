//! The activation memory of a CPU forward pass: the regions an architecture's [`Layout`] declares, the fused
//! projection rounded to bf16 for bf16 attention, and each thread's scratch. A plan keeps one arena per token
//! rung; an eager run allocates one for the call.

use super::ops::Cpu;
use super::par::{Mat, Scratch};
use crate::backend::ops::Layout;

pub struct Arena {
    tokens: usize,
    layout: Layout,
    regions: Vec<Vec<f32>>,
    /// `tokens × qkv_width` bf16 values, or empty when attention runs in f32.
    qkv16: Vec<u16>,
    scratch: Scratch,
}

/// The arena carved for one forward pass: one view per layout slot, the bf16 projection, the scratch.
pub struct Views<'a> {
    pub acts: Vec<Mat<'a>>,
    pub qkv16: Option<Mat<'a, u16>>,
    pub scratch: &'a Scratch,
}

impl Arena {
    /// An arena for batches of up to `tokens` tokens, with scratch for `threads` threads.
    pub fn new(device: &Cpu, layout: &Layout, tokens: usize, threads: usize) -> Arena {
        let max_len = tokens.min(layout.max_positions);
        let shape = layout.attention;
        let qkv16 = match shape.filter(|&s| device.bf16_attention(s)) {
            Some(shape) => vec![0; tokens * shape.qkv_width()],
            None => Vec::new(),
        };
        Arena {
            tokens,
            layout: layout.clone(),
            regions: layout
                .region_widths()
                .into_iter()
                .map(|w| vec![0.0; tokens * w])
                .collect(),
            qkv16,
            scratch: Scratch::new(threads, device.scratch_floats(shape, max_len)),
        }
    }

    pub fn bytes(&self) -> usize {
        let floats: usize = self.regions.iter().map(Vec::len).sum();
        4 * (floats + self.scratch.floats()) + 2 * self.qkv16.len()
    }

    /// Touches every page now, so a plan's first replay does not pay the page faults.
    pub fn prefault(&mut self) {
        for r in &mut self.regions {
            r.fill(0.0);
        }
        self.qkv16.fill(0);
        self.scratch.prefault();
    }

    /// The arena carved for a batch of `tokens` tokens; the borrow keeps it for one forward pass.
    pub fn views(&mut self, tokens: usize) -> Views<'_> {
        assert!(
            tokens <= self.tokens,
            "batch of {tokens} tokens in an arena of {}",
            self.tokens
        );
        let cap = self.tokens;
        let bases: Vec<*mut f32> = self.regions.iter_mut().map(|r| r.as_mut_ptr()).collect();
        let acts = self
            .layout
            .slots
            .iter()
            .map(|s| {
                // SAFETY: region `s.region` holds `cap × width` floats with `width >= s.offset + s.width`
                // (`Layout::region_widths`); the slot's `tokens × s.width` block starts `cap × s.offset` in and
                // ends within it. Views of one region may overlap: the layout promises that overlapping slots
                // are never live together, and the borrow of `self` keeps the memory for the views' lifetime.
                unsafe {
                    Mat::from_raw(
                        bases[s.region].add(cap * s.offset),
                        tokens,
                        s.width,
                        s.width,
                    )
                }
            })
            .collect();
        let width = self.layout.attention.map_or(0, |a| a.qkv_width());
        let qkv16 = (!self.qkv16.is_empty()).then(|| Mat::new(&mut self.qkv16, tokens, width));
        Views {
            acts,
            qkv16,
            scratch: &self.scratch,
        }
    }
}
