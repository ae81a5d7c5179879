//! Every architecture's claim about its operand slots ([`Slot::operand`]), checked by running its forward over an
//! op set that only records which matrices each op is given: a backend holds an operand slot in bf16 (the CUDA
//! backend under `--gpu-intermediate bf16`), and any op but `linear` and `glu` would read it as f32.

use std::cell::RefCell;
use std::ops::Range;

use super::{Model, ModelDir, Pooling, Tensor};
use crate::backend::ops::{
    Activation, Architecture, AttentionShape, Device, Embedding, Glu, LayerNormWeights, Matrix,
    Ops, ScoreBias, Slot,
};
use crate::batch::Batch;
use crate::error::Result;

/// Load time: shapes only.
struct Shapes;

impl Device for Shapes {
    type Linear = ();
    type Param = ();

    fn linear(&self, _: &[f32], _: Option<&[f32]>, _: usize, _: usize) -> Result<()> {
        Ok(())
    }

    fn param(&self, _: Tensor) -> Result<()> {
        Ok(())
    }
}

/// A view that remembers whether its slot is an operand slot.
#[derive(Clone, Copy, Debug)]
struct View {
    rows: usize,
    cols: usize,
    operand: bool,
}

impl Matrix for View {
    fn rows(&self) -> usize {
        self.rows
    }

    fn cols(&self) -> usize {
        self.cols
    }

    fn columns(self, range: Range<usize>) -> Self {
        View {
            cols: range.len(),
            ..self
        }
    }

    fn top(self, _: usize) -> Self {
        self
    }
}

/// Run time: records every op given an operand slot, and whether a linear layer or the gate took one at all.
#[derive(Default)]
struct Recorder {
    misuse: RefCell<Vec<&'static str>>,
    used: RefCell<bool>,
}

impl Recorder {
    fn f32_only(&self, op: &'static str, views: &[View]) {
        if views.iter().any(|v| v.operand) {
            self.misuse.borrow_mut().push(op);
        }
    }
}

impl Ops for Recorder {
    type Device = Shapes;
    type Mat = View;

    fn embed(&self, _: &Batch, _: &Embedding<Shapes>, out: View) {
        self.f32_only("embed", &[out]);
    }

    fn linear(&self, x: View, _: &(), _: Activation, residual: Option<View>, out: View) {
        // A residual is f32 and goes into an f32 output.
        if let Some(r) = residual {
            self.f32_only("linear with a residual", &[r, out]);
        }
        if x.operand || out.operand {
            *self.used.borrow_mut() = true;
        }
    }

    fn layer_norm(&self, x: View, residual: Option<View>, out: View, _: &LayerNormWeights<Shapes>) {
        self.f32_only("layer_norm", &[x, out]);
        if let Some(r) = residual {
            self.f32_only("layer_norm's residual", &[r]);
        }
    }

    fn rms_norm(&self, x: View, out: View, _: &(), _: f32, _: bool) {
        self.f32_only("rms_norm", &[x, out]);
    }

    fn rotary(&self, _: &Batch, x: View, _: &(), _: usize, _: Option<(&(), f32)>) {
        self.f32_only("rotary", &[x]);
    }

    fn glu(&self, x: View, _: Glu, out: View) {
        // Both sides of one precision.
        if x.operand != out.operand {
            self.misuse.borrow_mut().push("glu across precisions");
        }
    }

    fn attention(
        &self,
        _: &Batch,
        qkv: View,
        _: AttentionShape,
        _: Option<ScoreBias<'_, Shapes>>,
        ctx: View,
    ) {
        self.f32_only("attention", &[qkv, ctx]);
    }

    fn pool(&self, _: &Batch, x: View, _: Pooling, out: View) {
        self.f32_only("pool", &[x, out]);
    }
}

/// Runs the model in `dir` over the recorder; returns the misuses and whether an operand slot was used.
fn record(dir: &std::path::Path) -> (Vec<&'static str>, bool) {
    let dir = ModelDir::open(dir).unwrap();
    let model = Model::load(&dir, &Shapes).unwrap();
    let layout = model.layout();
    let view = |s: &Slot| View {
        rows: 8,
        cols: s.width,
        operand: s.operand,
    };
    let acts: Vec<View> = layout.slots.iter().map(view).collect();
    let mut batch = Batch::new();
    batch.push(&[1, 2, 3]);
    batch.push(&[4, 5, 6, 7, 8]);
    let out = View {
        rows: 8,
        cols: model.dim(),
        operand: false,
    };
    let ops = Recorder::default();
    model.forward(&ops, &batch, &acts, out);
    (ops.misuse.into_inner(), ops.used.into_inner())
}

#[test]
fn operand_slots_reach_only_linear_layers_and_the_gate() {
    let tmp = tempfile::tempdir().unwrap();
    let bert = tmp.path().join("bert");
    super::tiny::write_tiny_bert(&bert, Default::default()).unwrap();
    let qwen3 = tmp.path().join("qwen3");
    let tiny = super::synthetic::MODELS[2].1;
    super::synthetic::write_qwen3(&qwen3, tiny).unwrap();
    // ModernBERT, Gemma 3 (with Dense modules), Nomic BERT, Jina v3 (its MLP ungated) and JinaBERT (BERT with a
    // GeGLU; the qk-post-norm one, norms on QKV's columns and a residual norm): fixtures
    // scripts/make_encoder_fixtures.py and make_jinabert_fixture.py made.
    let fixture = |name: &str| {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name)
    };
    for dir in [
        bert,
        qwen3,
        fixture("modernbert_mean"),
        fixture("gemma3_mean"),
        fixture("nomic_mean"),
        fixture("jina_v3_mean"),
        fixture("jinabert_mean"),
        fixture("jinabert_qk_mean"),
    ] {
        let (misuse, used) = record(&dir);
        assert!(misuse.is_empty(), "{}: {misuse:?}", dir.display());
        // Not vacuous: each architecture declares an operand slot and its feed-forward uses it.
        assert!(
            used,
            "{}: no operand slot reached a linear layer",
            dir.display()
        );
    }
}
