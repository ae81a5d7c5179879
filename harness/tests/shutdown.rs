//! `bench serve` stopped under load (issue 20): SIGTERM in the middle of a burst stops admission (503 in the JSON
//! error shape, with `Retry-After`), every request the server received is answered, and the process exits 0
//! within its deadline; a second signal exits at once; a request that cannot finish makes the deadline fail the
//! exit. Over loopback, against the real binary, with raw HTTP/1.1 so that every outcome is seen as it is.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn tiny_model(tmp: &Path) -> String {
    let model = tmp.join("model");
    engine::model::tiny::write_tiny_bert(&model, Default::default()).unwrap();
    model.display().to_string()
}

/// A started server: the child, its address, and its standard error as it comes (read by a thread).
struct Server {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<String>>,
}

fn serve(model: &str, args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["serve", "--port", "0", "--threads", "1", "--model", model])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Arc::new(Mutex::new(String::new()));
    let mut pipe = BufReader::new(child.stderr.take().unwrap());
    let sink = stderr.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        while pipe.read_line(&mut line).unwrap_or(0) > 0 {
            sink.lock().unwrap().push_str(&line);
            line.clear();
        }
    });
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    Server {
        child,
        addr,
        stderr,
    }
}

impl Server {
    fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// The exit status, waiting at most `limit`, and how long it took.
    fn wait(&mut self, limit: Duration) -> (ExitStatus, Duration) {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status, start.elapsed());
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                panic!(
                    "still running {limit:?} after the signal; stderr:\n{}",
                    self.stderr.lock().unwrap()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn stderr(&self) -> String {
        // The reader thread may still be taking the last lines.
        std::thread::sleep(Duration::from_millis(100));
        self.stderr.lock().unwrap().clone()
    }
}

/// What one request got.
#[derive(Debug)]
enum Outcome {
    /// A whole response: status, headers (lower case), body.
    Answer(u16, String, String),
    /// The connection was refused: nothing listens any more.
    Refused,
    /// Connected, but the connection closed with no response: left in the listen backlog when the listener went.
    Dropped,
}

fn post(addr: &str, body: &str) -> Outcome {
    let mut conn = match TcpStream::connect(addr) {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Outcome::Refused,
        Err(e) => panic!("connecting: {e}"),
    };
    let request = format!(
        "POST /v1/embeddings HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    if conn.write_all(request.as_bytes()).is_err() {
        return Outcome::Dropped;
    }
    let mut response = Vec::new();
    if conn.read_to_end(&mut response).is_err() || response.is_empty() {
        return Outcome::Dropped;
    }
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole response");
    let status = head[9..12].parse().unwrap();
    Outcome::Answer(status, head.to_ascii_lowercase(), body.to_owned())
}

/// Asserts the one JSON error shape of OpenAI's routes with error type `kind`, and a `Retry-After`; returns the
/// code.
fn assert_refusal(head: &str, body: &str, kind: &str) -> String {
    assert!(head.contains("\r\nretry-after: "), "{head}");
    let v: serde_json::Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert!(v["error"]["message"].is_string(), "{body}");
    assert_eq!(v["error"]["type"], kind, "{body}");
    v["error"]["code"].as_str().unwrap().to_owned()
}

/// The server's closing line: requests received and answered.
fn closing_counts(stderr: &str) -> (usize, usize) {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix("shut down cleanly: "))
        .unwrap_or_else(|| panic!("no closing line in:\n{stderr}"));
    let words: Vec<&str> = line.split(' ').collect();
    (words[0].parse().unwrap(), words[3].parse().unwrap())
}

