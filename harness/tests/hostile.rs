//! Hostile clients against `bench serve` over loopback (issue 20), in raw TCP so that malformed HTTP reaches the
//! server as sent: slow and idle clients, oversized heads and bodies, chunked bodies, wrong content types, deep
//! JSON, huge numbers, duplicated keys, invalid UTF-8 in every string field, wrong API keys. Each case asserts the
//! status, that the answer is the one JSON error shape (where the server answers; hyper answers a head it cannot
//! parse itself, without a body, before any route runs), and the server is healthy after them all. The table of
//! case → status → code is `results/hostile-clients.md`: this test writes it when `UPDATE_HOSTILE_TABLE=1` and
//! otherwise fails when it differs.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const KEY: &str = "hostile-test-key";
/// The limits the server runs with here: short, so the slow cases are quick.
const HEADER_TIMEOUT_MS: u64 = 800;
const BODY_TIMEOUT_MS: u64 = 800;
const MAX_CONNECTIONS: usize = 32;
const MAX_PAYLOAD: usize = 64 << 10;

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

fn serve(tmp: &Path) -> Server {
    let model = tmp.join("model");
    engine::model::tiny::write_tiny_bert(&model, Default::default()).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["serve", "--port", "0", "--threads", "1", "--model"])
        .arg(&model)
        .args([
            "--header-timeout-ms",
            &HEADER_TIMEOUT_MS.to_string(),
            "--body-timeout-ms",
            &BODY_TIMEOUT_MS.to_string(),
            "--max-connections",
            &MAX_CONNECTIONS.to_string(),
            "--max-payload-bytes",
            &MAX_PAYLOAD.to_string(),
        ])
        .env("EMBED_WORKBENCH_API_KEY", KEY)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let Some(addr) = line.trim().strip_prefix("listening on http://") else {
        let out = child.wait_with_output().unwrap();
        panic!(
            "bench serve did not start ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let addr = addr.to_owned();
    // Its log is not needed once it listens; a thread keeps the pipe from filling.
    let mut stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
    Server { child, addr }
}

/// What a client saw: the status (none when the connection closed without an answer), the head, the body, and
/// how long until the connection closed.
struct Got {
    status: Option<u16>,
    head: String,
    body: Vec<u8>,
    took: Duration,
}

fn connect(addr: &str) -> TcpStream {
    let conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    conn
}

/// Reads until the server closes the connection.
fn read_all(mut conn: TcpStream, start: Instant) -> Got {
    let mut raw = Vec::new();
    // A reset after a partial answer still leaves what came.
    let _ = conn.read_to_end(&mut raw);
    let took = start.elapsed();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let Some((head, _)) = text.split_once("\r\n\r\n") else {
        return Got {
            status: None,
            head: text,
            body: Vec::new(),
            took,
        };
    };
    let body = raw[head.len() + 4..].to_vec();
    Got {
        status: head.get(9..12).and_then(|s| s.parse().ok()),
        head: head.to_ascii_lowercase(),
        body,
        took,
    }
}

/// Sends `bytes` at once and reads the answer.
fn send(addr: &str, bytes: &[u8]) -> Got {
    let start = Instant::now();
    let mut conn = connect(addr);
    // The server may answer and close before all is written (a body over the limit): what it answered counts.
    let _ = conn.write_all(bytes);
    read_all(conn, start)
}

/// A request with the right key, `connection: close`, and a `content-length` unless `extra` says how the body
/// is framed.
fn request(method: &str, path: &str, extra: &str, body: &[u8]) -> Vec<u8> {
    let framing = if extra.to_ascii_lowercase().contains("transfer-encoding") {
        String::new()
    } else {
        format!("content-length: {}\r\n", body.len())
    };
    let mut out = format!(
        "{method} {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\nconnection: close\r\n{framing}{extra}\r\n"
    )
    .into_bytes();
    out.extend_from_slice(body);
    out
}

fn post_json(path: &str, body: &[u8]) -> Vec<u8> {
    request("POST", path, "content-type: application/json\r\n", body)
}

/// What a case must get.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// A success.
    Ok,
    /// This status, with the one JSON error shape.
    Json(u16),
    /// This status from hyper itself: a head it will not parse gets no body and reaches no route.
    Hyper(u16),
    /// No answer: the connection closed within about this long.
    Closed(Duration),
}

struct Case {
    name: &'static str,
    expect: Expect,
    run: Box<dyn Fn(&str) -> Got>,
}

fn case(name: &'static str, expect: Expect, run: impl Fn(&str) -> Got + 'static) -> Case {
    Case {
        name,
        expect,
        run: Box::new(run),
    }
}

