//! The official `openai` Python client and Hugging Face's `InferenceClient` against the `bench serve` binary
//! (scripts/openai_client_test.py): their embeddings (every encoding format, `models.list()`, `feature_extraction`,
//! `sentence_similarity` through `POST /`), and a TEI-style request's, must equal the engine's in-process ones.
//! Uses the real model when it is cached, the tiny one otherwise. Without python3 and the `openai` package it is
//! skipped, and without `huggingface_hub` its InferenceClient part is, saying so where the test harness does not
//! swallow it (straight to standard error) and counted in the run's skip ledger (`target/tmp/skipped-tests.txt`,
//! which `.ci/run` reports), never passed silently.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use engine::{Engine, EngineConfig};

fn python_has(module: &str) -> bool {
    Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The cached real model, or a tiny one written into `tmp`.
fn model(tmp: &Path) -> PathBuf {
    let real = engine::model::fetch::cache_root()
        .join("models")
        .join(engine::model::fetch::DEFAULT_MODEL);
    if real.join("model.safetensors").is_file() {
        return real;
    }
    eprintln!("the real model is not cached; using the tiny one");
    engine::model::tiny::write_tiny_bert(tmp, Default::default()).unwrap();
    tmp.to_owned()
}

#[path = "../../engine/tests/common/skip.rs"]
mod skip;

fn skipped(test: &str, reason: &str) {
    skip::skipped(env!("CARGO_TARGET_TMPDIR"), test, reason);
}

#[test]
fn openai_python_client_gets_the_engines_embeddings() {
    if !python_has("openai") {
        skipped(
            "openai_python_client_gets_the_engines_embeddings",
            "python3 with the `openai` package is not available (pip install openai)",
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = model(tmp.path());
    let texts = [
        "what is the capital of France?",
        "Paris is the capital and most populous city of France.",
        "Das ist ein Satz auf Deutsch.",
        "🙂 emoji and ünïcödé",
    ];
    let engine = one_thread(&dir);
    let reference = tmp.path().join("reference.json");
    let json = serde_json::json!({ "model": "test-model", "texts": texts, "embeddings": engine.embed(&texts).unwrap() });
    std::fs::write(&reference, json.to_string()).unwrap();
    drop(engine);

    let (server, base) = serve(&dir, &[]);
    let client = run_client(
        "openai_client_test.py",
        &base,
        &reference,
        "openai_python_client_gets_the_engines_embeddings",
    );
    stop(server);
    assert!(
        client.success(),
        "the openai client's embeddings differ from the engine's"
    );
}

fn one_thread(dir: &Path) -> Engine {
    let config = EngineConfig {
        threads: 1,
        ..Default::default()
    };
    Engine::load(dir, config).unwrap()
}

/// Starts `bench serve` on `dir` as `test-model` with `args` on a free port; returns it and its base URL.
fn serve(dir: &Path, args: &[&str]) -> (Child, String) {
    let mut server = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args([
            "serve",
            "--port",
            "0",
            "--threads",
            "1",
            "--model-name",
            "test-model",
        ])
        .args(args)
        .arg("--model")
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line from the server: {line:?}"))
        .to_owned();
    (server, base)
}

/// Runs `scripts/<script>` against the server at `base` with its reference; without `huggingface_hub` its
/// InferenceClient part is left out, and `test`'s skip of it recorded.
fn run_client(script: &str, base: &str, reference: &Path, test: &str) -> std::process::ExitStatus {
    let mut client = Command::new("python3");
    client
        .arg(repo_root().join("scripts").join(script))
        .args(["--base-url", base, "--reference"])
        .arg(reference);
    if !python_has("huggingface_hub") {
        skipped(
            &format!("{test} (its huggingface_hub InferenceClient part)"),
            "python3 with the `huggingface_hub` package is not available (pip install huggingface_hub)",
        );
        client.arg("--no-hf");
    }
    client.status().unwrap()
}

/// SIGTERM: the server drains and exits cleanly.
fn stop(mut server: Child) {
    let term = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    let exit = server.wait().unwrap();
    assert!(term.success());
    assert!(
        exit.success(),
        "the server did not shut down cleanly: {exit:?}"
    );
}

/// A cross-encoder (the random-weight BERT reranker of the engine's fixtures) through Cohere's SDK (`/v2/rerank`,
/// `/v1/rerank`), TEI's `/rerank` and InferenceClient's `text_classification` (`POST /`): the engine's scores,
/// ranked.
#[test]
fn rerank_clients_get_the_engines_scores() {
    if !python_has("cohere") {
        skipped(
            "rerank_clients_get_the_engines_scores",
            "python3 with the `cohere` package is not available (pip install cohere)",
        );
        return;
    }
    let dir = repo_root().join("engine/tests/fixtures/bert_cross_encoder");
    let query = "who signed the decree allowing women to drive?";
    let documents = [
        "A royal decree of 2017 allowed women in Saudi Arabia to drive.",
        "Riyadh is the capital of Saudi Arabia and its largest city, home to about seven million people.",
        "Das ist ein Satz auf Deutsch.",
        "🙂 emoji and ünïcödé",
        "King Salman signed it.",
    ];
    let engine = one_thread(&dir);
    let pairs: Vec<(&str, &str)> = documents.iter().map(|d| (query, *d)).collect();
    let logits: Vec<f32> = engine.score(&pairs).unwrap().iter().map(|l| l[0]).collect();
    let text_logit = engine.embed(&documents[..1]).unwrap()[0][0];
    drop(engine);
    let tmp = tempfile::tempdir().unwrap();
    let reference = tmp.path().join("reference.json");
    let json = serde_json::json!({ "model": "test-model", "query": query, "documents": documents,
                                   "logits": logits, "text_logit": text_logit });
    std::fs::write(&reference, json.to_string()).unwrap();

    let (server, base) = serve(&dir, &["--auto-truncate"]);
    let client = run_client(
        "rerank_client_test.py",
        &base,
        &reference,
        "rerank_clients_get_the_engines_scores",
    );
    stop(server);
    assert!(
        client.success(),
        "a rerank client's scores differ from the engine's"
    );
}
