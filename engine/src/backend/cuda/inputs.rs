//! A batch's inputs on the GPU: one int32 device buffer holds them all (sizes, offsets, attention tiles, ids,
//! positions), filled by one asynchronous copy from page-locked staging memory.
//!
//! One copy rather than one per input, since each is a driver call on the single-query path; and from page-locked
//! memory, since from pageable memory the driver may wait for the stream before it copies: the compute thread would
//! then wait for the previous batch's forward to finish, and overlap would be lost.

use std::sync::Arc;

use cudarc::driver::{
    sys, CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, PinnedHostSlice,
};

use super::device::driver;
use crate::batch::{Batch, Readout};
use crate::error::{Error, Result};

/// Query rows per attention tile (`QUERIES` in kernels/attention.cu, which NVRTC is given from this).
pub const QUERY_TILE: usize = 16;

/// The sizes one set of device buffers serves: a bucket's, or one batch's past the ladder.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    pub tokens: usize,
    pub seqs: usize,
}

impl Extent {
    /// Attention query tiles a batch of this extent can need: a sequence of n tokens takes ceil(n / 16), so at
    /// most tokens / 16 + one partial tile per sequence. The attention grid's size.
    pub fn tiles(&self) -> usize {
        self.tokens.div_ceil(QUERY_TILE) + self.seqs
    }
}

/// Where each input sits in the buffer, in int32 elements: `meta` ({tokens, sequences, tiles}) at 0, then the
/// per-sequence arrays, the tiles ({sequence, first row} pairs), and the per-token arrays last, so a batch smaller
/// than its extent is copied as one prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputLayout {
    pub offsets: usize,
    pub out_offsets: usize,
    pub readouts: usize,
    /// Where each sequence's tokens of type 1 start (`i32::MAX` for none: [`Batch::type1_from`]).
    pub type1_from: usize,
    /// How many leading tokens of each sequence its tokens attend to ([`Batch::keys`]).
    pub keys: usize,
    pub tiles: usize,
    pub ids: usize,
    pub tok_pos: usize,
    /// Elements in all.
    pub len: usize,
}

/// Elements of `meta`.
const META: usize = 3;

impl InputLayout {
    pub fn new(e: Extent) -> Self {
        let offsets = META;
        let out_offsets = offsets + e.seqs + 1;
        let readouts = out_offsets + e.seqs + 1;
        let type1_from = readouts + e.seqs;
        let keys = type1_from + e.seqs;
        let tiles = keys + e.seqs;
        let ids = tiles + 2 * e.tiles();
        let tok_pos = ids + e.tokens;
        InputLayout {
            offsets,
            out_offsets,
            readouts,
            type1_from,
            keys,
            tiles,
            ids,
            tok_pos,
            len: tok_pos + e.tokens,
        }
    }

