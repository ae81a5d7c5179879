//! The BERT family beyond BERT against sentence-transformers, on the tiny random-weight models
//! `scripts/make_encoder_fixtures.py` made: XLM-RoBERTa with an XLM-R-style Unigram tokenizer, mean pooling and
//! Normalize (multilingual-e5's shape); RoBERTa with a byte-level BPE and `RobertaProcessing`, CLS pooling, no
//! Normalize; MPNet (all-mpnet-base-v2's architecture: a relative position bias on every attention score, no token
//! types) with a WordPiece, mean pooling and Normalize, on sequences long enough to reach its last distance bucket;
//! DistilBERT (no token types, its own tensor and config names) with BERT's special tokens and `BertProcessing`,
//! mean pooling, no Normalize; ModernBERT (rotary positions, pre-norm layers, GeGLU, global layers between
//! sliding-window ones) with a byte-level BPE of its pipeline, without biases (mean pooling, Normalize) and with
//! every bias, other rotary bases and a narrower window (CLS pooling), on sequences many windows long; and
//! sentence-transformers' Dense modules after pooling: LaBSE's head (BERT, CLS, a tanh Dense with bias, Normalize)
//! and EmbeddingGemma's (two Dense without bias or activation, 64 to 256 to 48, Normalize); and Gemma 3's text
//! model as EmbeddingGemma runs it (bidirectional, sliding-window and global layers, four norms a layer, a score
//! scale of its own), its SentencePiece-style tokenizer read by the crate (the default falls back to it), with
//! EmbeddingGemma's head, and with Gemma 3 4B's rotary (its global layers scaled linearly, in transformers 4's
//! `rope_scaling`, the local ones plain); and Gemma 2's (bge-multilingual-gemma2's: causal, local and global
//! layers in turn, no q/k norms, scores soft-capped, last-token pooling); and T5's encoder (relative position
//! buckets other than the default, 4 heads of 24 columns against d_model 64, the gated tanh-GELU feed-forward with sentence-t5's Dense head, and the ReLU
//! one); and the other pooling modes: max over the tokens (BERT) and the sum over the square root of their count
//! (DistilBERT); and the post-norm rotary BERTs: Nomic BERT (nomic-embed-text: SwiGLU) in both tensor namings
//! and both generations of config keys, and GTE (GeGLU, biases) in transformers' config and in Alibaba's NewModel
//! one with its fixed NTK rotary scaling and no token types, and Jina v3 (XLM-R's tokenizer, BERT's GELU MLP, every
//! bias) in the Hub's tensor names and transformers' in-memory ones; and JinaBERT (jina-embeddings-v2: ALiBi over 12
//! heads, GeGLU; its reference written out by scripts/make_jinabert_fixture.py) and Jina's qk-post-norm JinaBERT
//! (jina-embeddings-v2-base-code, -de, -es, -zh: LayerNorms on Q and K, a second residual norm, its own GeGLU
//! order; the same script's); and sentence-transformers' Pooling module with several modes concatenated: all six
//! in an order of their own with the prompt's tokens left out (`include_prompt: false`, INSTRUCTOR's), and CLS
//! and mean in the old flags with a Dense module over both and Normalize; and ALBERT (paraphrase-albert-small-v2's:
//! narrower embeddings projected to the layers' width, five layers running two groups of two shared layers, GELU's
//! tanh approximation; its Unigram tokenizer behind NFKD, accent stripping and lowercasing) and ELECTRA (BERT's layers behind
//! narrower, projected embeddings); and DeBERTa v3 (disentangled attention over log-bucketed relative positions, no
//! position table) and v2 (clamped relative positions with their own projections, a position table, embeddings
//! projected then normed). The first three number positions after the
//! padding id: their texts put `<pad>` inside sequences
//! (it takes the padding row and does not advance the positions after it), `<mask>` after whitespace it strips,
//! and run past max_seq_length; the default tokenizer must give sentence-transformers' ids. Last, the static
//! embeddings (scripts/make_static_fixtures.py's): sentence-transformers' StaticEmbedding in its own folder over a
//! WordPiece run without its [CLS] and [SEP], then Normalize; model2vec's layout at the root, its per-token weights
//! folded into the rows, its tokenizer.json's own truncation; and a WordEmbeddings module (the
//! average_word_embeddings_* models': GloVe's) with its WhitespaceTokenizer's word list and stop words, mean pooling
//! and a max_seq_length that cuts long texts.

mod common;

use engine::{CaptureMode, Dtype, Engine, EngineConfig};

