//! A cross-encoder's pairs through its chat template, as sentence-transformers 6 tokenizes them for a model whose
//! Transformer module takes messages (Qwen3-Reranker's, zerank-2's): the pair becomes
//! `[{role: "query", content: a}, {role: "document", content: b}]`, rendered as transformers'
//! `apply_chat_template` renders (Jinja with `trim_blocks` and `lstrip_blocks`, loop controls, Python's string
//! and dict methods, its `tojson` and `raise_exception`; the special tokens and the module's arguments as
//! variables), tokenized without special tokens of the tokenizer's own, and cut at the model's limit; a row cut
//! from the right gets the template's suffix (the tokens after the document, derived by rendering two fillers and
//! keeping their common tail) written back over its last tokens, as the CrossEncoder's `restore_suffix` does, so
//! the last position a causal reranker reads is the template's. The template engine is minijinja, which TGI uses
//! for the same job.

use std::collections::BTreeMap;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, ErrorKind, Value};

use super::{PairEncoding, Scratch, Tokenizer};
use crate::error::{Error, Result};
use crate::model::ChatTemplateFile;

/// A compiled chat template and the variables it is rendered with beside `messages`.
struct ChatTemplate {
    env: Environment<'static>,
    /// Built once; each render's context is `messages` over it (a reference, not a copy).
    variables: Value,
    /// sentence-transformers' `structured` message format: content as `[{"type": "text", "text": …}]`.
    structured: bool,
}

const NAME: &str = "chat_template";

/// minijinja's error of a template's own making.
fn invalid(message: impl Into<std::borrow::Cow<'static, str>>) -> minijinja::Error {
    minijinja::Error::new(ErrorKind::InvalidOperation, message)
}

impl ChatTemplate {
    fn new(file: &ChatTemplateFile, special_tokens: &[(&'static str, String)]) -> Result<Self> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| template_error(file, &e))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        // Python prints None, True and False capitalised.
        env.set_formatter(|out, state, value| {
            let python = match value.kind() {
                ValueKind::None => "None",
                ValueKind::Bool if value.is_true() => "True",
                ValueKind::Bool => "False",
                _ => return minijinja::escape_formatter(out, state, value),
            };
            out.write_str(python).map_err(minijinja::Error::from)
        });
        env.add_function("raise_exception", |message: String| {
            Err::<Value, _>(invalid(message))
        });
        // transformers' `datetime.now().strftime(format)`, in the machine's time zone.
        env.add_function("strftime_now", |format: String| {
            use std::fmt::Write as _;
            let mut text = String::new();
            write!(text, "{}", jiff::ZonedDateTime::now().strftime(&format))
                .map_err(|_| invalid("strftime_now: a format it cannot write"))?;
            Ok::<_, minijinja::Error>(text)
        });
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, file.source.clone())
            .map_err(|e| template_error(file, &e))?;
        let mut variables: BTreeMap<String, Value> = special_tokens
            .iter()
            .map(|(name, token)| (name.to_string(), Value::from(token.as_str())))
            .collect();
        variables.insert("tools".into(), Value::from(()));
        variables.insert("documents".into(), Value::from(()));
        for (key, value) in &file.variables {
            variables.insert(key.clone(), from_json(value));
        }
        Ok(ChatTemplate {
            env,
            variables: Value::from(variables),
            structured: file.structured,
        })
    }

    /// The text of the pair's messages.
    fn render(&self, query: &str, document: &str) -> std::result::Result<String, minijinja::Error> {
        // In Python's dict order: a template's `tojson` of a message writes its keys so.
        let message = |role: &str, text: &str| {
            let content = match self.structured {
                true => Value::from(vec![Value::from_pairs([
                    ("type", Value::from("text")),
                    ("text", Value::from(text)),
                ])]),
                false => Value::from(text),
            };
            Value::from_pairs([("role", Value::from(role)), ("content", content)])
        };
        let messages = Value::from(vec![message("query", query), message("document", document)]);
        let context = minijinja::context! { messages, ..self.variables.clone() };
        self.env.get_template(NAME)?.render(context)
    }
}

fn template_error(file: &ChatTemplateFile, e: &minijinja::Error) -> Error {
    Error::model(&file.path, format!("chat template: {e:#}"))
}

/// A JSON value as the template sees it.
fn from_json(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => Value::from(a.iter().map(from_json).collect::<Vec<_>>()),
        serde_json::Value::Object(o) => {
            Value::from_pairs(o.iter().map(|(k, v)| (k.as_str(), from_json(v))))
        }
    }
}

/// How transformers' `tojson` writes: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)` unless an argument, given by name, says otherwise.
struct JsonStyle {
    indent: Option<usize>,
    items: String,
    keys: String,
    ensure_ascii: bool,
    sort_keys: bool,
}

