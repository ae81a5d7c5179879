//! Cross-encoders against sentence-transformers' CrossEncoder, on the random-weight checkpoints
//! `scripts/make_cross_encoder_fixtures.py` made: BertForSequenceClassification (token types: the passage's
//! tokens read token type 1's row; the pooler's tanh, then the classifier), XLMRobertaForSequenceClassification (one
//! token type, RobertaClassificationHead), DistilBertForSequenceClassification with three named labels and
//! ElectraForSequenceClassification (token types, narrower embeddings, a GELU head) and
//! ModernBertForSequenceClassification (the tokens' mean, a head with a LayerNorm) and
//! DebertaV2ForSequenceClassification (DeBERTa v3's disentangled attention, ContextPooler's GELU) and
//! GteForSequenceClassification (GTE's rotary layers, GtePooler's tanh; also in Alibaba's layout). Each
//! pair is tokenized as the CrossEncoder tokenizes it (the pair template, both texts truncated longest first to
//! the limit, which most pairs reach) and scored to float rounding in f32, closely in bf16.

mod common;

use base64::Engine as _;
use common::models::{bf16_runs, load};
use engine::tokenizer::Scratch;
use engine::{CaptureMode, Dtype};

struct Pair {
    query: String,
    passage: String,
    ids: Vec<u32>,
    type1_from: Option<u32>,
    logits: Vec<f32>,
}

fn pairs(name: &str) -> Vec<Pair> {
    let path = common::models::dir(name).join("reference.jsonl");
    std::fs::read_to_string(&path)
        .expect("reference")
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(v["logits"].as_str().expect("logits"))
                .expect("base64");
            Pair {
                query: v["query"].as_str().expect("query").into(),
                passage: v["passage"].as_str().expect("passage").into(),
                ids: serde_json::from_value(v["ids"].clone()).expect("ids"),
                type1_from: serde_json::from_value(v["type1_from"].clone()).expect("type1_from"),
                logits: bytes
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
            }
        })
        .collect()
}

/// Each fixture, its labels, and whether its model reads token types (the others' tokenizers give no
/// `token_type_ids`, whatever their template says, so the reference has no type-1 boundary for them).
const FIXTURES: [(&str, &[&str], bool); 10] = [
    ("bert_cross_encoder", &["LABEL_0"], true),
    ("xlmr_cross_encoder", &["LABEL_0"], false),
    (
        "distilbert_nli",
        &["contradiction", "entailment", "neutral"],
        false,
    ),
    ("electra_cross_encoder", &["LABEL_0"], true),
    ("modernbert_cross_encoder", &["LABEL_0"], false),
    ("qwen3_reranker_seq_cls", &["LABEL_0"], false),
    ("qwen3_reranker_logit_score", &["LABEL_0"], false),
    ("qwen3_reranker_true_logit", &["LABEL_0"], false),
    (
        "deberta_nli",
        &["contradiction", "entailment", "neutral"],
        false,
    ),
    ("gte_reranker", &["LABEL_0"], false),
];

/// Ids as the reference's, and where the tokens of type 1 start where the model reads token types; every logit
/// within `tolerance` of the reference's spread (its largest magnitude); the labels the config names.
fn check(fixture: usize, dtype: Dtype, tolerance: f32) {
    let engine = load(FIXTURES[fixture].0, dtype, CaptureMode::Lazy);
    check_engine(fixture, &engine, tolerance);
}

/// [`check`] of an engine loaded otherwise: fixture `fixture`'s reference pairs, ids and logits.
fn check_engine(fixture: usize, engine: &engine::Engine, tolerance: f32) {
    let (name, labels, typed) = FIXTURES[fixture];
    let dtype = engine.config().dtype;
    let fx = pairs(name);
    let classifier = engine.info().classifier.clone().expect("a cross-encoder");
    assert_eq!(classifier.labels, labels, "{name}: labels");
    let mut scratch = Scratch::default();
    for p in &fx {
        let mut ids = Vec::new();
        let from = engine
            .front()
            .encode_pair(&p.query, &p.passage, &mut scratch, &mut ids)
            .expect("pair")
            .type1_from;
        assert_eq!(ids, p.ids, "{name}: {:?}", p.query);
        if typed {
            assert_eq!(from, p.type1_from, "{name}: {:?}", p.query);
        }
    }
    let got = engine
        .score(
            &fx.iter()
                .map(|p| (&p.query, &p.passage))
                .collect::<Vec<_>>(),
        )
        .expect("score");
    let spread = fx
        .iter()
        .flat_map(|p| &p.logits)
        .fold(0f32, |m, v| m.max(v.abs()));
    let mut worst = 0f32;
    for (p, g) in fx.iter().zip(&got) {
        assert_eq!(g.len(), labels.len(), "{name}: logits per pair");
        for (a, b) in g.iter().zip(&p.logits) {
            worst = worst.max((a - b).abs() / spread);
            assert!(
                (a - b).abs() <= tolerance * spread,
                "{name} {dtype}: {a} against {b} (spread {spread}) for {:?}",
                p.query
            );
        }
    }
    eprintln!("{name} {dtype}: worst error {worst:.2e} of the logits' spread {spread:.3}");
}