const MODELS: [&str; 32] = [
    "xlmr_mean",
    "roberta_cls",
    "mpnet_mean",
    "distilbert_mean",
    "modernbert_mean",
    "modernbert_cls",
    "bert_dense_cls",
    "distilbert_dense_mean",
    "gemma3_mean",
    "gemma3_linear_mean",
    "gemma2_last",
    "t5_gated_mean",
    "t5_relu_cls",
    "bert_max",
    "distilbert_mean_sqrt",
    "nomic_mean",
    "nomic_renamed_mean",
    "gte_cls",
    "gte_ntk_cls",
    "jina_v3_mean",
    "jina_v3_renamed_mean",
    "jinabert_mean",
    "jinabert_qk_mean",
    "bert_six_modes",
    "distilbert_cls_mean_dense",
    "albert_mean",
    "electra_mean",
    "deberta_mean",
    "deberta_v2_cls",
    "static_mean",
    "model2vec_mean",
    "glove_mean",
];

common::models::fixture_tests!(MODELS);

/// jina-embeddings-v3 as Jina's remote code saves it (an XLM-RoBERTa config with rotary positions and LoRA
/// adapters, whose weights the engine does not read) is refused, naming the checkpoint transformers reads, which
/// it runs.
#[test]
fn jina_v3_remote_code_checkpoint_is_refused_naming_the_hf_one() {
    let tmp = common::models::copied("jina_v3_mean");
    let path = tmp.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("config")).expect("json");
    for (key, value) in [
        ("model_type", serde_json::json!("xlm-roberta")),
        ("architectures", serde_json::json!(["XLMRobertaModel"])),
        ("position_embedding_type", serde_json::json!("rotary")),
        ("rotary_emb_base", serde_json::json!(20000.0)),
        (
            "lora_adaptations",
            serde_json::json!(["retrieval.query", "retrieval.passage"]),
        ),
    ] {
        config[key] = value;
    }
    std::fs::write(&path, config.to_string()).expect("config");
    let err = engine::Engine::load(tmp.path(), engine::EngineConfig::default())
        .err()
        .expect("refused");
    assert!(
        err.to_string().contains("use jinaai/jina-embeddings-v3-hf"),
        "{err}"
    );
}

/// Jina's qk-post-norm JinaBERT (told apart by its tensors) runs only as its checkpoints have it, with ALiBi and
/// the GeGLU feed-forward: a config saying otherwise is refused by name, not run with half the layer misread.
#[test]
fn jinabert_qk_post_norm_without_geglu_is_refused() {
    let tmp = common::models::copied("jinabert_qk_mean");
    let path = tmp.path().join("config.json");
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).expect("config")).expect("json");
    config["feed_forward_type"] = "original".into();
    std::fs::write(&path, config.to_string()).expect("write config");
    let err = engine::Engine::load(tmp.path(), engine::EngineConfig::default())
        .err()
        .expect("refused");
    assert!(err.to_string().contains("qk-post-norm"), "{err}");
}

/// With the prompt left out of pooling, a prompt's last token goes uncounted only when it is one of transformers'
/// `all_special_ids`: the tokens `tokenizer_config.json` and (the fixture's config being a legacy save, without
/// `added_tokens_decoder`) `special_tokens_map.json` name, not those `tokenizer.json` flags special. Each count below is sentence-transformers 6.3's `_get_prompt_length` on the
/// same edit of the fixture (transformers 5.24): the separator [SEP] ends the prompt's ids and stays counted once
/// the files stop naming it as the separator, though `tokenizer.json` still flags it special.
#[test]
fn a_prompts_trailing_separator_counts_unless_the_tokenizer_config_names_it_special() {
    use serde_json::{json, Value};
    /// What is changed, how `tokenizer_config.json` is edited, a `special_tokens_map.json` if any, the count.
    type Edit = (&'static str, fn(&mut Value), Option<Value>, u32);
    let edits: [Edit; 5] = [
        ("as written", |_| {}, None, 31),
        (
            "no sep_token",
            |c| drop(c.as_object_mut().map(|c| c.remove("sep_token"))),
            None,
            32,
        ),
        ("sep_token null", |c| c["sep_token"] = Value::Null, None, 32),
        (
            "another separator in special_tokens_map.json",
            |_| {},
            Some(json!({"sep_token": "[MASK]"})),
            32,
        ),
        (
            "[SEP] as an extra special token",
            |c| {
                c.as_object_mut().map(|c| c.remove("sep_token"));
                c["extra_special_tokens"] = json!(["[SEP]"]);
            },
            None,
            31,
        ),
    ];
    for (what, edit, map, skip) in edits {
        let tmp = common::models::copied("bert_six_modes");
        let path = tmp.path().join("tokenizer_config.json");
        let mut config: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("config")).expect("json");
        edit(&mut config);
        std::fs::write(&path, config.to_string()).expect("write config");
        if let Some(map) = map {
            std::fs::write(tmp.path().join("special_tokens_map.json"), map.to_string())
                .expect("write map");
        }
        let front =
            engine::ModelFront::load(tmp.path(), engine::EngineConfig::default()).expect("loads");
        let query = &front.info().prompts[0];
        assert_eq!((query.name.as_str(), query.skip), ("query", skip), "{what}");
    }
}

