//! Reading a corpus, for `bench embed` and `bench tokenize`: JSON Lines with a `text` field, or plain lines with
//! `--lines`. Blank lines are skipped (and counted), a UTF-8 byte-order mark is dropped, errors name the file's
//! line and column, and fields to pass through to the output are kept, already serialized.

use std::io::BufRead;
use std::path::Path;

use anyhow::{bail, Context, Result};

/// One input: its text, and the fields kept for the output line as JSON members (`"id":7,`), empty when none.
#[derive(Debug, PartialEq, Eq)]
pub struct Input {
    pub text: String,
    pub fields: String,
}

pub fn open(input: Option<&Path>) -> Result<Box<dyn BufRead>> {
    Ok(match input {
        None => Box::new(std::io::stdin().lock()),
        Some(p) if p.as_os_str() == "-" => Box::new(std::io::stdin().lock()),
        Some(p) => Box::new(std::io::BufReader::new(
            std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?,
        )),
    })
}

/// The inputs of `reader`, each with its 1-based line number; blank lines are counted in `blank` and skipped.
pub fn inputs<'a>(
    reader: Box<dyn BufRead>,
    plain: bool,
    keep: &'a [String],
    blank: &'a std::cell::Cell<usize>,
) -> impl Iterator<Item = Result<(usize, Input)>> + 'a {
    reader.lines().enumerate().filter_map(move |(i, line)| {
        let n = i + 1;
        let line = match line.with_context(|| format!("reading input line {n}")) {
            Ok(line) => line,
            Err(e) => return Some(Err(e)),
        };
        // A byte-order mark is not text (editors on Windows write one).
        let line = if n == 1 {
            line.strip_prefix('\u{feff}').unwrap_or(&line)
        } else {
            &line
        };
        if line.trim().is_empty() {
            blank.set(blank.get() + 1);
            return None;
        }
        Some(
            parse(line, plain, keep)
                .map(|input| (n, input))
                .with_context(|| format!("input line {n}")),
        )
    })
}

/// One non-blank line's input.
pub fn parse(line: &str, plain: bool, keep: &[String]) -> Result<Input> {
    if plain {
        return Ok(Input {
            text: line.to_owned(),
            fields: String::new(),
        });
    }
    let hint = "for plain text, one input per line, use --lines";
    let mut value: serde_json::Value = match serde_json::from_str(line) {
        Ok(v) => v,
        Err(_) if !line.trim_start().starts_with('{') => bail!("not a JSON object ({hint})"),
        // serde_json says "line 1"; the fragment is one line of the file, which the caller names.
        Err(e) => bail!(
            "not valid JSON at column {}: {}",
            e.column(),
            without_position(&e)
        ),
    };
    let Some(object) = value.as_object_mut() else {
        bail!("not a JSON object ({hint})");
    };
    let text = match object.remove("text") {
        Some(serde_json::Value::String(s)) => s,
        Some(_) => bail!("the `text` field is not a string"),
        None => bail!("no `text` field ({hint})"),
    };
    let mut fields = String::new();
    for name in keep {
        if let Some(v) = object.get(name) {
            fields += &serde_json::to_string(name)?;
            fields.push(':');
            fields += &serde_json::to_string(v)?;
            fields.push(',');
        }
    }
    Ok(Input { text, fields })
}

/// serde_json's message without its " at line L column C".
fn without_position(e: &serde_json::Error) -> String {
    let message = e.to_string();
    match message.rfind(" at line ") {
        Some(at) => message[..at].to_owned(),
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    fn read(text: &str, plain: bool, keep: &[String]) -> (Result<Vec<(usize, Input)>>, usize) {
        let blank = Cell::new(0);
        let reader: Box<dyn BufRead> = Box::new(std::io::Cursor::new(text.as_bytes().to_vec()));
        let got = inputs(reader, plain, keep, &blank).collect();
        (got, blank.get())
    }

    #[test]
    fn blank_lines_are_skipped_and_counted() {
        let (got, blank) = read("a\n\n  \nb\n", true, &[]);
        let got = got.unwrap();
        assert_eq!(blank, 2);
        assert_eq!(
            got.iter()
                .map(|(n, i)| (*n, i.text.as_str()))
                .collect::<Vec<_>>(),
            [(1, "a"), (4, "b")]
        );
    }

    #[test]
    fn a_byte_order_mark_is_accepted() {
        let (got, _) = read("\u{feff}{\"text\": \"x\"}\n", false, &[]);
        assert_eq!(got.unwrap()[0].1.text, "x");
        let (got, _) = read("\u{feff}plain\n", true, &[]);
        assert_eq!(got.unwrap()[0].1.text, "plain");
    }

    #[test]
    fn plain_text_without_lines_gets_the_lines_hint() {
        for text in ["just some words\n", "[1, 2]\n", "{\"title\": \"a\"}\n"] {
            let (got, _) = read(text, false, &[]);
            let e = format!("{:#}", got.unwrap_err());
            assert!(e.contains("--lines"), "{text}: {e}");
        }
    }

    #[test]
    fn a_json_error_names_the_files_line_not_line_1_of_the_fragment() {
        let (got, _) = read("{\"text\": \"a\"}\n\n{\"text\": \"b\",}\n", false, &[]);
        let e = format!("{:#}", got.unwrap_err());
        assert!(
            e.starts_with("input line 3: not valid JSON at column 14"),
            "{e}"
        );
        assert!(!e.contains("line 1"), "{e}");
    }

    #[test]
    fn kept_fields_are_passed_through_as_json_members() {
        let keep = ["id".to_owned(), "meta".to_owned(), "absent".to_owned()];
        let (got, _) = read(
            "{\"id\": 7, \"text\": \"a\", \"meta\": {\"k\": [1]}, \"other\": 1}\n",
            false,
            &keep,
        );
        assert_eq!(got.unwrap()[0].1.fields, "\"id\":7,\"meta\":{\"k\":[1]},");
    }
}
