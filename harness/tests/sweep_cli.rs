//! `bench sweep`, `bench replay` and `bench report` end to end on the tiny random model, with steps short enough
//! for a test: the files a run writes (versioned JSON that reads back, CSV, PNG/SVG plots, HTML page), the
//! in-process and HTTP targets, knob axes, and the errors a person gets for bad input. Figures are not checked
//! here (the machine is shared and loaded); the unit tests check them on a paused clock.

use std::path::Path;
use std::process::{Command, Output};

fn bench(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "bench failed:\n{stderr}");
    stderr
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A scratch directory holding the tiny model; runs write results/ and reports/ inside it.
fn scratch() -> (tempfile::TempDir, String) {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("model");
    engine::model::tiny::write_tiny_bert(&model, Default::default()).unwrap();
    let model = model.display().to_string();
    (tmp, model)
}

#[test]
fn sweep_over_knob_axes_writes_results_and_a_report() {
    let (tmp, model) = scratch();
    let stderr = ok(&bench(
        &[
            "sweep",
            "--model",
            &model,
            "--set",
            "threads=1",
            "--set",
            "overlap=false",
            "--axis",
            "replicas=1,2",
            "--arrivals",
            "poisson",
            "--probe-s",
            "0.6",
            "--probe-concurrency",
            "8",
            "--step-s",
            "1",
            "--warmup-s",
            "0.2",
            "--spread",
            "2",
            "--max-steps",
            "2",
            "--run-id",
            "t",
        ],
        tmp.path(),
    ));
    assert!(stderr.contains("replicas=2: saturation point"), "{stderr}");
    assert!(stderr.contains("best setting for the SLO"), "{stderr}");

    let result = json(&tmp.path().join("results/t/result.json"));
    assert_eq!(result["schema_version"], 1);
    assert_eq!(result["command"], "sweep");
    let configs = result["configs"].as_array().unwrap();
    assert_eq!(configs.len(), 2);
    for c in configs {
        // The probe and two measured steps, each with percentiles, a histogram and the rule behind its verdict.
        let steps = c["steps"].as_array().unwrap();
        assert_eq!(steps.len(), 3, "{c}");
        assert_eq!(steps[0]["level"]["concurrency"], 8);
        let online = &steps[1]["classes"][0];
        assert!(online["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
        assert!(!online["latency_histogram"].as_str().unwrap().is_empty());
        assert!(online["stability"]["rule"]
            .as_str()
            .unwrap()
            .contains("backlog"));
        assert!(c["saturation"]["how"].as_str().unwrap().contains("SLO"));
        assert_eq!(c["engine"]["threads"], 1);
        assert_eq!(c["engine"]["overlap"], false);
    }
    let replicas: Vec<u64> = configs
        .iter()
        .map(|c| c["replicas"].as_u64().unwrap())
        .collect();
    assert_eq!(replicas, [1, 2]);
    assert!(result["machine"]["cores"].as_u64().unwrap() >= 1);

    let csv = std::fs::read_to_string(tmp.path().join("results/t/summary.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 2 * 3, "{csv}");
    assert!(csv.starts_with("config,step,phase,level,class,offered/s"));
    for file in [
        "latency.png",
        "latency.svg",
        "throughput.png",
        "throughput.svg",
        "index.html",
    ] {
        let path = tmp.path().join("reports/t").join(file);
        assert!(
            std::fs::metadata(&path)
                .map(|m| m.len() > 1000)
                .unwrap_or(false),
            "{}",
            path.display()
        );
    }
    let page = std::fs::read_to_string(tmp.path().join("reports/t/index.html")).unwrap();
    assert!(page.contains("<img src=\"latency.svg\"") && page.contains("saturation point"));

    // The report can be drawn again from the results alone.
    std::fs::remove_dir_all(tmp.path().join("reports/t")).unwrap();
    ok(&bench(&["report", "results/t"], tmp.path()));
    assert!(tmp.path().join("reports/t/latency.png").is_file());
}

#[test]
fn replays_over_http_and_a_batch_reindex() {
    let (tmp, model) = scratch();
    ok(&bench(
        &[
            "replay",
            "--model",
            &model,
            "--set",
            "threads=1",
            "--target",
            "serve",
            "--arrivals",
            "mooncake",
            "--rate",
            "40",
            "--duration-s",
            "1.5",
            "--run-id",
            "http",
        ],
        tmp.path(),
    ));
    let result = json(&tmp.path().join("results/http/result.json"));
    let step = &result["configs"][0]["steps"][0];
    assert!(step["classes"][0]["ok"].as_u64().unwrap() > 0, "{step}");
    // Our server's /metrics gave the batch counters.
    assert!(step["batches"]["batches"].as_f64().unwrap() > 0.0, "{step}");
    assert!(tmp
        .path()
        .join("reports/http/timeline_latency.png")
        .is_file());

    let stderr = ok(&bench(
        &[
            "replay",
            "--model",
            &model,
            "--set",
            "threads=1",
            "--workload",
            "batch",
            "--corpus-limit",
            "40",
            "--batch-size",
            "8",
            "--run-id",
            "batch",
        ],
        tmp.path(),
    ));
    assert!(
        stderr.contains("embedded passages_en (40 texts)"),
        "{stderr}"
    );
    let result = json(&tmp.path().join("results/batch/result.json"));
    let batch = &result["configs"][0]["steps"][0]["classes"][0];
    assert_eq!(batch["ok"], 5, "{batch}");
}

#[test]
fn bad_input_gets_a_clear_error() {
    let (tmp, model) = scratch();
    for (args, expected) in [
        (
            vec!["sweep", "--workload", "offline"],
            "invalid value 'offline'",
        ),
        (
            vec!["sweep", "--model", &model, "--arrivals", "nosuch"],
            "unknown arrivals `nosuch`",
        ),
        (
            vec!["sweep", "--model", &model, "--axis", "batch_tokens=1,2"],
            "the knobs are:",
        ),
        (
            vec![
                "sweep",
                "--model",
                &model,
                "--set",
                "tokenizer=sentencepiece",
            ],
            "tokenizer",
        ),
        (
            vec![
                "sweep",
                "--target",
                "http://127.0.0.1:9",
                "--set",
                "threads=1",
            ],
            "external target",
        ),
        (
            vec!["replay", "--model", &model, "--arrivals", "poisson"],
            "--rate is needed",
        ),
        (vec!["report", "results/none"], "results/none/result.json"),
        (
            vec!["sweep", "--model", &model, "--step-s=-1"],
            "--step-s must be a positive number",
        ),
        (
            vec!["sweep", "--model", &model, "--timeout-ms", "0"],
            "--timeout-ms must be a positive",
        ),
        // A fault needs replica processes, and one inside every step: said at once, not when a step ends.
        (
            vec![
                "replay",
                "--model",
                &model,
                "--rate",
                "10",
                "--kill-replica-at-s",
                "1",
            ],
            "needs --target processes",
        ),
        (
            vec![
                "sweep",
                "--target",
                "processes",
                "--model",
                &model,
                "--probe-s",
                "5",
                "--kill-replica-at-s",
                "6",
            ],
            "shorter than --probe-s (5)",
        ),
    ] {
        let out = bench(&args, tmp.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let trace = tmp.path().join("broken.csv");
    std::fs::write(&trace, "TIMESTAMP,ContextTokens\nnot a time,4\n").unwrap();
    let out = bench(
        &[
            "sweep",
            "--model",
            &model,
            "--arrivals",
            trace.to_str().unwrap(),
        ],
        tmp.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("broken.csv, line 2") && stderr.contains("not a time"),
        "{stderr}"
    );
}

/// A server that answers every request 500, on a thread, until the test ends.
fn failing_server() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    let body = "{\"error\":\"broken\"}";
                    let reply = format!(
                        "HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if conn.write_all(reply.as_bytes()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    format!("http://{addr}")
}

#[test]
fn replay_and_sweep_exit_2_when_the_target_is_unreachable() {
    let tmp = tempfile::tempdir().unwrap();
    // A port just released: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let replay = ["--rate", "5", "--duration-s", "1", "--warmup-s", "0"];
    for (command, extra) in [("replay", &replay[..]), ("sweep", &[])] {
        let mut args = vec![command, "--target", &url, "--arrivals", "poisson"];
        args.extend(extra);
        let out = bench(&args, tmp.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{command}: {stderr}");
        assert!(stderr.contains("is unreachable"), "{stderr}");
    }
}

#[test]
fn replay_exits_3_when_every_request_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let url = failing_server();
    let out = bench(
        &[
            "replay",
            "--target",
            &url,
            "--arrivals",
            "poisson",
            "--rate",
            "10",
            "--duration-s",
            "1",
            "--warmup-s",
            "0",
            "--no-report",
        ],
        tmp.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("no request was answered"), "{stderr}");
    assert!(stderr.contains("500"), "the first error is named: {stderr}");
}

/// A replica process that cannot start says why: its standard error was thrown away, so the run said only that
/// it "exited before listening".
#[test]
fn a_replica_process_that_fails_to_start_shows_its_stderr() {
    let (tmp, model) = scratch();
    let weights = Path::new(&model).join("model.safetensors");
    std::fs::write(&weights, b"not safetensors").unwrap();
    let out = bench(
        &[
            "replay",
            "--target",
            "processes",
            "--model",
            &model,
            "--set",
            "threads=1",
            "--arrivals",
            "poisson",
            "--rate",
            "10",
            "--duration-s",
            "1",
            "--no-report",
        ],
        tmp.path(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("exited before listening") && stderr.contains("model.safetensors"),
        "{stderr}"
    );
}

/// `--target processes`: the harness starts `replicas` replica processes and a gateway in front of them; with
/// `--kill-replica-at-s` one is killed mid-step and the step reports what that cost (nothing lost, nothing
/// answered twice, its pieces re-sent), and it is started again for the next step.
#[test]
fn a_fault_step_kills_a_replica_process_loses_no_request_and_does_not_wait_on_its_last_reported_load(
) {
    let (tmp, model) = scratch();
    let started = std::time::Instant::now();
    let stderr = ok(&bench(
        &[
            "replay",
            "--target",
            "processes",
            "--model",
            &model,
            "--set",
            "replicas=2",
            "--set",
            "threads=1",
            // Batches wait for more work, so a replica's queue is seldom empty when its health check reads it.
            "--set",
            "max_wait_ms=90",
            "--arrivals",
            "poisson",
            "--rate",
            "60",
            "--duration-s",
            "3",
            "--warmup-s",
            "0.2",
            "--timeout-ms",
            "20000",
            "--kill-replica-at-s",
            "1.0",
            "--run-id",
            "f",
            "--no-report",
        ],
        tmp.path(),
    ));
    // The step's settle waited for the killed replica's last reported load, which never came down: 30 s.
    let wall = started.elapsed();
    assert!(
        wall < std::time::Duration::from_secs(25),
        "a 3 s fault step took {wall:?}\n{stderr}"
    );
    assert!(stderr.contains("2 replica processes"), "{stderr}");
    let result = json(&tmp.path().join("results/f/result.json"));
    let step = &result["configs"][0]["steps"][0];
    let fault = &step["fault"];
    assert!(
        fault["what"].as_str().unwrap().contains("killed (SIGKILL)"),
        "{fault}"
    );
    assert_eq!(fault["lost"], 0, "{fault}\n{stderr}");
    assert_eq!(fault["duplicated"], 0, "{fault}");
    let class = &step["classes"][0];
    assert_eq!(
        (&class["errors"], &class["timeouts"]),
        (&0.into(), &0.into()),
        "{class}"
    );
    assert!(class["ok"].as_u64().unwrap() > 0, "{class}");
}

/// Sweeps `model` for one short step on each target (each with arguments of its own after `args`), and checks that
/// every request of every step was answered, in class `class`.
fn every_request_answered(
    tmp: &Path,
    model: &str,
    args: &[&str],
    targets: &[(&str, &[&str])],
    class: &str,
) {
    for (i, (target, extra)) in targets.iter().enumerate() {
        let id = format!("{class}{i}");
        let mut all = vec!["sweep", "--target", target, "--model", model];
        all.extend_from_slice(args);
        all.extend_from_slice(extra);
        all.extend_from_slice(&[
            "--set",
            "threads=1",
            "--arrivals",
            "poisson",
            "--probe-s",
            "0.5",
            "--probe-concurrency",
            "2",
            "--step-s",
            "0.6",
            "--warmup-s",
            "0.2",
            "--max-steps",
            "1",
            "--run-id",
            &id,
        ]);
        ok(&bench(&all, tmp));
        let result = json(&tmp.join(format!("results/{id}/result.json")));
        let steps = result["configs"][0]["steps"].as_array().unwrap();
        for step in steps {
            let got = &step["classes"][0];
            assert_eq!(got["class"], class, "{target}: {got}");
            assert!(got["ok"].as_u64().unwrap() > 0, "{target}: {got}");
            assert_eq!(got["ok"], got["requests"], "{target}: {got}");
            assert_eq!(got["errors"], 0, "{target}: {got}");
        }
    }
}

/// A reranker's traffic: a cross-encoder swept with one query against passages per request, in-process and over
/// HTTP (Cohere's `/v1/rerank`, as a URL target of `--api openai` sends it), every request answered; a
/// workload of the other kind of model (or a classifier of several labels, which ranks nothing) is refused before
/// anything runs.
#[test]
fn a_rerank_sweep_scores_a_query_against_passages_per_request() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures");
    let cross = fixtures.join("bert_cross_encoder").display().to_string();
    every_request_answered(
        tmp.path(),
        &cross,
        &["--workload", "rerank", "--rerank-passages", "5"],
        &[("in-process", &[]), ("serve", &[])],
        "rerank",
    );
    let model = |name: &str| fixtures.join(name).display().to_string();
    for (workload, name, says) in [
        ("rerank", "bert_max", "needs a cross-encoder"),
        ("rerank", "distilbert_nli", "of one label"),
        (
            "online",
            "bert_cross_encoder",
            "run it with --workload rerank",
        ),
    ] {
        let out = bench(
            &["sweep", "--workload", workload, "--model", &model(name)],
            tmp.path(),
        );
        assert!(!out.status.success(), "{workload} on {name}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{workload} on {name}: {stderr}");
    }
}

/// A sparse (SPLADE) model swept in-process and over HTTP through TEI's `/embed_sparse` (`--api tei-sparse`),
/// every request answered, and a bare `*ForMaskedLM` checkpoint made one by `--set pooling=splade`; over HTTP a
/// sparse model needs that API, which a dense one refuses, before anything runs.
#[test]
fn a_sparse_model_is_swept_through_embed_sparse() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures");
    let model = |name: &str| fixtures.join(name).display().to_string();
    every_request_answered(
        tmp.path(),
        &model("bert_splade"),
        &["--workload", "online"],
        &[("in-process", &[]), ("serve", &["--api", "tei-sparse"])],
        "online",
    );
    // The checkpoint alone (a bare BertForMaskedLM) is dense until a knob pools it by SPLADE.
    let bare = tempfile::tempdir().unwrap();
    for file in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        std::fs::copy(
            fixtures.join("bert_splade").join(file),
            bare.path().join(file),
        )
        .unwrap();
    }
    let bare_model = bare.path().display().to_string();
    let runs = tempfile::tempdir().unwrap();
    every_request_answered(
        runs.path(),
        &bare_model,
        &["--workload", "online", "--set", "pooling=splade"],
        &[("serve", &["--api", "tei-sparse"])],
        "online",
    );
    let args = [
        "sweep",
        "--target",
        "serve",
        "--api",
        "tei-sparse",
        "--model",
        &bare_model,
    ];
    let out = bench(&args, tmp.path());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("needs a sparse (SPLADE) model"), "{stderr}");
    refused_over_http(
        tmp.path(),
        &[
            ("bert_splade", "tei", "run it with --api tei-sparse"),
            ("bert_splade", "openai", "run it with --api tei-sparse"),
            ("bert_max", "tei-sparse", "needs a sparse (SPLADE) model"),
        ],
    );
}

/// `bench sweep --target serve --api API --model` each (fixture, API) fails before anything runs, saying `says`.
fn refused_over_http(tmp: &Path, cases: &[(&str, &str, &str)]) {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures");
    for &(name, api, says) in cases {
        let model = fixtures.join(name).display().to_string();
        let args = [
            "sweep", "--target", "serve", "--api", api, "--model", &model,
        ];
        let out = bench(&args, tmp);
        assert!(!out.status.success(), "{name} over {api}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{name} over {api}: {stderr}");
    }
}

/// A multi-vector (ColBERT) model swept in-process and over HTTP through `/embed_multi` (`--api tei-multi`), its
/// queries (`--query-prompt-name query`) each run as 16 tokens (the fixture's fixed expansion: cut to it or padded
/// up to it), every request answered; the rerank workload ranks by its MaxSim; over HTTP it needs that API, which
/// a dense model refuses, before anything runs.
#[test]
fn a_multi_vector_model_is_swept_through_embed_multi() {
    let tmp = tempfile::tempdir().unwrap();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures");
    let model = |name: &str| fixtures.join(name).display().to_string();
    let colbert = model("bert_colbert");
    let targets: [(&str, &[&str]); 2] = [("in-process", &[]), ("serve", &["--api", "tei-multi"])];
    every_request_answered(
        tmp.path(),
        &colbert,
        &["--workload", "online", "--query-prompt-name", "query"],
        &targets,
        "online",
    );
    for (i, (target, _)) in targets.iter().enumerate() {
        let result = json(&tmp.path().join(format!("results/online{i}/result.json")));
        let step = &result["configs"][0]["steps"][0]["classes"][0];
        let per_input =
            step["tokens_per_s"].as_f64().unwrap() / step["inputs_per_s"].as_f64().unwrap();
        assert!(
            (per_input - 16.0).abs() < 1e-6,
            "{target}: {per_input} tokens per query"
        );
    }
    every_request_answered(
        tmp.path(),
        &colbert,
        &["--workload", "rerank"],
        &[("in-process", &[]), ("serve", &["--api", "tei"])],
        "rerank",
    );
    refused_over_http(
        tmp.path(),
        &[
            ("bert_colbert", "tei", "run it with --api tei-multi"),
            (
                "bert_max",
                "tei-multi",
                "needs a multi-vector (ColBERT) model",
            ),
        ],
    );
}

/// `--query-prompt-name` sends the online class's texts with that `prompt_name`, in-process and over HTTP: an
/// inference-free sparse model's `query` route looks each query up without special tokens, so its requests count
/// fewer tokens per input than the same queries through the model's route; route names are taken where the model
/// has no prompts, `--passage-prompt-name` names the batch class's, and result.json records each class's; a name
/// the model has neither as a prompt nor as a route is refused before anything runs, and so is a prompt on rerank
/// pairs or for a class the workload does not have.
#[test]
fn a_prompt_name_rides_with_each_request_of_its_class() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../engine/tests/fixtures");
    let model = fixtures
        .join("distilbert_router_splade")
        .display()
        .to_string();
    let per_input = |extra: &[&str], target: &str, api: &[&str]| -> f64 {
        let tmp = tempfile::tempdir().unwrap();
        let mut args = vec!["--workload", "online"];
        args.extend_from_slice(extra);
        every_request_answered(tmp.path(), &model, &args, &[(target, api)], "online");
        let result = json(&tmp.path().join("results/online0/result.json"));
        let step = &result["configs"][0]["steps"][0]["classes"][0];
        step["tokens_per_s"].as_f64().unwrap() / step["inputs_per_s"].as_f64().unwrap()
    };
    for (target, api) in [
        ("in-process", &[][..]),
        ("serve", &["--api", "tei-sparse"][..]),
    ] {
        let documents = per_input(&[], target, api);
        let queries = per_input(&["--query-prompt-name", "query"], target, api);
        // Less [CLS] and [SEP]: about 2 tokens fewer per query (fewer where a long query is cut at the limit).
        assert!(
            queries < documents - 1.0 && queries > documents - 2.5,
            "{target}: {queries} tokens per query looked up, {documents} through the model"
        );
    }
    // Route names alone (a save without prompts), both classes of a mixed workload, recorded in result.json.
    let routes_only = tempfile::tempdir().unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-r")
        .arg(format!("{model}/."))
        .arg(routes_only.path())
        .status()
        .unwrap();
    assert!(copied.success());
    let st = routes_only.path().join("config_sentence_transformers.json");
    let mut config = json(&st);
    config["prompts"] = serde_json::json!({});
    std::fs::write(&st, config.to_string()).unwrap();
    let runs = tempfile::tempdir().unwrap();
    every_request_answered(
        runs.path(),
        &routes_only.path().display().to_string(),
        &[
            "--workload",
            "mixed",
            "--batch-size",
            "4",
            "--query-prompt-name",
            "query",
            "--passage-prompt-name",
            "document",
        ],
        &[("in-process", &[])],
        "online",
    );
    let result = json(&runs.path().join("results/online0/result.json"));
    let classes = &result["workload"]["classes"];
    assert_eq!(classes[0]["prompt_name"], "query", "{classes}");
    assert_eq!(classes[1]["prompt_name"], "document", "{classes}");
    let tmp = tempfile::tempdir().unwrap();
    for (args, says) in [
        (
            &["--query-prompt-name", "nope"][..],
            "--query-prompt-name nope",
        ),
        (
            &["--workload", "online", "--passage-prompt-name", "document"][..],
            "does not have",
        ),
        (
            &["--workload", "rerank", "--query-prompt-name", "query"][..],
            "take no prompt",
        ),
    ] {
        let mut all = vec!["sweep", "--model", &model];
        all.extend_from_slice(args);
        let out = bench(&all, tmp.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{says}: {stderr}"
        );
    }
}