#[test]
fn sigterm_mid_burst_answers_every_accepted_request_and_exits_0_within_the_deadline() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_model(tmp.path());
    let deadline = Duration::from_secs(20);
    let mut server = serve(&model, &["--shutdown-deadline-ms", "20000"]);
    let inputs: Vec<String> = (0..32)
        .map(|i| format!("passage {i} of the burst, long enough to take some work"))
        .collect();
    let body = serde_json::json!({ "input": inputs }).to_string();
    let answered_ok = Arc::new(AtomicUsize::new(0));
    let clients: Vec<_> = (0..12)
        .map(|_| {
            let (addr, body, ok) = (server.addr.clone(), body.clone(), answered_ok.clone());
            std::thread::spawn(move || {
                // Each client sends until the server refuses it for shutting down (503, or no listener); a
                // refusal for load (429, on a busy machine) is an answer too, and the client goes on.
                let mut outcomes = Vec::new();
                loop {
                    let outcome = post(&addr, &body);
                    let done = !matches!(outcome, Outcome::Answer(200 | 429, ..));
                    if matches!(outcome, Outcome::Answer(200, ..)) {
                        ok.fetch_add(1, Ordering::SeqCst);
                    }
                    if matches!(outcome, Outcome::Answer(429, ..)) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    outcomes.push(outcome);
                    if done {
                        return outcomes;
                    }
                }
            })
        })
        .collect();
    while answered_ok.load(Ordering::SeqCst) < 40 {
        std::thread::sleep(Duration::from_millis(5));
    }
    server.signal("TERM");
    let (status, took) = server.wait(deadline + Duration::from_secs(5));
    let outcomes: Vec<Outcome> = clients
        .into_iter()
        .flat_map(|c| c.join().unwrap())
        .collect();
    let stderr = server.stderr();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(took < deadline, "exited after {took:?}");

    let (mut ok, mut overloaded, mut refused_503, mut refused, mut dropped) = (0, 0, 0, 0, 0);
    for o in &outcomes {
        match o {
            Outcome::Answer(200, _, body) => {
                let v: serde_json::Value = serde_json::from_str(body).unwrap();
                assert_eq!(v["data"].as_array().unwrap().len(), 32);
                ok += 1;
            }
            Outcome::Answer(429, head, body) => {
                assert_refusal(head, body, "overloaded_error");
                overloaded += 1;
            }
            Outcome::Answer(503, head, body) => {
                assert_eq!(
                    assert_refusal(head, body, "unavailable_error"),
                    "shutting_down"
                );
                refused_503 += 1;
            }
            Outcome::Answer(status, head, body) => panic!("{status}: {head}\n{body}"),
            Outcome::Refused => refused += 1,
            Outcome::Dropped => dropped += 1,
        }
    }
    let (received, answered) = closing_counts(&stderr);
    eprintln!(
        "shutdown under load: {ok} answered 200, {overloaded} refused 429 for load, {refused_503} refused 503, {refused} connections refused, \
         {dropped} dropped from the backlog; the server received {received} and answered {answered}; exit 0 \
         {took:?} after SIGTERM"
    );
    // Every request the server received was answered, and every answer reached its client.
    assert_eq!(received, answered);
    assert_eq!(answered, ok + overloaded + refused_503);
    assert!(ok >= 40);
    // Every client stopped on a refusal, of one kind or another, after the signal.
    assert_eq!(refused_503 + refused + dropped, 12);
}

/// An in-flight request that will not finish: its body stops after the headers.
fn stalled_request(addr: &str) -> TcpStream {
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.write_all(
        b"POST /embed HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"inputs\":",
    )
    .unwrap();
    // A moment for the server to read the head and start on the body.
    std::thread::sleep(Duration::from_millis(300));
    conn
}

#[test]
fn a_second_signal_exits_at_once_without_draining() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_model(tmp.path());
    let mut server = serve(&model, &["--shutdown-deadline-ms", "60000"]);
    let _stalled = stalled_request(&server.addr);
    server.signal("TERM");
    std::thread::sleep(Duration::from_millis(300));
    // Still draining: the stalled request holds it (its body timeout is 30 s).
    assert!(server.child.try_wait().unwrap().is_none());
    server.signal("INT");
    let (status, took) = server.wait(Duration::from_secs(5));
    assert_eq!(status.code(), Some(130), "{}", server.stderr());
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(server.stderr().contains("second signal"));
}

#[test]
fn a_request_unfinished_at_the_shutdown_deadline_fails_the_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_model(tmp.path());
    let mut server = serve(&model, &["--shutdown-deadline-ms", "1000"]);
    let _stalled = stalled_request(&server.addr);
    server.signal("TERM");
    let (status, took) = server.wait(Duration::from_secs(10));
    let stderr = server.stderr();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(took >= Duration::from_millis(900), "{took:?}");
    assert!(
        stderr.contains("1 of 1 requests still unanswered at the shutdown deadline (1000 ms)"),
        "{stderr}"
    );
}
