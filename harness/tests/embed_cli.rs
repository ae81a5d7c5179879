//! `bench embed` and `bench serve` as a person runs them, on the tiny random model (issue 21): truncation counted
//! or refused, kept fields passed through in input order, blank lines and a byte-order mark, Ctrl-C keeping what
//! is done, a prompt put before each input; and `serve` failing on a busy port before it loads a model.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn tiny_model(tmp: &Path) -> String {
    let model = tmp.join("model");
    engine::model::tiny::write_tiny_bert(&model, Default::default()).unwrap();
    model.display().to_string()
}

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(args)
        .output()
        .unwrap()
}

fn lines(out: &Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Output lines of a run, asserting it succeeded.
fn ok_lines(out: &Output) -> Vec<serde_json::Value> {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    lines(out)
}

#[test]
fn embed_counts_truncated_inputs_and_no_truncate_refuses_them() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_model(tmp.path());
    let corpus = tmp.path().join("corpus.txt");
    // The tiny model's limit is 48 tokens: the second line is over it.
    std::fs::write(
        &corpus,
        format!("short\n{}\nalso short\n", "a ".repeat(100)),
    )
    .unwrap();
    let corpus = corpus.display().to_string();
    let cut = bench(&[
        "embed",
        "--model",
        &model,
        "--threads",
        "1",
        "--lines",
        &corpus,
    ]);
    let stderr = String::from_utf8_lossy(&cut.stderr);
    assert!(cut.status.success(), "{stderr}");
    assert_eq!(lines(&cut).len(), 3);
    assert!(
        stderr.contains("1 input over the model's limit of 48 tokens cut to it"),
        "{stderr}"
    );
    let refused = bench(&[
        "embed",
        "--model",
        &model,
        "--threads",
        "1",
        "--lines",
        "--no-truncate",
        &corpus,
    ]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("input line 2 is over the model's limit of 48 tokens"),
        "{stderr}"
    );
}

/// `--prompt-name` puts the model's prompt before every input, as `prompt_name` over HTTP (by default the model's
/// `default_prompt_name`, if set; `''` for none): with the prompt pooled the answer is the templated text's; where the model's
/// pooling leaves the prompt out (`include_prompt: false`) it is another, the same in bulk and one input at a
/// time; a prompt the model lacks is refused naming those it has.
#[test]
fn embed_puts_the_prompt_before_each_input_and_pools_as_the_model_says() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_model(tmp.path());
    let dir = Path::new(&model);
    std::fs::write(
        dir.join("config_sentence_transformers.json"),
        r#"{"prompts": {"query": "query: ", "passage": "passage: "}}"#,
    )
    .unwrap();
    let (plain, templated) = (
        tmp.path().join("plain.txt"),
        tmp.path().join("templated.txt"),
    );
    std::fs::write(&plain, "is it\nwhat is the capital of france\n").unwrap();
    std::fs::write(
        &templated,
        "query: is it\nquery: what is the capital of france\n",
    )
    .unwrap();
    let (plain, templated) = (plain.display().to_string(), templated.display().to_string());
    let embed = |file: &str, extra: &[&str]| {
        let mut args = vec!["embed", "--model", &model, "--threads", "1", "--lines"];
        args.extend_from_slice(extra);
        args.push(file);
        ok_lines(&bench(&args))
    };
    let prompted = embed(&plain, &["--prompt-name", "query"]);
    assert_eq!(prompted, embed(&templated, &[]));
    let bare = embed(&plain, &[]);
    assert_ne!(prompted, bare);
    // The model's own default prompt, where it names one; `--prompt-name` replaces it, `''` leaves it off.
    std::fs::write(
        dir.join("config_sentence_transformers.json"),
        r#"{"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": "query"}"#,
    )
    .unwrap();
    assert_eq!(embed(&plain, &[]), prompted);
    assert_ne!(embed(&plain, &["--prompt-name", "passage"]), prompted);

    std::fs::write(
        dir.join("1_Pooling/config.json"),
        r#"{"pooling_mode": "mean", "include_prompt": false}"#,
    )
    .unwrap();
    let without_prompt = embed(&plain, &["--prompt-name", "query"]);
    assert_eq!(without_prompt.len(), 2);
    assert_ne!(without_prompt, prompted);
    assert_eq!(
        without_prompt,
        embed(&plain, &["--prompt-name", "query", "--per-input"])
    );
    assert_eq!(
        embed(&plain, &[]),
        without_prompt,
        "the default prompt is left out too"
    );
    assert_eq!(embed(&plain, &["--prompt-name", ""]), bare);

    let unknown = bench(&[
        "embed",
        "--model",
        &model,
        "--lines",
        "--prompt-name",
        "nope",
        &plain,
    ]);
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert!(!unknown.status.success());
    assert!(
        stderr.contains("no prompt `nope`") && stderr.contains("passage, query"),
        "{stderr}"
    );
}