/// A case sending one request at once.
fn sent(name: &'static str, expect: Expect, bytes: Vec<u8>) -> Case {
    case(name, expect, move |addr| send(addr, &bytes))
}

/// The body of an error answer checked against the one JSON shape of its surface; returns its code (OpenAI's
/// `error.code`, TEI's `error_type`).
fn error_code(got: &Got) -> String {
    let v: serde_json::Value = serde_json::from_slice(&got.body).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            got.head,
            String::from_utf8_lossy(&got.body)
        )
    });
    assert!(
        got.head.contains("content-type: application/json"),
        "{}",
        got.head
    );
    if let Some(error) = v["error"].as_object() {
        assert!(
            error["message"].is_string() && error["type"].is_string(),
            "{v}"
        );
        error["code"].as_str().unwrap().to_owned()
    } else {
        assert!(v["error"].is_string(), "{v}");
        v["error_type"].as_str().unwrap().to_owned()
    }
}

fn invalid_utf8_in(template: &str) -> Vec<u8> {
    let (before, after) = template.split_once("BAD").unwrap();
    [before.as_bytes(), b"a\xff\xfeb", after.as_bytes()].concat()
}

fn cases() -> Vec<Case> {
    let ms = Duration::from_millis;
    let closed = Expect::Closed(ms(HEADER_TIMEOUT_MS));
    let deep = |n: usize| format!("{{\"inputs\": {}\"a\"{}}}", "[".repeat(n), "]".repeat(n));
    let big = "x".repeat(MAX_PAYLOAD + 1);
    let mut cases = vec![
        case("slow headers: half a head, then nothing", closed, |addr| {
            let start = Instant::now();
            let mut conn = connect(addr);
            conn.write_all(b"POST /embed HTTP/1.1\r\nhost: x\r\n").unwrap();
            read_all(conn, start)
        }),
        case("slow headers: one byte every 100 ms", closed, |addr| {
            let start = Instant::now();
            let mut conn = connect(addr);
            for b in b"POST /embed HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaa" {
                if conn.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            read_all(conn, start)
        }),
        case("idle connection: connects, sends nothing", closed, |addr| {
            let start = Instant::now();
            read_all(connect(addr), start)
        }),
        case("slow body: headers, then part of the body, then nothing", Expect::Json(408), |addr| {
            let start = Instant::now();
            let mut conn = connect(addr);
            let mut bytes = post_json("/embed", br#"{"inputs": "a"}"#);
            bytes.truncate(bytes.len() - 5);
            conn.write_all(&bytes).unwrap();
            read_all(conn, start)
        }),
        case("slow body: one byte every 100 ms", Expect::Json(408), |addr| {
            let start = Instant::now();
            let mut conn = connect(addr);
            let body = br#"{"inputs": "a slow body that trickles in"}"#;
            let bytes = post_json("/v1/embeddings", body);
            let head = bytes.len() - body.len();
            conn.write_all(&bytes[..head]).unwrap();
            for b in body {
                if conn.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            read_all(conn, start)
        }),
        sent(
            "oversized header: one value of 20 KiB",
            Expect::Hyper(431),
            request("GET", "/info", &format!("x-big: {}\r\n", "a".repeat(20 << 10)), b""),
        ),
        sent(
            "too many headers: 200",
            Expect::Hyper(431),
            request(
                "GET",
                "/info",
                &(0..200).map(|i| format!("x-h{i}: v\r\n")).collect::<String>(),
                b"",
            ),
        ),
        sent(
            "oversized request line: a 20 KiB path",
            Expect::Hyper(431),
            request("GET", &format!("/{}", "p".repeat(20 << 10)), "", b""),
        ),
        sent("garbage request line", Expect::Hyper(400), b"GARBAGE\r\n\r\n".to_vec()),
        sent(
            "NUL byte in a header value",
            Expect::Hyper(400),
            request("GET", "/info", "x-nul: a\0b\r\n", b""),
        ),
        // RFC 9112 6.3: transfer-encoding wins, and the chunked body is read (here, JSON cut short).
        sent(
            "both content-length and transfer-encoding",
            Expect::Json(400),
            {
                let mut b = request(
                    "POST",
                    "/embed",
                    "content-type: application/json\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n",
                    b"",
                );
                b.extend_from_slice(b"5\r\n{\"a\":\r\n0\r\n\r\n");
                b
            },
        ),
        sent(
            "body over the limit, with content-length",
            Expect::Json(413),
            post_json("/embed", format!("{{\"inputs\": \"{big}\"}}").as_bytes()),
        ),
        sent("body over the limit, chunked (no content-length)", Expect::Json(413), {
            let body = format!("{{\"inputs\": \"{big}\"}}");
            let mut b = request(
                "POST",
                "/v1/embeddings",
                "content-type: application/json\r\ntransfer-encoding: chunked\r\n",
                b"",
            );
            for chunk in body.as_bytes().chunks(4096) {
                b.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                b.extend_from_slice(chunk);
                b.extend_from_slice(b"\r\n");
            }
            b.extend_from_slice(b"0\r\n\r\n");
            b
        }),
        sent(
            "content-length over the limit, expecting 100-continue",
            Expect::Json(413),
            format!(
                "POST /embed HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {KEY}\r\nconnection: close\r\n\
                 content-type: application/json\r\nexpect: 100-continue\r\ncontent-length: 100000000\r\n\r\n"
            )
            .into_bytes(),
        ),
        sent("chunked body, well formed", Expect::Ok, {
            let mut b = request(
                "POST",
                "/embed",
                "content-type: application/json\r\ntransfer-encoding: chunked\r\n",
                b"",
            );
            b.extend_from_slice(b"7\r\n{\"input\r\n8\r\ns\": \"a\"}\r\n0\r\n\r\n");
            b
        }),
        sent("chunked body, bad chunk size", Expect::Json(400), {
            let mut b = request(
                "POST",
                "/embed",
                "content-type: application/json\r\ntransfer-encoding: chunked\r\n",
                b"",
            );
            b.extend_from_slice(b"zz\r\n{\"inputs\": \"a\"}\r\n0\r\n\r\n");
            b
        }),
        case("body shorter than its content-length, then end of stream", Expect::Json(400), |addr| {
            let start = Instant::now();
            let mut conn = connect(addr);
            let mut bytes = post_json("/embed", br#"{"inputs": "a"}"#);
            bytes.truncate(bytes.len() - 3);
            conn.write_all(&bytes).unwrap();
            conn.shutdown(std::net::Shutdown::Write).unwrap();
            read_all(conn, start)
        }),
        sent(
            "wrong content type: text/plain",
            Expect::Json(415),
            request("POST", "/v1/embeddings", "content-type: text/plain\r\n", br#"{"input": "a"}"#),
        ),
        sent(
            "wrong content type: multipart/form-data",
            Expect::Json(415),
            request(
                "POST",
                "/embed",
                "content-type: multipart/form-data; boundary=x\r\n",
                b"--x\r\n\r\na\r\n--x--\r\n",
            ),
        ),
        sent(
            "content type not UTF-8",
            Expect::Json(415),
            invalid_utf8_in(&String::from_utf8(request("POST", "/embed", "content-type: BAD\r\n", br#"{"inputs": "a"}"#)).unwrap()),
        ),
        sent("deep JSON nesting: 20000 arrays", Expect::Json(400), post_json("/embed", deep(20_000).as_bytes())),
        sent(
            "deep JSON nesting, 5000 objects, in the ignored field `user`",
            Expect::Ok,
            post_json(
                "/v1/embeddings",
                format!("{{\"input\": \"a\", \"user\": {}1{}}}", "{\"a\":".repeat(5000), "}".repeat(5000)).as_bytes(),
            ),
        ),
        sent(
            "deep JSON nesting through POST /",
            Expect::Json(400),
            post_json("/", deep(20_000).as_bytes()),
        ),
        sent(
            "huge number as a token id",
            Expect::Json(400),
            post_json("/embed", br#"{"inputs": [123456789012345678901234567890]}"#),
        ),
        sent(
            "token id past u32",
            Expect::Json(400),
            post_json("/v1/embeddings", br#"{"input": [[101, 4294967296, 102]]}"#),
        ),
        sent(
            "huge float as dimensions",
            Expect::Json(400),
            post_json("/v1/embeddings", br#"{"input": "a", "dimensions": 1e400}"#),
        ),
        sent(
            "dimensions past usize",
            Expect::Json(400),
            post_json("/embed", br#"{"inputs": "a", "dimensions": 99999999999999999999999}"#),
        ),
        sent(
            "negative dimensions",
            Expect::Json(400),
            post_json("/v1/embeddings", br#"{"input": "a", "dimensions": -1}"#),
        ),
        sent(
            "duplicated key: inputs twice",
            Expect::Json(400),
            post_json("/embed", br#"{"inputs": "a", "inputs": "b"}"#),
        ),
        sent(
            "duplicated key: model twice",
            Expect::Json(400),
            post_json("/v1/embeddings", br#"{"input": "a", "model": "x", "model": "y"}"#),
        ),
        sent(
            "lone surrogate escape in a string",
            Expect::Json(400),
            post_json("/embed", br#"{"inputs": "\ud800"}"#),
        ),
        sent(
            "empty body",
            Expect::Json(400),
            post_json("/embed", b""),
        ),
        sent("JSON null body", Expect::Json(400), post_json("/v1/embeddings", b"null")),
    ];
    // Invalid UTF-8 in every string field of every route that reads a body.
    for (name, path, template) in [
        (
            "invalid UTF-8 in OpenAI input",
            "/v1/embeddings",
            r#"{"input": "BAD"}"#,
        ),
        (
            "invalid UTF-8 in OpenAI input array",
            "/v1/embeddings",
            r#"{"input": ["a", "BAD"]}"#,
        ),
        (
            "invalid UTF-8 in OpenAI model",
            "/v1/embeddings",
            r#"{"input": "a", "model": "BAD"}"#,
        ),
        (
            "invalid UTF-8 in OpenAI encoding_format",
            "/v1/embeddings",
            r#"{"input": "a", "encoding_format": "BAD"}"#,
        ),
        (
            "invalid UTF-8 in OpenAI prompt_name",
            "/v1/embeddings",
            r#"{"input": "a", "prompt_name": "BAD"}"#,
        ),
        (
            "invalid UTF-8 in OpenAI priority",
            "/v1/embeddings",
            r#"{"input": "a", "priority": "BAD"}"#,
        ),
        (
            "invalid UTF-8 in OpenAI user",
            "/v1/embeddings",
            r#"{"input": "a", "user": "BAD"}"#,
        ),
        (
            "invalid UTF-8 in a key",
            "/v1/embeddings",
            r#"{"input": "a", "BAD": 1}"#,
        ),
        (
            "invalid UTF-8 in TEI inputs",
            "/embed",
            r#"{"inputs": "BAD"}"#,
        ),
        (
            "invalid UTF-8 in TEI truncation_direction",
            "/embed",
            r#"{"inputs": "a", "truncation_direction": "BAD"}"#,
        ),
        (
            "invalid UTF-8 in TEI prompt_name",
            "/embed",
            r#"{"inputs": "a", "prompt_name": "BAD"}"#,
        ),
        (
            "invalid UTF-8 in /embed_all inputs",
            "/embed_all",
            r#"{"inputs": "BAD"}"#,
        ),
        (
            "invalid UTF-8 in /tokenize inputs",
            "/tokenize",
            r#"{"inputs": "BAD"}"#,
        ),
        (
            "invalid UTF-8 in /similarity source_sentence",
            "/similarity",
            r#"{"inputs": {"source_sentence": "BAD", "sentences": ["a"]}}"#,
        ),
        (
            "invalid UTF-8 in /similarity sentences",
            "/similarity",
            r#"{"inputs": {"source_sentence": "a", "sentences": ["BAD"]}}"#,
        ),
        (
            "invalid UTF-8 in POST / inputs",
            "/",
            r#"{"inputs": "BAD"}"#,
        ),
    ] {
        cases.push(sent(
            name,
            Expect::Json(400),
            post_json(path, &invalid_utf8_in(template)),
        ));
    }
    cases.extend([
        sent(
            "invalid UTF-8 in the x-priority header",
            Expect::Json(400),
            invalid_utf8_in(
                &String::from_utf8(request(
                    "POST",
                    "/embed",
                    "content-type: application/json\r\nx-priority: BAD\r\n",
                    br#"{"inputs": "a"}"#,
                ))
                .unwrap(),
            ),
        ),
        sent("wrong API key", Expect::Json(401), {
            let b = post_json("/v1/embeddings", br#"{"input": "a"}"#);
            String::from_utf8(b).unwrap().replace(KEY, "hostile-test-kez").into_bytes()
        }),
        sent("API key a prefix of the right one", Expect::Json(401), {
            let b = post_json("/embed", br#"{"inputs": "a"}"#);
            String::from_utf8(b).unwrap().replace(KEY, &KEY[..5]).into_bytes()
        }),
        sent("API key in the wrong scheme", Expect::Json(401), {
            let b = post_json("/v1/embeddings", br#"{"input": "a"}"#);
            String::from_utf8(b).unwrap().replace("Bearer", "Basic").into_bytes()
        }),
        sent(
            "no API key",
            Expect::Json(401),
            b"POST /embed HTTP/1.1\r\nhost: x\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: 15\r\n\r\n{\"inputs\": \"a\"}".to_vec(),
        ),
        sent("unknown route", Expect::Json(404), post_json("/v2/embeddings", br#"{"input": "a"}"#)),
        sent("wrong method", Expect::Json(405), request("GET", "/embed", "", b"")),
        case("many idle connections: the limit, then a request", Expect::Ok, |addr| {
            // Every permit held by a client that sends nothing: the request waits in the backlog until the head
            // timeout frees a connection, and is then answered.
            let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS + 8).map(|_| connect(addr)).collect();
            let got = send(addr, &post_json("/embed", br#"{"inputs": "a"}"#));
            drop(idle);
            got
        }),
        case("pipelined requests: three in one write", Expect::Ok, |addr| {
            let one = request("POST", "/embed", "content-type: application/json\r\nconnection: keep-alive\r\n", br#"{"inputs": "a"}"#);
            let one = String::from_utf8(one).unwrap().replace("connection: close\r\n", "");
            let last = post_json("/embed", br#"{"inputs": "c"}"#);
            let bytes = [one.as_bytes(), one.as_bytes(), &last].concat();
            let got = send(addr, &bytes);
            let text = String::from_utf8_lossy(&got.body);
            assert_eq!(text.matches("HTTP/1.1 200").count(), 2, "{text}");
            got
        }),
    ]);
    cases
}

/// One row of the table: the status and the code, as a client sees them.
fn row(got: &Got) -> (String, String) {
    match got.status {
        None => ("closed".into(), "— (no answer)".into()),
        Some(s) if s < 400 => (s.to_string(), "—".into()),
        Some(s) if got.body.is_empty() => (s.to_string(), "— (hyper, no body)".into()),
        Some(s) => (s.to_string(), format!("`{}`", error_code(got))),
    }
}

fn healthy(addr: &str) {
    let got = send(addr, &request("GET", "/health", "", b""));
    assert_eq!(got.status, Some(200));
    let got = send(
        addr,
        &post_json("/v1/embeddings", br#"{"input": ["healthy", "still"]}"#),
    );
    assert_eq!(got.status, Some(200));
    let v: serde_json::Value = serde_json::from_slice(&got.body).unwrap();
    assert_eq!(v["data"].as_array().unwrap().len(), 2);
}

#[test]
fn hostile_clients_get_their_status_in_the_json_error_shape_and_the_server_stays_healthy() {
    let tmp = tempfile::tempdir().unwrap();
    let mut server = serve(tmp.path());
    healthy(&server.addr);
    let mut table = String::from(
        "# Hostile clients against `bench serve`\n\n\
         Written by `harness/tests/hostile.rs` (`UPDATE_HOSTILE_TABLE=1 cargo test -p harness --test hostile`), which \
         fails when the server's answers differ from this table. Limits of the run: head timeout 800 ms, body \
         timeout 800 ms, 32 connections, 64 KiB bodies, an API key. The code is OpenAI's `error.code` on `/v1/` \
         routes, TEI's `error_type` elsewhere; hyper answers a head it cannot parse itself, without a body, before \
         any route runs.\n\n| # | case | status | code |\n|---:|---|---|---|\n",
    );
    let all = cases();
    assert!(all.len() >= 30);
    let mut wrong = Vec::new();
    for (i, c) in all.iter().enumerate() {
        let got = (c.run)(&server.addr);
        let seen = match (c.expect, got.status) {
            (Expect::Ok, Some(200)) => true,
            (Expect::Json(want), Some(status)) => want == status && !got.body.is_empty(),
            (Expect::Hyper(want), Some(status)) => want == status && got.body.is_empty(),
            (Expect::Closed(within), None) => got.took < within * 3,
            _ => false,
        };
        if !seen {
            wrong.push(format!(
                "{}: expected {:?}, got {:?} after {:?}: {} {}",
                c.name,
                c.expect,
                got.status,
                got.took,
                got.head,
                String::from_utf8_lossy(&got.body)
            ));
            continue;
        }
        let (status, code) = row(&got);
        table.push_str(&format!("| {} | {} | {status} | {code} |\n", i + 1, c.name));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    healthy(&server.addr);
    assert!(
        server.child.try_wait().unwrap().is_none(),
        "the server died"
    );

    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/hostile-clients.md");
    if std::env::var_os("UPDATE_HOSTILE_TABLE").is_some() {
        std::fs::write(&path, &table).unwrap();
    } else {
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(
            committed,
            table,
            "the answers differ from {}: rerun with UPDATE_HOSTILE_TABLE=1 if the change is meant",
            path.display()
        );
    }
}