/// A model whose Pooling module leaves the prompt out (`include_prompt: false`, as INSTRUCTOR's): a text sent
/// through the gateway with `prompt_name: "query"` embeds as sentence-transformers encodes it with that prompt,
/// each of the six concatenated modes pooling only the tokens after the prompt's (and the CLS before them),
/// weighted means keeping their positions (in f32 and, where the CPU runs it, bf16); the same templated input
/// sent as token ids gets no prompt, so pools every token and embeds elsewhere (what is left out shows); and an
/// over-long text cut from the left, which would lose the prompt in place of its own first tokens, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_left_out_of_pooling_matches_sentence_transformers() {
    use engine::gateway::{Direction, Gateway, GatewayConfig, Inputs, Options};
    let name = "bert_six_modes";
    let dir = common::models::dir(name);
    // The gateway refuses an empty string, which sentence-transformers embeds.
    let fx: Vec<_> = common::read(&dir.join("reference_query.jsonl"), "embedding")
        .into_iter()
        .filter(|f| !f.text.is_empty())
        .collect();
    let texts: Vec<String> = fx.iter().map(|f| f.text.clone()).collect();
    let query = Options {
        prompt_name: Some("query".into()),
        truncate: true,
        ..Default::default()
    };
    let embed = |gateway: Gateway, inputs: Inputs, options: Options| async move {
        let embedded = gateway.embed(inputs, options).await.expect("embed");
        let rows: Vec<Vec<f32>> = embedded
            .vectors
            .iter()
            .map(|r| r.as_slice().to_vec())
            .collect();
        rows
    };
    for dtype in [Dtype::F32, Dtype::Bf16] {
        let engine = common::models::load(name, dtype, CaptureMode::Lazy);
        if engine.backend().info().dtype != dtype {
            eprintln!("SKIPPED bf16: this CPU has no AVX512-BF16");
            continue;
        }
        let prompt = "Represent the question for retrieving supporting documents: ";
        for f in &fx {
            assert_eq!(
                engine
                    .tokenize(&format!("{prompt}{}", f.text))
                    .expect("ids"),
                f.ids
            );
        }
        let gateway = Gateway::new(vec![engine], GatewayConfig::default()).expect("gateway");
        let got = embed(gateway.clone(), Inputs::Texts(texts.clone()), query.clone()).await;
        let worst = fx
            .iter()
            .zip(&got)
            .map(|(f, g)| common::cosine(&f.embedding, g))
            .fold(f64::INFINITY, f64::min);
        println!(
            "{name} {dtype} with prompt_name query: min cosine {worst:.9} over {} texts",
            fx.len()
        );
        let min = if dtype == Dtype::F32 { 0.9999 } else { 0.999 };
        assert!(worst >= min, "{name} {dtype}: min cosine {worst}");
        // The templated ids sent as ids: the whole input, every token pooled (the plain reference's way).
        let ids = Inputs::Ids(fx.iter().map(|f| f.ids.clone()).collect());
        let as_ids = embed(gateway.clone(), ids, query.clone()).await;
        for (i, (a, b)) in as_ids.iter().zip(&got).enumerate() {
            assert!(
                common::cosine(a, b) < 0.9999,
                "text {i}: the prompt's tokens were left out of ids"
            );
        }
        let left = Options {
            direction: Direction::Left,
            ..query.clone()
        };
        let cut = fx
            .iter()
            .find(|f| f.ids.len() == 64)
            .expect("a text cut to the limit");
        let refused = gateway
            .embed(Inputs::Texts(vec![cut.text.clone()]), left.clone())
            .await
            .err()
            .expect("refused");
        assert_eq!(refused.status.as_u16(), 422, "{}", refused.message);
        assert!(
            refused.message.contains("from the left"),
            "{}",
            refused.message
        );
        let short = fx
            .iter()
            .position(|f| f.ids.len() < 40)
            .expect("a short text");
        let kept = embed(
            gateway.clone(),
            Inputs::Texts(vec![texts[short].clone()]),
            left,
        )
        .await;
        let same = common::cosine(&kept[0], &got[short]);
        assert!(
            same > 0.99999,
            "a text not cut embeds as it does cut from the right: {same}"
        );
    }
}