#[test]
fn embed_passes_kept_fields_through_in_input_order_skipping_blank_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_model(tmp.path());
    let corpus = tmp.path().join("corpus.jsonl");
    let mut text = String::from("\u{feff}");
    for i in 0..300 {
        text += &format!("{{\"id\": \"doc-{i}\", \"text\": \"passage {i}\", \"n\": {i}}}\n");
        if i % 100 == 0 {
            text += "\n";
        }
    }
    std::fs::write(&corpus, text).unwrap();
    let corpus = corpus.display().to_string();
    let out = bench(&["embed", "--model", &model, "--threads", "1", &corpus]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = lines(&out);
    assert_eq!(lines.len(), 300);
    for (i, l) in lines.iter().enumerate() {
        assert_eq!(l["id"], format!("doc-{i}"));
        assert!(l.get("n").is_none() && l.get("text").is_none(), "{l}");
        assert_eq!(l["embedding"].as_array().unwrap().len(), 32);
    }
    assert!(stderr.contains("3 blank lines skipped"), "{stderr}");
    let both = bench(&[
        "embed",
        "--model",
        &model,
        "--threads",
        "1",
        "--keep",
        "n,id",
        &corpus,
    ]);
    let first = &ok_lines(&both)[0];
    let keys: Vec<&String> = first.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["embedding", "id", "n"]);
}

#[test]
fn embed_interrupted_keeps_every_line_written_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_model(tmp.path());
    let corpus = tmp.path().join("corpus.txt");
    let mut file = std::fs::File::create(&corpus).unwrap();
    for i in 0..400_000 {
        writeln!(file, "passage number {i} of a long corpus").unwrap();
    }
    drop(file);
    let mut child = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["embed", "--model", &model, "--threads", "1", "--lines"])
        .arg(&corpus)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    // Results stream: the first line comes long before the corpus is done.
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    serde_json::from_str::<serde_json::Value>(&first).unwrap();
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let rest: Vec<String> = stdout.lines().map(Result::unwrap).collect();
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    // The summary counts what the output holds.
    let held = format!("the output holds the {} embedded so far", rest.len() + 1);
    assert!(stderr.contains(&held), "{held}: {stderr}");
    assert!(rest.len() + 1 < 400_000, "stopped early");
    for l in &rest {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["embedding"].as_array().unwrap().len(), 32);
    }
}

#[test]
fn serve_finds_a_busy_port_before_loading_the_model() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    // No model there: had it been loaded first, that would be the error.
    let out = bench(&["serve", "--port", &port, "--model", "/nonexistent/model"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("binding 127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(!stderr.contains("nonexistent"), "{stderr}");
}

/// Starts `bench serve` on a free port with `args` and `env`; returns the child and its base URL.
fn serve(model: &str, args: &[&str], env: &[(&str, &str)]) -> (std::process::Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(["serve", "--port", "0", "--threads", "1", "--model", model])
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .to_owned();
    (child, url)
}

/// The status of a POST of `body` to `url` with an `Authorization` header when `key` is given.
fn status(url: &str, key: Option<&str>) -> u16 {
    use std::io::Read;
    let addr = url.strip_prefix("http://").unwrap();
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    let body = r#"{"input": "a"}"#;
    let auth = key.map_or(String::new(), |k| format!("authorization: Bearer {k}\r\n"));
    write!(
        conn,
        "POST /v1/embeddings HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n{auth}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response).unwrap();
    response[9..12].parse().unwrap()
}

#[test]
fn serve_takes_its_api_key_from_the_environment_or_a_file_not_only_argv() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tiny_model(tmp.path());
    let file = tmp.path().join("key");
    std::fs::write(&file, "from-file\n").unwrap();
    let file = file.display().to_string();
    for (args, env, key) in [
        (&["--api-key-file", &file][..], &[][..], "from-file"),
        (
            &[],
            &[("EMBED_WORKBENCH_API_KEY", "from-env")][..],
            "from-env",
        ),
    ] {
        let (mut child, url) = serve(&model, args, env);
        assert_eq!(status(&url, None), 401, "{args:?} {env:?}");
        assert_eq!(status(&url, Some("wrong")), 401);
        assert_eq!(status(&url, Some(key)), 200);
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
