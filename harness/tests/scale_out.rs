//! Scale-out on loopback, with the real `bench` binary (issue 19): a gateway (`--role gateway`) in front of two
//! replica processes (`--role replica`) answers what one process answers; a replica SIGKILLed during a burst
//! costs no request (each is answered 200 with its own embeddings, or refused 429/503 in the JSON error shape,
//! once, and none hangs); a replica started again on its port is used again. On the tiny random model.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use engine::{Engine, EngineConfig};

/// A `bench serve` process, killed when dropped.
struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(model: &Path, args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["serve", "--threads", "1", "--model"])
        .arg(model)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    Server { child, addr }
}

/// A replica whose online deadline is far past any wait here: what these tests count is what a replica's failure
/// does, so a busy test machine must not turn queueing into 429s (a burst's last requests were refused once).
fn replica(model: &Path, port: u16) -> Server {
    serve(
        model,
        &[
            "--role",
            "replica",
            "--port",
            &port.to_string(),
            "--online-deadline-ms",
            "60000",
        ],
    )
}

/// A gateway in front of `replicas`, checking them every 100 ms, splitting requests into pieces of 2 inputs.
fn gateway(model: &Path, replicas: &[&Server]) -> Server {
    gateway_with(model, replicas, &[])
}

/// [`gateway`] with `extra` arguments of its own.
fn gateway_with(model: &Path, replicas: &[&Server], extra: &[&str]) -> Server {
    let mut args = vec![
        "--role",
        "gateway",
        "--port",
        "0",
        "--split-size",
        "2",
        "--health-interval-ms",
        "100",
        "--health-timeout-ms",
        "300",
    ];
    for r in replicas {
        args.extend(["--replica", &r.addr]);
    }
    args.extend_from_slice(extra);
    serve(model, &args)
}

/// One HTTP/1.1 exchange on a fresh connection: the status and the body. Panics if no answer comes in 60 s.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response)
        .unwrap_or_else(|e| panic!("no answer from {addr}{path}: {e}"));
    let status = response[9..12].parse().unwrap();
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

