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
    variables: BTreeMap<String, Value>,
}

const NAME: &str = "chat_template";

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
        env.add_function(
            "raise_exception",
            |message: String| -> std::result::Result<Value, minijinja::Error> {
                Err(minijinja::Error::new(ErrorKind::InvalidOperation, message))
            },
        );
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
        Ok(ChatTemplate { env, variables })
    }

    /// The text of the pair's messages.
    fn render(&self, query: &str, document: &str) -> std::result::Result<String, minijinja::Error> {
        // In Python's dict order: a template's `tojson` of a message writes its keys so.
        let message = |role: &str, content: &str| {
            Value::from_pairs([
                ("role", Value::from(role)),
                ("content", Value::from(content)),
            ])
        };
        let mut context = self.variables.clone();
        context.insert(
            "messages".into(),
            Value::from(vec![message("query", query), message("document", document)]),
        );
        self.env.get_template(NAME)?.render(Value::from(context))
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

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=indent)`, Python's separators (`", "` and
/// `": "`, `","` between indented lines) and keys in their order; not minijinja's HTML-safe one.
fn tojson(value: &Value, kwargs: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_json(value, indent, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

fn write_json(
    value: &Value,
    indent: Option<usize>,
    depth: usize,
    out: &mut String,
) -> std::result::Result<(), minijinja::Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', n * depth));
        }
    };
    let item_separator = if indent.is_some() { "," } else { ", " };
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => match value.as_i64() {
            Some(i) => out.push_str(&i.to_string()),
            None => out.push_str(&format!("{:?}", f64::try_from(value.clone())?)),
        },
        ValueKind::String => out.push_str(
            &serde_json::to_string(value.as_str().unwrap_or_default())
                .map_err(|e| minijinja::Error::new(ErrorKind::InvalidOperation, e.to_string()))?,
        ),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = value.try_iter()?.collect();
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_separator);
                }
                newline(out, depth + 1);
                write_json(item, indent, depth + 1, out)?;
            }
            if !items.is_empty() {
                newline(out, depth);
            }
            out.push(']');
        }
        ValueKind::Map => {
            let keys: Vec<Value> = value.try_iter()?.collect();
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_separator);
                }
                newline(out, depth + 1);
                write_json(&Value::from(key.to_string()), indent, depth + 1, out)?;
                out.push_str(": ");
                write_json(&value.get_item(key)?, indent, depth + 1, out)?;
            }
            if !keys.is_empty() {
                newline(out, depth);
            }
            out.push('}');
        }
        other => {
            return Err(minijinja::Error::new(
                ErrorKind::InvalidOperation,
                format!("tojson: a {other} is not JSON"),
            ))
        }
    }
    Ok(())
}

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
    /// `tokenizer` must add no special tokens and cut nothing.
    pub fn new(
        file: &ChatTemplateFile,
        special_tokens: &[(&'static str, String)],
        tokenizer: Box<dyn Tokenizer>,
        max_len: usize,
    ) -> Result<Self> {
        let template = ChatTemplate::new(file, special_tokens)?;
        let mut pairs = ChatPairs {
            template,
            tokenizer,
            max_len,
            suffix: Vec::new(),
        };
        // Rendered once here, so a template that fails on every pair fails at load.
        let render = |filler: &str| -> Result<Vec<u32>> {
            let text = pairs
                .template
                .render(filler, filler)
                .map_err(|e| template_error(file, &e))?;
            let mut ids = Vec::new();
            pairs.tokenizer.encode(&text, &mut ids)?;
            Ok(ids)
        };
        // As sentence-transformers derives it: two fillers that tokenize differently; their renders' common
        // tail is the template's, unless the renders never differ.
        let (first, second) = (render("0")?, render("1 2 3 4")?);
        let common = first
            .iter()
            .rev()
            .zip(second.iter().rev())
            .take_while(|(a, b)| a == b)
            .count();
        if file.restore_suffix && common > 0 && common < first.len().min(second.len()) {
            pairs.suffix = first[first.len() - common..].to_vec();
        }
        Ok(pairs)
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
        } else if cut {
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

    fn template(source: &str, variables: serde_json::Value) -> ChatTemplate {
        let file = ChatTemplateFile {
            path: "chat_template.jinja".into(),
            source: source.into(),
            variables: serde_json::from_value(variables).expect("an object"),
            restore_suffix: true,
        };
        ChatTemplate::new(&file, &[("eos_token", "</s>".into())]).expect("a template")
    }

    /// transformers' environment: blocks trimmed (a line's indent before an expression kept), Python's string
    /// methods, the roles and contents in order, the special tokens and the module's arguments as variables. The
    /// expected texts here are what transformers 5.24's `apply_chat_template` renders.
    #[test]
    fn a_pair_renders_as_query_and_document_messages() {
        let t = template(
            "{% for m in messages %}\n  [{{ m.role }}] {{ m.content.strip() | upper }}\n{% endfor %}\n\
             {% if add_generation_prompt %}go{{ eos_token }}{% endif %}",
            serde_json::json!({"add_generation_prompt": true}),
        );
        assert_eq!(
            t.render(" what? ", "this.").expect("render"),
            "  [query] WHAT?\n  [document] THIS.\ngo</s>"
        );
    }

    /// `tojson` writes Python's `json.dumps`: `", "` and `": "`, non-ASCII kept, no HTML escapes.
    #[test]
    fn tojson_writes_as_python_json_dumps() {
        let t = template(
            "{{ messages[0] | tojson }}|{{ [1, 2.5, none, true] | tojson }}|{{ {'a': [1]} | tojson(indent=2) }}",
            serde_json::json!({}),
        );
        assert_eq!(
            t.render("<é>", "d").expect("render"),
            "{\"role\": \"query\", \"content\": \"<é>\"}|[1, 2.5, null, true]|{\n  \"a\": [\n    1\n  ]\n}"
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