    /// Writes `batch` into `host` as laid out here and returns how many leading elements hold it (what to copy).
    /// Fails if the batch does not fit the extent the layout was made for, or `host` is shorter than the layout.
    pub fn fill(&self, batch: &Batch, host: &mut [i32]) -> Result<usize> {
        let (tokens, seqs) = (batch.tokens(), batch.len());
        let fits = host.len() >= self.len
            && seqs < self.out_offsets - self.offsets
            && tokens <= self.tok_pos - self.ids;
        let tiles: usize = batch
            .offsets()
            .windows(2)
            .map(|w| (w[1] - w[0]).div_ceil(QUERY_TILE))
            .sum();
        if !fits || 2 * tiles > self.ids - self.tiles {
            return Err(Error::Device(format!(
                "a batch of {seqs} sequences and {tokens} tokens does not fit its input buffers"
            )));
        }
        let int = |v: usize| v as i32;
        host[..META].copy_from_slice(&[int(tokens), int(seqs), int(tiles)]);
        for (i, (&o, &r)) in batch.offsets().iter().zip(batch.out_offsets()).enumerate() {
            host[self.offsets + i] = int(o);
            host[self.out_offsets + i] = int(r);
        }
        for i in 0..seqs {
            // The pool kernel's readout code: -1 for a row per token, else the leading tokens pooling leaves out.
            host[self.readouts + i] = match batch.readout(i) {
                Readout::Pooled { skip } => i32::try_from(skip).unwrap_or(i32::MAX),
                Readout::Tokens | Readout::Vectors { .. } => -1,
            };
            host[self.type1_from + i] = batch
                .type1_from(i)
                .map_or(i32::MAX, |from| i32::try_from(from).unwrap_or(i32::MAX));
            host[self.keys + i] = int(batch.keys()[i]);
        }
        let mut tile = self.tiles;
        for (s, w) in batch.offsets().windows(2).enumerate() {
            for q0 in (0..w[1] - w[0]).step_by(QUERY_TILE) {
                host[tile] = int(s);
                host[tile + 1] = int(q0);
                tile += 2;
            }
            for (p, slot) in host[self.tok_pos + w[0]..self.tok_pos + w[1]]
                .iter_mut()
                .enumerate()
            {
                *slot = int(p);
            }
        }
        for (slot, &id) in host[self.ids..self.ids + tokens]
            .iter_mut()
            .zip(batch.ids())
        {
            // The kernels read ids as unsigned: the same 32 bits.
            *slot = id as i32;
        }
        Ok(self.tok_pos + tokens)
    }
}

/// Page-locked host buffers the inputs are staged in: two, so a batch is written while the previous one's copy may
/// still be queued; a buffer is rewritten only after its last copy has completed (its event).
#[derive(Default)]
pub struct Staging {
    slots: [Slot; 2],
    next: usize,
}

#[derive(Default)]
struct Slot {
    buf: Option<PinnedHostSlice<i32>>,
    copied: Option<CudaEvent>,
}