/// Waits until every replica of the gateway at `addr` is up.
fn wait_up(addr: &str, replicas: usize) {
    let start = Instant::now();
    loop {
        let (status, body) = http(addr, "GET", "/info", "");
        let info: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        let up = info["replica_states"]
            .as_array()
            .map_or(0, |r| r.iter().filter(|r| r["up"] == true).count());
        if status == 200 && up == replicas {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "replicas not up: {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn embeddings(body: &str) -> Vec<Vec<f32>> {
    let v: serde_json::Value = serde_json::from_str(body).unwrap();
    v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["embedding"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect()
        })
        .collect()
}

fn request(texts: &[String]) -> String {
    serde_json::json!({ "input": texts }).to_string()
}

/// Batches a replica ran, from its `/metrics`.
fn batches(replica: &Server) -> u64 {
    let (_, text) = http(&replica.addr, "GET", "/metrics", "");
    text.lines()
        .find_map(|l| l.strip_prefix("embed_batch_tokens_count "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

fn counter(addr: &str, name: &str) -> u64 {
    let (_, text) = http(addr, "GET", "/metrics", "");
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

fn tiny(tmp: &Path) -> std::path::PathBuf {
    let dir = tmp.join("model");
    engine::model::tiny::write_tiny_bert(&dir, Default::default()).unwrap();
    dir
}

/// The tiny model's pooling leaves the prompt out (`include_prompt: false`), so that how many tokens a replica's
/// pooling skips has to travel with the work: a request with a prompt answers as one process does only if it does.
#[test]
fn a_gateway_and_two_replica_processes_answer_as_one_process_does() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny(tmp.path());
    std::fs::write(
        model.join("1_Pooling/config.json"),
        r#"{"pooling_mode": "mean", "include_prompt": false}"#,
    )
    .unwrap();
    std::fs::write(
        model.join("config_sentence_transformers.json"),
        r#"{"prompts": {"query": "query: "}}"#,
    )
    .unwrap();
    let (a, b) = (replica(&model, 0), replica(&model, 0));
    let gw = gateway(&model, &[&a, &b]);
    let single = serve(&model, &["--port", "0"]);
    wait_up(&gw.addr, 2);
    let texts: Vec<String> = (0..7)
        .map(|i| format!("sentence number {i} of the comparison"))
        .collect();
    for (path, prompt) in [
        ("/v1/embeddings", None),
        ("/embed", None),
        ("/embed_all", None),
        ("/embed", Some("query")),
    ] {
        let body = if path == "/v1/embeddings" {
            request(&texts)
        } else {
            serde_json::json!({ "inputs": texts, "normalize": false, "prompt_name": prompt })
                .to_string()
        };
        let (status, split) = http(&gw.addr, "POST", path, &body);
        assert_eq!(status, 200, "{split}");
        let (status, whole) = http(&single.addr, "POST", path, &body);
        assert_eq!(status, 200, "{whole}");
        let parse = |b: &str| -> serde_json::Value { serde_json::from_str(b).unwrap() };
        let (split, whole) = (parse(&split), parse(&whole));
        let pick = |v: &serde_json::Value| {
            if path == "/v1/embeddings" {
                v["data"].clone()
            } else {
                v.clone()
            }
        };
        // Bitwise: the floats travel as IEEE-754 bytes, and a sequence's embedding does not depend on its batch.
        assert_eq!(pick(&split), pick(&whole), "{path} with prompt {prompt:?}");
    }
    // Seven inputs in pieces of two went to both replicas.
    assert!(batches(&a) > 0 && batches(&b) > 0);
}

/// A gateway in front of two replica processes of fixture `name` answers each (path, body) as one process does,
/// and both replicas ran batches.
fn answers_through_replicas_as_one_process(name: &str, requests: &[(&str, serde_json::Value)]) {
    let model = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../engine/tests/fixtures")
        .join(name);
    let (a, b) = (replica(&model, 0), replica(&model, 0));
    let gw = gateway(&model, &[&a, &b]);
    let single = serve(&model, &["--port", "0"]);
    wait_up(&gw.addr, 2);
    for (path, body) in requests {
        let (status, split) = http(&gw.addr, "POST", path, &body.to_string());
        assert_eq!(status, 200, "{split}");
        let (status, whole) = http(&single.addr, "POST", path, &body.to_string());
        assert_eq!(status, 200, "{whole}");
        let parse = |b: &str| -> serde_json::Value { serde_json::from_str(b).unwrap() };
        assert_eq!(parse(&split), parse(&whole), "{name} {path}");
    }
    assert!(batches(&a) > 0 && batches(&b) > 0);
}

/// Texts of a few words and of a sentence, so a question cut against the short ones changes where its pairs'
/// tokens of type 1 start.
const TEXTS: [&str; 5] = [
    "in 2018",
    "a royal decree of King Salman in September 2017 allowed women in Saudi Arabia to drive cars",
    "riyadh",
    "the ban was lifted in June 2018 after decades of campaigning by Saudi women's rights activists",
    "women drive now",
];

/// A cross-encoder's pairs through the replica protocol: where each pair's tokens of type 1 start travels with
/// its piece (a gateway cuts a request into pieces where that changes), so a gateway in front of replicas ranks
/// as one process does, for pairs with the query whole and pairs with it cut against a short passage.
#[test]
fn a_cross_encoder_ranks_through_replicas_as_one_process_does() {
    let query = "when was the law allowing women to drive in saudi arabia put into effect, and who signed it?";
    answers_through_replicas_as_one_process(
        "bert_cross_encoder",
        &[
            (
                "/rerank",
                serde_json::json!({ "query": query, "texts": TEXTS, "truncate": true, "raw_scores": true }),
            ),
            (
                "/predict",
                serde_json::json!({ "inputs": [[TEXTS[1]], [query, TEXTS[0]], [query, TEXTS[1]]], "truncate": true }),
            ),
        ],
    );
}

/// A sparse model's vectors, as wide as its vocabulary (three of the engine's projection blocks), come back
/// through the replica protocol whole: `/embed_sparse` through a gateway and replicas answers as one process.
#[test]
fn a_sparse_model_embeds_through_replicas_as_one_process_does() {
    answers_through_replicas_as_one_process(
        "bert_splade",
        &[(
            "/embed_sparse",
            serde_json::json!({ "inputs": TEXTS, "truncate": true }),
        )],
    );
}

/// An inference-free sparse model through replicas: its document route runs on them, its query route is looked up
/// at the gateway; both answer as one process does.
#[test]
fn an_inference_free_sparse_model_answers_through_replicas_as_one_process_does() {
    answers_through_replicas_as_one_process(
        "distilbert_router_splade",
        &[
            (
                "/embed_sparse",
                serde_json::json!({ "inputs": TEXTS, "truncate": true }),
            ),
            (
                "/embed_sparse",
                serde_json::json!({ "inputs": TEXTS, "truncate": true, "prompt_name": "query" }),
            ),
        ],
    );
}

/// What became of one request of the burst.
#[derive(Debug)]
enum Outcome {
    Answered,
    Refused(u16),
}

#[test]
fn a_replica_killed_in_a_burst_loses_no_request_and_one_restarted_is_used_again() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny(tmp.path());
    let (a, b) = (replica(&model, 0), replica(&model, 0));
    let a_port: u16 = a.addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let gw = gateway(&model, &[&a, &b]);
    wait_up(&gw.addr, 2);
    let reference = Engine::load(
        &model,
        EngineConfig {
            threads: 1,
            ..Default::default()
        },
    )
    .unwrap();

    // 16 clients send 10 requests each of 8 inputs (4 pieces), each text naming its request; replica A is killed
    // once a third of them are answered.
    let (clients, each) = (16, 10);
    let answered = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let outcomes = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients)
            .map(|c| {
                let (addr, answered, reference) = (&gw.addr, answered.clone(), &reference);
                scope.spawn(move || {
                    (0..each)
                        .map(|r| {
                            let id = c * each + r;
                            let texts: Vec<String> = (0..8)
                                .map(|i| format!("request {id} input {i} of the burst"))
                                .collect();
                            let (status, body) =
                                http(addr, "POST", "/v1/embeddings", &request(&texts));
                            answered.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let outcome = match status {
                                200 => {
                                    // Its own embeddings, in order: no piece of another request in it.
                                    assert_eq!(embeddings(&body), reference.embed(&texts).unwrap());
                                    Outcome::Answered
                                }
                                429 | 503 => {
                                    let error: serde_json::Value = serde_json::from_str(&body)
                                        .unwrap_or_else(|_| panic!("not JSON: {body}"));
                                    assert!(error["error"]["message"].is_string(), "{body}");
                                    Outcome::Refused(status)
                                }
                                s => panic!("request {id}: status {s}: {body}"),
                            };
                            (id, outcome)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        while answered.load(std::sync::atomic::Ordering::Relaxed) < clients * each / 3 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let mut a = a;
        a.child.kill().unwrap();
        a.child.wait().unwrap();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect::<Vec<_>>()
    });
    // Every request has exactly one outcome.
    let mut ids: Vec<usize> = outcomes.iter().map(|(id, _)| *id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), clients * each);
    assert_eq!(outcomes.len(), clients * each);
    let refused: Vec<u16> = outcomes
        .iter()
        .filter_map(|(_, o)| match o {
            Outcome::Refused(status) => Some(*status),
            Outcome::Answered => None,
        })
        .collect();
    let lost = counter(&gw.addr, "embed_replica_lost_pieces_total");
    let resent = counter(&gw.addr, "embed_replica_resent_pieces_total");
    eprintln!(
        "burst of {}: {} answered, refused {refused:?}; pieces lost with the killed replica {lost}, sent \
         again {resent}",
        clients * each,
        clients * each - refused.len()
    );
    // Pieces were on the replica when it died, and with one replica left and an ample retry budget, every one
    // of them went to it.
    assert!(
        lost > 0,
        "nothing was in flight on the killed replica: the test tested nothing"
    );
    assert_eq!(lost, resent);
    assert!(refused.is_empty(), "{outcomes:?}");

    // Started again on its port, the replica is taken back and given work.
    let a = replica(&model, a_port);
    wait_up(&gw.addr, 2);
    let texts: Vec<String> = (0..8).map(|i| format!("after the restart {i}")).collect();
    let (status, body) = http(&gw.addr, "POST", "/v1/embeddings", &request(&texts));
    assert_eq!(status, 200, "{body}");
    assert_eq!(embeddings(&body), reference.embed(&texts).unwrap());
    assert!(batches(&a) > 0, "the restarted replica ran nothing");
}

/// Sends `signal` (`STOP`, `CONT`) to the server's process.
fn signal(server: &Server, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &server.child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn a_stalled_replica_is_taken_out_its_pieces_answered_elsewhere_and_taken_back_when_it_wakes() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny(tmp.path());
    let (a, b) = (replica(&model, 0), replica(&model, 0));
    let gw = gateway(&model, &[&a, &b]);
    wait_up(&gw.addr, 2);
    signal(&a, "STOP");
    // Pieces sent to the stalled replica before its health checks fail are sent to the other one after.
    let texts: Vec<String> = (0..8).map(|i| format!("while it is stalled {i}")).collect();
    let start = Instant::now();
    let (status, body) = http(&gw.addr, "POST", "/v1/embeddings", &request(&texts));
    assert_eq!(status, 200, "{body}");
    assert_eq!(embeddings(&body).len(), 8);
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(counter(&gw.addr, "embed_replica_lost_pieces_total") > 0);
    signal(&a, "CONT");
    wait_up(&gw.addr, 2);
    let before = batches(&a);
    let (status, body) = http(&gw.addr, "POST", "/v1/embeddings", &request(&texts));
    assert_eq!(status, 200, "{body}");
    assert!(batches(&a) > before, "the woken replica ran nothing");
    drop(b);
}

#[test]
fn a_gateway_with_no_replica_up_refuses_with_503_and_takes_one_that_comes_up() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny(tmp.path());
    // A free port with nothing on it yet, under a name that must be resolved.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target = format!("localhost:{port}");
    let gw = serve(
        &model,
        &[
            "--role",
            "gateway",
            "--port",
            "0",
            "--replica",
            &target,
            "--health-interval-ms",
            "100",
        ],
    );
    let (status, body) = http(&gw.addr, "POST", "/v1/embeddings", &request(&["a".into()]));
    assert_eq!(status, 503, "{body}");
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["error"]["code"], "no_replica", "{body}");
    assert_eq!(http(&gw.addr, "GET", "/health", "").0, 503);

    let _replica = replica(&model, port);
    let start = Instant::now();
    while http(&gw.addr, "GET", "/health", "").0 != 200 {
        assert!(start.elapsed() < Duration::from_secs(30), "never up");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, body) = http(&gw.addr, "POST", "/v1/embeddings", &request(&["a".into()]));
    assert_eq!(status, 200, "{body}");
}

/// A replica that pools otherwise than its gateway (`--pooling` given to one side only: the same shape, other
/// vectors) is not taken; one that pools alike is.
#[test]
fn a_replica_pooling_otherwise_than_its_gateway_is_not_used() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny(tmp.path());
    let (plain, cls) = (
        replica(&model, 0),
        serve(
            &model,
            &["--role", "replica", "--port", "0", "--pooling", "cls"],
        ),
    );
    let gw = gateway_with(&model, &[&plain, &cls], &["--pooling", "cls"]);
    wait_up(&gw.addr, 1);
    // Past a few more health checks, the other is still out.
    std::thread::sleep(Duration::from_millis(500));
    let (_, body) = http(&gw.addr, "GET", "/info", "");
    let info: serde_json::Value = serde_json::from_str(&body).unwrap();
    let states = info["replica_states"].as_array().unwrap();
    let up: Vec<&str> = states
        .iter()
        .filter(|r| r["up"] == true)
        .map(|r| r["addr"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(up.len(), 1, "{body}");
    let texts: Vec<String> = (0..6).map(|i| format!("text {i}")).collect();
    let (status, answer) = http(&gw.addr, "POST", "/v1/embeddings", &request(&texts));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        batches(&plain),
        0,
        "the replica pooling by the mean ran a batch"
    );
    assert!(batches(&cls) > 0);
}