#[test]
fn bert_cross_encoder_reads_the_passage_as_token_type_1() {
    check(0, Dtype::F32, 1e-5);
}

#[test]
fn xlmr_cross_encoder_matches() {
    check(1, Dtype::F32, 1e-5);
}

#[test]
fn distilbert_nli_scores_each_label() {
    check(2, Dtype::F32, 1e-5);
}

/// ms-marco-electra-base's shape: token types, embeddings projected to the layers' width, a GELU head.
#[test]
fn electra_cross_encoder_matches() {
    check(3, Dtype::F32, 1e-5);
}

/// gte-reranker-modernbert-base's shape: the tokens' mean through a dense layer, GELU and a LayerNorm (neither
/// with a bias), then the classifier.
#[test]
fn modernbert_cross_encoder_pools_the_mean_and_norms_its_head() {
    check(4, Dtype::F32, 1e-5);
}

/// cross-encoder/nli-deberta-v3's shape: DeBERTa v3's disentangled attention (each score also reads the query
/// against its key's log-bucketed relative position and the key against the query's), ContextPooler's GELU over the
/// first token, three named labels; token type ids ignored (no token types).
#[test]
fn deberta_nli_scores_each_label_through_disentangled_attention() {
    check(8, Dtype::F32, 1e-5);
}

/// Alibaba-NLP/gte-multilingual-reranker-base's shape: GTE's rotary layers, GtePooler's tanh over the first token,
/// one label, XLM-R's pair template; in transformers' layout, and in Alibaba's remote-code one (`new.` tensor
/// names, NewForSequenceClassification, NewModel's config keys) scoring the same.
#[test]
fn gte_reranker_scores_in_either_layout() {
    check(9, Dtype::F32, 1e-5);
    scores_as_reference("gte_reranker", &common::models::dir("gte_reranker_new"));
}

/// tomaarsen/Qwen3-Reranker-0.6B-seq-cls's shape: a bare Qwen3ForSequenceClassification, its `score` row over the
/// last token; each pair rendered through the tokenizer's ChatML template as `query` and `document` messages (as
/// sentence-transformers 6 infers for a bare checkpoint with a template), a cut pair's last tokens the template's.
#[test]
fn qwen3_seq_cls_reranker_renders_pairs_through_its_chat_template() {
    check(5, Dtype::F32, 1e-5);
}

/// Qwen3-Reranker's way as sentence-transformers 6 saves it: a causal LM, its `chat_template.jinja` with the
/// generation prompt, then LogitScore: the logit of "yes" less that of "no" at the last token (the LM head tied to
/// the embeddings); a pair cut at the limit still ends in the template's suffix.
#[test]
fn qwen3_reranker_scores_yes_less_no_after_its_template() {
    check(6, Dtype::F32, 1e-5);
}

/// zerank-2's LogitScore: a true token alone, over an untied `lm_head`; a template calling Python's `.strip()`.
#[test]
fn a_true_token_alone_scores_its_logit_over_an_untied_head() {
    check(7, Dtype::F32, 1e-5);
}

#[test]
fn cross_encoders_in_bf16() {
    if !bf16_runs(FIXTURES[0].0) {
        return;
    }
    for fixture in 0..FIXTURES.len() {
        // The random BERT's logits spread over 0.077 only: bf16's few thousandths are 7% of that.
        check(fixture, Dtype::Bf16, 0.1);
    }
}