/// transformers' `tojson` (not minijinja's HTML-safe one): Python's `json.dumps` with its arguments, Python's
/// separators (`", "` and `": "`; `","` ending indented lines), keys in their order unless `sort_keys`, floats as
/// Python writes them.
fn tojson(value: &Value, kwargs: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let separators: Option<Vec<String>> = kwargs.get("separators")?;
    let (items, keys) = match separators.as_deref() {
        None => (
            if indent.is_some() { "," } else { ", " }.into(),
            ": ".into(),
        ),
        Some([items, keys]) => (items.clone(), keys.clone()),
        Some(_) => return Err(invalid("tojson: separators is a pair")),
    };
    let style = JsonStyle {
        indent,
        items,
        keys,
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(value, &style, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

/// A float as Python's `repr` (and `json.dumps`) writes it: the shortest digits that read back, fixed from 1e-4
/// to 1e16, else with a signed exponent of at least two digits (`1e+20`, `2.5e-07`).
fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    // Rust's Debug is Python's repr but for the exponent's spelling.
    let debug = format!("{x:?}");
    match debug.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => debug,
    }
}

fn write_json(
    value: &Value,
    style: &JsonStyle,
    depth: usize,
    out: &mut String,
) -> std::result::Result<(), minijinja::Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = style.indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', n * depth));
        }
    };
    // A list's items or a map's keys, each written by `item`, between `open` and `close`.
    let list =
        |open: char,
         n: usize,
         close: char,
         out: &mut String,
         item: &mut dyn FnMut(usize, &mut String) -> std::result::Result<(), minijinja::Error>|
         -> std::result::Result<(), minijinja::Error> {
            out.push(open);
            for i in 0..n {
                if i > 0 {
                    out.push_str(&style.items);
                }
                newline(out, depth + 1);
                item(i, out)?;
            }
            if n > 0 {
                newline(out, depth);
            }
            out.push(close);
            Ok(())
        };
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => match value.as_i64() {
            Some(i) => out.push_str(&i.to_string()),
            None => out.push_str(&python_float(f64::try_from(value.clone())?)),
        },
        ValueKind::String => {
            let json = serde_json::to_string(value.as_str().unwrap_or_default())
                .map_err(|e| invalid(e.to_string()))?;
            for c in json.chars() {
                // Python's \uXXXX escapes (a surrogate pair above the BMP) where `ensure_ascii`.
                if style.ensure_ascii && !c.is_ascii() {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                } else {
                    out.push(c);
                }
            }
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            list('[', items.len(), ']', out, &mut |i, out| {
                write_json(&items[i], style, depth + 1, out)
            })?;
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = value.try_iter()?.collect();
            if style.sort_keys {
                keys.sort_by_key(|k| k.to_string());
            }
            list('{', keys.len(), '}', out, &mut |i, out| {
                write_json(&Value::from(keys[i].to_string()), style, depth + 1, out)?;
                out.push_str(&style.keys);
                write_json(&value.get_item(&keys[i])?, style, depth + 1, out)
            })?;
        }
        other => return Err(invalid(format!("tojson: a {other} is not JSON"))),
    }
    Ok(())
}

/// sentence-transformers' probes of a template: a pair, then each role's content changed alone.
const PROBES: [(&str, &str); 3] = [
    ("alpha", "bravo"),
    ("charlie", "bravo"),
    ("alpha", "foxtrot"),
];

/// A cross-encoder's pair encoder through its chat template: the pair as `query` and `document` messages, rendered
/// as transformers renders a chat template, tokenized without the tokenizer's special tokens, cut at the model's
/// limit, a row cut from the right getting the template's suffix back (sentence-transformers 6's
/// `restore_suffix`).
pub struct ChatPairs {
    template: ChatTemplate,
    /// The model's tokenizer without its special tokens and without a limit: the rendered text holds the
    /// template's own tokens, and the cut is made here, where the suffix is written back.
    tokenizer: Box<dyn Tokenizer>,
    max_len: usize,
    /// The template's tokens after the document, written back over a row cut from the right (empty where the
    /// module turns `restore_suffix` off, or the renders share no tail).
    suffix: Vec<u32>,
}