impl Staging {
    /// Queues on `stream` the copy of `batch`'s inputs, laid out as `layout`, into `dst`.
    pub fn upload(
        &mut self,
        ctx: &Arc<CudaContext>,
        stream: &Arc<CudaStream>,
        layout: &InputLayout,
        batch: &Batch,
        dst: &CudaSlice<i32>,
    ) -> Result<()> {
        if dst.len() < layout.len {
            return Err(Error::Device(
                "the input buffer is smaller than its layout".into(),
            ));
        }
        let at = self.next;
        self.next = (at + 1) % self.slots.len();
        let slot = &mut self.slots[at];
        if let Some(copied) = slot.copied.take() {
            copied.synchronize().map_err(driver("input staging"))?;
        }
        if slot.buf.as_ref().is_none_or(|b| b.len() < layout.len) {
            slot.buf = None;
            let len = layout.len.next_power_of_two();
            // SAFETY: page-locked host memory of `len` i32s, uninitialised until the zeroing below.
            let mut buf = unsafe { ctx.alloc_pinned_with_flags::<i32>(len, 0) }
                .map_err(driver("pinned alloc"))?;
            let ptr = buf.as_mut_ptr().map_err(driver("input staging"))?;
            // SAFETY: `ptr` points at the `len` i32s just allocated, which nothing else holds yet; zeroed once, so
            // the gaps `fill` leaves (ids past the batch's tokens, spare tiles) are read as 0, not uninitialised.
            unsafe { std::ptr::write_bytes(ptr, 0, len) };
            slot.buf = Some(buf);
        }
        let Some(buf) = slot.buf.as_mut() else {
            return Err(Error::Device("no staging buffer".into()));
        };
        let host = buf.as_mut_slice().map_err(driver("input staging"))?;
        let n = layout.fill(batch, host)?;
        // SAFETY: `dst` holds at least `layout.len` ≥ `n` ints (checked above); `host[..n]` is page-locked and is
        // not written again before this copy's event (`copied`) completes.
        unsafe {
            cudarc::driver::result::memcpy_htod_async(
                dst.device_ptr(stream).0,
                &host[..n],
                stream.cu_stream(),
            )
        }
        .map_err(driver("input upload"))?;
        slot.copied = Some(
            stream
                .record_event(Some(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING))
                .map_err(driver("event"))?,
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(lens: &[usize]) -> Batch {
        let mut b = Batch::new();
        let mut next = 100;
        for &n in lens {
            let ids: Vec<u32> = (next..next + n as u32).collect();
            next += n as u32;
            b.push(&ids);
        }
        b
    }

    #[test]
    fn a_batch_is_laid_out_as_the_kernels_read_it_and_copied_as_one_prefix() {
        let e = Extent {
            tokens: 64,
            seqs: 4,
        };
        let l = InputLayout::new(e);
        let mut host = vec![-7; l.len];
        let b = batch(&[17, 3]);
        let n = l.fill(&b, &mut host).unwrap();
        assert_eq!(n, l.tok_pos + 20);
        // meta: tokens, sequences, tiles (17 rows take two tiles of 16, 3 rows one).
        assert_eq!(&host[..3], &[20, 2, 3]);
        assert_eq!(&host[l.offsets..l.offsets + 3], &[0, 17, 20]);
        assert_eq!(&host[l.out_offsets..l.out_offsets + 3], &[0, 1, 2]);
        assert_eq!(&host[l.readouts..l.readouts + 2], &[0, 0]);
        assert_eq!(&host[l.tiles..l.tiles + 6], &[0, 0, 0, 16, 1, 0]);
        assert_eq!(host[l.ids], 100);
        assert_eq!(host[l.ids + 19], 119);
        assert_eq!(host[l.tok_pos + 16], 16);
        assert_eq!(&host[l.tok_pos + 17..l.tok_pos + 20], &[0, 1, 2]);
        // Nothing past the prefix is touched.
        assert!(host[n..].iter().all(|&v| v == -7));
        // The pool kernel's readout codes: the tokens a pooled sequence skips, -1 for token states.
        let mut b = Batch::new();
        b.push_as(&[1, 2, 3], Readout::Pooled { skip: 2 });
        b.push_as(&[4, 5], Readout::Tokens);
        b.push_pair(&[6, 7, 8], Readout::Pooled { skip: u32::MAX }, Some(2));
        l.fill(&b, &mut host).unwrap();
        assert_eq!(&host[l.readouts..l.readouts + 3], &[2, -1, i32::MAX]);
        // Where a pair's tokens of type 1 start; i32::MAX for a single text's.
        assert_eq!(
            &host[l.type1_from..l.type1_from + 3],
            &[i32::MAX, i32::MAX, 2]
        );
        assert_eq!(&host[l.out_offsets..l.out_offsets + 4], &[0, 1, 3, 4]);
    }

    #[test]
    fn the_attention_grid_covers_every_batch_an_extent_holds() {
        // The worst case for tiles: every sequence one token past a tile.
        let e = Extent {
            tokens: 68,
            seqs: 4,
        };
        let l = InputLayout::new(e);
        let mut host = vec![0; l.len];
        let b = batch(&[17, 17, 17, 17]);
        assert!(l.fill(&b, &mut host).is_ok());
        assert_eq!(host[2], 8);
        assert!(8 <= e.tiles());
    }

    #[test]
    fn a_batch_larger_than_its_extent_is_refused_not_written_out_of_bounds() {
        let l = InputLayout::new(Extent {
            tokens: 16,
            seqs: 1,
        });
        let mut host = vec![0; l.len];
        assert!(l.fill(&batch(&[17]), &mut host).is_err());
        assert!(l.fill(&batch(&[4, 4]), &mut host).is_err());
        let mut short = vec![0; l.len - 1];
        assert!(l.fill(&batch(&[4]), &mut short).is_err());
    }
}