/// An embedding model is not scored: its output is not a classifier's.
#[test]
fn an_embedding_model_is_not_scored() {
    let engine = load("bert_max", Dtype::F32, CaptureMode::Off);
    assert!(engine.info().classifier.is_none());
    assert!(engine.score(&[("a", "b")]).is_err());
}

/// A classification head the engine does not read is refused, naming the architecture, rather than run as an
/// embedding model (its encoder alone, its head ignored).
#[test]
fn an_unsupported_classification_head_is_refused_by_name() {
    let tmp = common::models::copied("bert_cross_encoder");
    let config = tmp.path().join("config.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).expect("config")).expect("JSON");
    json["architectures"] = serde_json::json!(["NomicBertForSequenceClassification"]);
    std::fs::write(&config, json.to_string()).expect("config");
    let refused = engine::Engine::load(tmp.path(), Default::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        refused.contains("unsupported cross-encoder NomicBertForSequenceClassification"),
        "{refused}"
    );
}

/// Fixture `name`'s reference pairs, ids and logits, from the model in `dir` (f32), as [`check`] has them.
fn scores_as_reference(name: &str, dir: &std::path::Path) {
    let fixture = FIXTURES
        .iter()
        .position(|f| f.0 == name)
        .expect("a fixture");
    let config = engine::EngineConfig {
        threads: 2,
        ..Default::default()
    };
    check_engine(
        fixture,
        &engine::Engine::load(dir, config).expect("load"),
        1e-5,
    );
}

/// The bug: a CrossEncoder saved by sentence-transformers 6 (`modules.json` naming one Transformer module, whose
/// `sentence_bert_config.json` says `transformer_task: sequence-classification`) was served as an embedding model
/// (its encoder mean-pooled, its head ignored). It is the same cross-encoder as the bare checkpoint.
#[test]
fn a_cross_encoder_saved_by_sentence_transformers_6_is_scored_not_embedded() {
    let tmp = common::models::copied("bert_cross_encoder");
    let write = |name: &str, json: serde_json::Value| {
        std::fs::write(tmp.path().join(name), json.to_string()).expect("write")
    };
    write(
        "modules.json",
        serde_json::json!([{"idx": 0, "name": "0", "path": "",
            "type": "sentence_transformers.base.modules.transformer.Transformer"}]),
    );
    write(
        "sentence_bert_config.json",
        serde_json::json!({"transformer_task": "sequence-classification",
            "modality_config": {"text": {"method": "forward", "method_output_name": "logits"}},
            "module_output_name": "scores"}),
    );
    write(
        "config_sentence_transformers.json",
        serde_json::json!({"model_type": "CrossEncoder", "prompts": {}, "default_prompt_name": null,
            "activation_fn": "torch.nn.modules.activation.Sigmoid"}),
    );
    scores_as_reference("bert_cross_encoder", tmp.path());
    // The task without a classifier's architecture is refused, not embedded.
    common::models::edit_json(&tmp.path().join("config.json"), |c| {
        c["architectures"] = serde_json::json!(["BertModel"])
    });
    let refused = engine::Engine::load(tmp.path(), Default::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(refused.contains("sequence-classification"), "{refused}");
}

/// An older save keeps its chat template in `tokenizer_config.json` (a string, or named templates of which the
/// `default`): the pairs render through it as through `chat_template.jinja`.
#[test]
fn a_chat_template_in_tokenizer_config_is_read_as_the_file() {
    for named in [false, true] {
        let tmp = common::models::copied("qwen3_reranker_seq_cls");
        let file = tmp.path().join("chat_template.jinja");
        let source = std::fs::read_to_string(&file).expect("template");
        std::fs::remove_file(&file).expect("remove");
        common::models::edit_json(&tmp.path().join("tokenizer_config.json"), |c| {
            c["chat_template"] = match named {
                false => serde_json::json!(source),
                true => serde_json::json!([{"name": "tool_use", "template": "{{ nothing }}"},
                    {"name": "default", "template": source}]),
            };
        });
        scores_as_reference("qwen3_reranker_seq_cls", tmp.path());
    }
}

/// With `restore_suffix: false` a pair cut at the limit keeps its first tokens as they are (the template's tail
/// is lost); the reference's cut pairs end in the suffix, so their ids now differ there, and only there.
#[test]
fn restore_suffix_off_leaves_a_cut_pair_as_cut() {
    let tmp = common::models::copied("qwen3_reranker_logit_score");
    common::models::edit_json(&tmp.path().join("sentence_bert_config.json"), |c| {
        c["processing_kwargs"]["chat_template"]["restore_suffix"] = serde_json::json!(false)
    });
    let engine = engine::Engine::load(tmp.path(), Default::default()).expect("load");
    let max_len = engine.info().max_seq_length;
    let mut scratch = Scratch::default();
    let mut differ = 0;
    for p in pairs("qwen3_reranker_logit_score") {
        let mut ids = Vec::new();
        let cut = engine
            .front()
            .encode_pair(&p.query, &p.passage, &mut scratch, &mut ids)
            .expect("pair")
            .cut;
        assert_eq!(ids.len(), p.ids.len());
        match cut {
            false => assert_eq!(ids, p.ids),
            true => {
                assert_eq!(ids.len(), max_len);
                differ += usize::from(ids != p.ids);
                let same = ids.iter().zip(&p.ids).take_while(|(a, b)| a == b).count();
                // The template's tail after the document (`<|im_end|>`, the assistant's turn, an empty think
                // block) is 23 of this tiny vocabulary's tokens.
                assert!(same >= max_len - 23, "differ from token {same}");
            }
        }
    }
    assert!(differ > 3, "{differ} cut pairs differ");
}

/// A template reading sentence-transformers' structured content (`content[0].text`, Gemma's way) gets each
/// message's text as a typed item: the same prompt as the flat template's, so the reference's scores.
#[test]
fn a_structured_template_gets_typed_content() {
    let tmp = common::models::copied("qwen3_reranker_true_logit");
    let path = tmp.path().join("chat_template.jinja");
    let flat = std::fs::read_to_string(&path).expect("template");
    assert!(flat.contains("message.content.strip()"));
    let structured = flat.replace("message.content.strip()", "message.content[0].text.strip()");
    std::fs::write(&path, structured).expect("write");
    // The format told from the template, as sentence-transformers infers it where the module says `auto`.
    let config = tmp.path().join("sentence_bert_config.json");
    common::models::edit_json(&config, |c| {
        c["modality_config"]["message"]["format"] = serde_json::json!("auto")
    });
    scores_as_reference("qwen3_reranker_true_logit", tmp.path());
    // Said by the module's format, it is that format whatever the template looks like.
    common::models::edit_json(&config, |c| {
        c["modality_config"]["message"]["format"] = serde_json::json!("flat")
    });
    let refused = engine::Engine::load(tmp.path(), Default::default())
        .err()
        .expect("a flat string has no content[0].text")
        .to_string();
    assert!(refused.contains("chat template"), "{refused}");
}

/// transformers' sequence classifiers read a decoder's last token that is not its `pad_token_id`: a pair ending in
/// it scores as the pair without it (the model is causal), its trailing pads dropped.
#[test]
fn a_decoder_head_skips_trailing_padding() {
    let tmp = common::models::copied("qwen3_reranker_seq_cls");
    // Without a template, the tokenizer joins the pair (Qwen's: one text after the other).
    std::fs::remove_file(tmp.path().join("chat_template.jinja")).expect("remove");
    let engine = engine::Engine::load(tmp.path(), Default::default()).expect("load");
    assert!(engine.front().chat_pairs().is_none());
    let mut scratch = Scratch::default();
    let mut ids = |b: &str| {
        let mut ids = Vec::new();
        engine
            .front()
            .encode_pair("a query", b, &mut scratch, &mut ids)
            .expect("pair");
        ids
    };
    let plain = ids("a document");
    assert_eq!(ids("a document<|endoftext|><|endoftext|>"), plain);
    assert_eq!(ids("<|endoftext|>"), ids(""));
    // All padding: transformers reads the first token.
    let mut only = Vec::new();
    let pad = "<|endoftext|>";
    engine
        .front()
        .encode_pair(pad, pad, &mut scratch, &mut only)
        .expect("pair");
    assert_eq!(only.len(), 1);
    let scores = engine
        .score(&[
            ("a query", "a document"),
            ("a query", "a document<|endoftext|>"),
        ])
        .expect("score");
    assert_eq!(scores[0], scores[1]);
}

/// `processing_kwargs` as sentence-transformers reads them: the template's `max_length` takes the place of the
/// tokenizer's limit; turning truncation off is refused (the engine cuts at the limit).
#[test]
fn processing_kwargs_set_the_limit() {
    let tmp = common::models::copied("qwen3_reranker_logit_score");
    let config = tmp.path().join("sentence_bert_config.json");
    common::models::edit_json(&config, |c| {
        c["processing_kwargs"]["chat_template"]["max_length"] = serde_json::json!(64);
        c["processing_kwargs"]["text"] = serde_json::json!({"max_length": 100});
    });
    let engine = engine::Engine::load(tmp.path(), Default::default()).expect("load");
    assert_eq!(engine.info().max_seq_length, 64);
    let mut ids = Vec::new();
    let long = "word ".repeat(200);
    engine
        .front()
        .encode_pair("q", &long, &mut Scratch::default(), &mut ids)
        .expect("pair");
    assert_eq!(ids.len(), 64);
    common::models::edit_json(&config, |c| {
        c["processing_kwargs"]["text"]["truncation"] = serde_json::json!(false)
    });
    let refused = engine::Engine::load(tmp.path(), Default::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(refused.contains("truncation"), "{refused}");
}

/// What the engine cannot run as sentence-transformers would is refused: an embedding model whose Transformer
/// module takes chat messages (sentence-transformers renders each text through the template), a text-generation
/// module without LogitScore, a LogitScore token outside the vocabulary or over a model that is not a causal
/// decoder, a template that leaves a role's content out (one of system, user and assistant turns alone), named
/// templates without a `default`, a cross-encoder with a default prompt.
#[test]
fn modules_that_would_run_otherwise_are_refused() {
    let refused = |tmp: &tempfile::TempDir| {
        engine::Engine::load(tmp.path(), Default::default())
            .err()
            .expect("refused")
            .to_string()
    };
    let tmp = common::models::copied("qwen3_causal");
    common::models::edit_json(&tmp.path().join("sentence_bert_config.json"), |c| {
        c["modality_config"] = serde_json::json!({"text": {}, "message": {}})
    });
    assert!(refused(&tmp).contains("chat messages"), "{}", refused(&tmp));

    let tmp = common::models::copied("qwen3_reranker_logit_score");
    common::models::edit_json(&tmp.path().join("1_LogitScore/config.json"), |c| {
        c["true_token_id"] = serde_json::json!(100_000)
    });
    assert!(refused(&tmp).contains("100000"), "{}", refused(&tmp));
    common::models::edit_json(&tmp.path().join("modules.json"), |m| {
        m.as_array_mut().expect("modules").truncate(1)
    });
    assert!(refused(&tmp).contains("LogitScore"), "{}", refused(&tmp));

    let tmp = common::models::copied("qwen3_reranker_logit_score");
    common::models::edit_json(&tmp.path().join("config.json"), |c| {
        c["is_causal"] = serde_json::json!(false)
    });
    assert!(refused(&tmp).contains("causal"), "{}", refused(&tmp));

    let tmp = common::models::copied("qwen3_reranker_logit_score");
    let user_only =
        "{% for m in messages %}{% if m.role == 'user' %}{{ m.content }}{% endif %}{% endfor %}ok";
    std::fs::write(tmp.path().join("chat_template.jinja"), user_only).expect("write");
    assert!(
        refused(&tmp).contains("query's content"),
        "{}",
        refused(&tmp)
    );

    let tmp = common::models::copied("qwen3_reranker_seq_cls");
    std::fs::remove_file(tmp.path().join("chat_template.jinja")).expect("remove");
    common::models::edit_json(&tmp.path().join("tokenizer_config.json"), |c| {
        c["chat_template"] = serde_json::json!([{"name": "tool_use", "template": "{{ messages }}"}])
    });
    assert!(refused(&tmp).contains("default"), "{}", refused(&tmp));

    let tmp = common::models::copied("qwen3_reranker_logit_score");
    common::models::edit_json(&tmp.path().join("config_sentence_transformers.json"), |c| {
        c["prompts"] = serde_json::json!({"instruct": "Judge: "});
        c["default_prompt_name"] = serde_json::json!("instruct");
    });
    assert!(
        refused(&tmp).contains("default_prompt_name"),
        "{}",
        refused(&tmp)
    );
}