/// A static embedding through the gateway: `/tokenize` shows the ids it pools (no [CLS] or [SEP], though the
/// tokenizer's post-processor has them, unless a request asks for none either way), and a text its tokenizer gives
/// no ids (whitespace alone) is refused with 400 (TEI's `empty`), where sentence-transformers embeds zeros.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_embedding_tokenizes_without_special_tokens_and_refuses_a_text_without_tokens() {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use engine::gateway::{Gateway, GatewayConfig};
    use http_body_util::BodyExt;
    use tower::ServiceExt;
    let name = "static_mean";
    let engine = common::models::load(name, Dtype::F32, CaptureMode::Lazy);
    let want = &common::models::fixtures(name)[0];
    let router = Gateway::new(vec![engine], GatewayConfig::default())
        .expect("gateway")
        .router();
    let post = |path: &str, body: serde_json::Value| {
        let request = Request::post(path)
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .expect("request");
        let router = router.clone();
        async move {
            let response = router.oneshot(request).await.expect("response");
            let status = response.status();
            let bytes = response
                .into_body()
                .collect()
                .await
                .expect("body")
                .to_bytes();
            (
                status,
                serde_json::from_slice::<serde_json::Value>(&bytes).expect("json"),
            )
        }
    };
    let (status, tokens) = post("/tokenize", serde_json::json!({"inputs": want.text})).await;
    assert_eq!(status, StatusCode::OK, "{tokens}");
    let ids: Vec<u32> = tokens[0]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t["id"].as_u64().expect("id") as u32)
        .collect();
    assert_eq!(ids, want.ids);
    assert!(tokens[0]
        .as_array()
        .expect("tokens")
        .iter()
        .all(|t| t["special"] == false));
    let (status, err) = post("/embed", serde_json::json!({"inputs": ["a text", " \t "]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{err}");
    assert_eq!(err["error_type"], "empty", "{err}");
    assert!(
        err["error"].as_str().expect("message").contains("input 1"),
        "{err}"
    );
}

/// Token ids past a static model's limit (model2vec_mean's tokenizer.json truncates at 24) are cut plainly, none
/// kept as a special token it does not have: 30 ids cut from either end embed as the 24 kept do sent whole. And
/// `Engine::embed` names a text that gives no tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_ids_past_a_static_models_limit_are_cut_plainly() {
    use engine::gateway::{Direction, Gateway, GatewayConfig, Inputs, Options};
    let name = "model2vec_mean";
    let gateway = Gateway::new(
        vec![common::models::load(name, Dtype::F32, CaptureMode::Lazy)],
        GatewayConfig::default(),
    )
    .expect("gateway");
    let embed = |ids: Vec<u32>, options: Options| {
        let gateway = gateway.clone();
        async move {
            let embedded = gateway
                .embed(Inputs::Ids(vec![ids]), options)
                .await
                .expect("embed");
            embedded.vectors[0].as_slice().to_vec()
        }
    };
    let ids: Vec<u32> = (5..35).collect();
    for (direction, kept) in [
        (Direction::Left, ids[6..].to_vec()),
        (Direction::Right, ids[..24].to_vec()),
    ] {
        let cut = Options {
            truncate: true,
            direction,
            ..Default::default()
        };
        assert_eq!(
            embed(ids.clone(), cut).await,
            embed(kept, Options::default()).await,
            "{direction:?}"
        );
    }
    let engine = common::models::load(name, Dtype::F32, CaptureMode::Lazy);
    // `Engine::embed` blocks: off the runtime's threads.
    let err = tokio::task::spawn_blocking(move || engine.embed(&["a text", " \t "]))
        .await
        .expect("joined")
        .expect_err("no tokens");
    assert!(err.to_string().contains("text 1 gives no tokens"), "{err}");
}

/// Regression: a limit shorter than the special tokens of the tokenizer's post-processor was refused for a static
/// model, which adds none (the check ran before they were left out). At one token, a text embeds as its first.
#[test]
fn a_static_model_runs_at_a_limit_shorter_than_its_tokenizers_special_tokens() {
    let config = EngineConfig {
        threads: 1,
        max_seq_length: Some(1),
        ..Default::default()
    };
    let engine =
        Engine::load(common::models::dir("static_mean"), config).expect("loads at one token");
    assert_eq!(engine.tokenize("is it").expect("tokenize").len(), 1);
    let [cut, first] =
        [engine.embed(&["is it"]), engine.embed(&["is"])].map(|e| e.expect("embeds"));
    assert_eq!(cut, first);
}