impl ChatPairs {
    /// `tokenizer` must add no special tokens and cut nothing. Refuses a template that fails to render, or whose
    /// render leaves out the query's or the document's content (as sentence-transformers refuses it).
    pub fn new(
        file: &ChatTemplateFile,
        special_tokens: &[(&'static str, String)],
        tokenizer: Box<dyn Tokenizer>,
        max_len: usize,
    ) -> Result<Self> {
        let template = ChatTemplate::new(file, special_tokens)?;
        let rendered = |query: &str, document: &str| {
            template
                .render(query, document)
                .map_err(|e| template_error(file, &e))
        };
        // One of system, user and assistant turns alone would render every pair alike.
        let [base, query, document] = PROBES.map(|(q, d)| rendered(q, d));
        let base = base?;
        for (role, varied) in [("query", query?), ("document", document?)] {
            if varied == base {
                return Err(Error::model(
                    &file.path,
                    format!(
                        "the chat template leaves the {role}'s content out of its render: it must render \
                         messages of the roles query and document"
                    ),
                ));
            }
        }
        let ids = |filler: &str| -> Result<Vec<u32>> {
            let mut ids = Vec::new();
            tokenizer.encode(&rendered(filler, filler)?, &mut ids)?;
            Ok(ids)
        };
        // As sentence-transformers derives it: two fillers that tokenize differently; their renders' common
        // tail is the template's, unless the renders never differ.
        let (first, second) = (ids("0")?, ids("1 2 3 4")?);
        let common = first
            .iter()
            .rev()
            .zip(second.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        let suffix =
            match file.restore_suffix && common > 0 && common < first.len().min(second.len()) {
                true => first[first.len() - common..].to_vec(),
                false => Vec::new(),
            };
        Ok(ChatPairs {
            template,
            tokenizer,
            max_len,
            suffix,
        })
    }

    /// The pair's ids: rendered, tokenized and cut to the limit from the right (the suffix written back) or, with
    /// `cut_left`, from the left.
    pub fn encode(
        &self,
        query: &str,
        document: &str,
        cut_left: bool,
        scratch: &mut Scratch,
        ids: &mut Vec<u32>,
    ) -> Result<PairEncoding> {
        let text = self
            .template
            .render(query, document)
            .map_err(|e| Error::Tokenizer(format!("chat template: {e:#}")))?;
        self.tokenizer.encode_with(&text, scratch, ids)?;
        let cut = ids.len() > self.max_len;
        if cut && cut_left {
            ids.drain(..ids.len() - self.max_len);
        } else if ids.len() >= self.max_len {
            // A row at the limit too, as sentence-transformers restores it: its tail may have tokenized otherwise
            // against the document than against the fillers.
            ids.truncate(self.max_len);
            let keep = self.suffix.len().min(ids.len());
            let end = ids.len();
            ids[end - keep..].copy_from_slice(&self.suffix[self.suffix.len() - keep..]);
        }
        Ok(PairEncoding {
            type1_from: None,
            cut,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(source: &str, variables: serde_json::Value, structured: bool) -> ChatTemplateFile {
        ChatTemplateFile {
            path: "chat_template.jinja".into(),
            source: source.into(),
            variables: serde_json::from_value(variables).expect("an object"),
            structured,
            restore_suffix: true,
        }
    }

    fn template(source: &str, variables: serde_json::Value) -> ChatTemplate {
        let f = file(source, variables, false);
        ChatTemplate::new(&f, &[("eos_token", "</s>".into())]).expect("a template")
    }

    /// transformers' environment: blocks trimmed (a line's indent before an expression kept), Python's string
    /// methods and its spelling of None and True, the roles and contents in order, the special tokens and the
    /// module's arguments as variables. The expected texts in these tests are what transformers 5.24's
    /// `apply_chat_template` renders.
    #[test]
    fn a_pair_renders_as_query_and_document_messages() {
        let t = template(
            "{% for m in messages %}\n  [{{ m.role }}] {{ m.content.strip() | upper }}\n{% endfor %}\n\
             {% if add_generation_prompt %}go{{ eos_token }}{{ tools }}{{ add_generation_prompt }}{% endif %}",
            serde_json::json!({"add_generation_prompt": true}),
        );
        assert_eq!(
            t.render(" what? ", "this.").expect("render"),
            "  [query] WHAT?\n  [document] THIS.\ngo</s>NoneTrue"
        );
    }

    /// sentence-transformers' structured format: each message's content a list of typed items, as a template
    /// reading `content[0]` (Gemma's way) wants it.
    #[test]
    fn structured_content_is_a_list_of_typed_items() {
        let f = file(
            "{% for m in messages %}{{ m.content[0].type }}:{{ m.content[0]['text'] }};{% endfor %}",
            serde_json::json!({}),
            true,
        );
        let t = ChatTemplate::new(&f, &[]).expect("a template");
        assert_eq!(t.render("q", "d").expect("render"), "text:q;text:d;");
    }

    /// `tojson` writes Python's `json.dumps`: `", "` and `": "`, non-ASCII kept, no HTML escapes, floats as Python's
    /// repr, and each of its arguments.
    #[test]
    fn tojson_writes_as_python_json_dumps() {
        let t = template(
            "{{ messages[0] | tojson }}|{{ [1, 2.5, none, true, 1e20, 0.00002] | tojson }}|\
             {{ {'a': [1]} | tojson(indent=2) }}|{{ {'b': 'é', 'a': 1} | tojson(sort_keys=true, ensure_ascii=true, \
             separators=[',', ':']) }}",
            serde_json::json!({}),
        );
        assert_eq!(
            t.render("<é>", "d").expect("render"),
            "{\"role\": \"query\", \"content\": \"<é>\"}|[1, 2.5, null, true, 1e+20, 2e-05]|\
             {\n  \"a\": [\n    1\n  ]\n}|{\"a\":1,\"b\":\"\\u00e9\"}"
        );
    }

    /// A template's own error (`raise_exception`) is the render's error, naming its message.
    #[test]
    fn raise_exception_fails_the_render() {
        let t = template("{{ raise_exception('only pairs') }}", serde_json::json!({}));
        let e = t.render("q", "d").expect_err("raised");
        assert!(format!("{e:#}").contains("only pairs"), "{e:#}");
    }
}
