//! `fast` against the reference `hf` on the SentencePiece pipeline settings the shipped tokenizers do not all
//! hold: every behaviour of a literal `Split`, every Metaspace prepend scheme with and without its split, BPE
//! without byte fallback (unknowns fused or not, the unknown token missing), `ignore_merges`, and added tokens
//! matched on normalised text in front of Unigram. Each variant is the shipped file with its JSON edited; the texts
//! are a sample of the corpora and random hostile strings with the added tokens among them.

mod texts;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use texts::{compare, corpus, random_text, workloads};

fn read(file: &str) -> Value {
    let path = workloads().join("vocab").join(file);
    serde_json::from_str(&std::fs::read_to_string(path).expect("vocab")).expect("JSON")
}

fn sample() -> Vec<String> {
    let mut rng = StdRng::seed_from_u64(0x5b_be);
    let mut texts: Vec<String> = corpus().into_iter().step_by(17).collect();
    texts.extend((0..600).map(|_| random_text(&mut rng)));
    // Added tokens at the start, at the end and between spaces, where prepending and stripping differ.
    texts.extend(
        [
            "<s>x y",
            "x <s>",
            " <tab> <tab>",
            "<tab>",
            "a<s> b",
            "\u{2581}\u{2581}a",
            "   ",
            "e e\u{2581}e",
        ]
        .map(String::from),
    );
    texts
}

/// Writes `json` under `name` and compares the two tokenizers on `texts`; returns how many texts failed in both.
fn check(name: &str, json: &Value, texts: &[String]) -> usize {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tokenizer.json");
    std::fs::write(&file, json.to_string()).expect("write");
    compare(name, &file, texts)
}

#[test]
fn literal_split_behaviours_equal() {
    let texts = sample();
    for pattern in ["\u{2581}", "e", "ab"] {
        for behavior in [
            "Removed",
            "Isolated",
            "MergedWithPrevious",
            "MergedWithNext",
            "Contiguous",
        ] {
            let mut j = read("gemma_style_spbpe_4k_tokenizer.json");
            j["pre_tokenizer"] = json!({"type": "Split", "pattern": {"String": pattern},
                "behavior": behavior, "invert": false});
            assert_eq!(check(&format!("{pattern:?} {behavior}"), &j, &texts), 0);
        }
    }
}

#[test]
fn metaspace_prepend_schemes_equal() {
    let texts = sample();
    for scheme in ["always", "first", "never"] {
        for split in [false, true] {
            let mut j = read("mistral_style_spbpe_4k_tokenizer.json");
            j["pre_tokenizer"]["prepend_scheme"] = scheme.into();
            j["pre_tokenizer"]["split"] = split.into();
            assert_eq!(check(&format!("{scheme} split {split}"), &j, &texts), 0);
        }
    }
    // Llama 2's legacy normaliser in front of Metaspace (without its added token matched on normalised text,
    // which `first` behind a normaliser refuses), a one-for-one Replace in front of it, and Metaspace after
    // WhitespaceSplit.
    let mut j = read("llama2_style_spbpe_4k_tokenizer.json");
    j["pre_tokenizer"] = read("mistral_style_spbpe_4k_tokenizer.json")["pre_tokenizer"].clone();
    j["added_tokens"]
        .as_array_mut()
        .expect("added tokens")
        .pop();
    assert_eq!(check("prepend normaliser then first", &j, &texts), 0);
    let mut j = read("mistral_style_spbpe_4k_tokenizer.json");
    j["normalizer"] = json!({"type": "Replace", "pattern": {"String": "e"}, "content": "\u{e9}"});
    assert_eq!(check("one-for-one replace then first", &j, &texts), 0);
    let mut j = read("mistral_style_spbpe_4k_tokenizer.json");
    let mut metaspace = j["pre_tokenizer"].clone();
    metaspace["prepend_scheme"] = "always".into();
    j["pre_tokenizer"] =
        json!({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]});
    assert_eq!(check("WhitespaceSplit then Metaspace", &j, &texts), 0);
}

/// Without byte fallback a character outside the vocabulary is the unknown token (consecutive ones fused into
/// one with `fuse_unk`), dropped without one, and fails the encode when the unknown token is not in the
/// vocabulary; and `ignore_merges` takes a whole word that is a token as that token.
#[test]
fn sentencepiece_bpe_unknowns_and_ignore_merges_equal() {
    let texts = sample();
    let configs = [
        ("fused", Some("<unk>"), true, false),
        ("unfused", Some("<unk>"), false, false),
        ("dropped", None, false, false),
        ("missing", Some("<nope>"), true, false),
        ("ignore merges", Some("<unk>"), true, true),
    ];
    for (name, unk, fuse, ignore_merges) in configs {
        let mut j = read("llama2_style_spbpe_4k_tokenizer.json");
        j["model"]["byte_fallback"] = (name == "ignore merges").into();
        j["model"]["unk_token"] = unk.map_or(Value::Null, Into::into);
        j["model"]["fuse_unk"] = fuse.into();
        j["model"]["ignore_merges"] = ignore_merges.into();
        let failed = check(name, &j, &texts);
        assert_eq!(failed > 0, name == "missing", "{name}: {failed} failed");
    }
}

/// Added tokens with `normalized: true` in front of Unigram: the crate normalises their contents and finds them
/// in the normalised text between the raw-text ones (the XLM-R pipeline's precompiled map and `▁` replacement).
#[test]
fn unigram_normalized_added_tokens_equal() {
    let mut j = read("xlmr_style_unigram_1k_tokenizer.json");
    let added = j["added_tokens"].as_array_mut().expect("added tokens");
    // The ids the crate gives them, after the vocabulary's 1,002 pieces (it overrides others, with a warning).
    let next = 1002;
    for (k, content) in ["<tab>", " x", "ＡＢ"].into_iter().enumerate() {
        added.push(
            json!({"id": next + k, "content": content, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": true, "special": false}),
        );
    }
    let mut rng = StdRng::seed_from_u64(0x0_ada);
    let texts: Vec<String> = sample()
        .into_iter()
        .map(|mut s| {
            for piece in [" x", "ＡＢ", "AB", "<tab>"] {
                if rng.gen_bool(0.3) {
                    let at = s
                        .char_indices()
                        .map(|(i, _)| i)
                        .nth(rng.gen_range(0..=s.chars().count()));
                    s.insert_str(at.unwrap_or(s.len()), piece);
                }
            }
            s
        })
        .collect();
    assert_eq!(check("unigram normalized", &j, &texts), 0);
}

/// A merge that joins a word to the `▁` after it (here `e` + `▁t`, ranked first) makes the whole text one merge
/// problem again; without one, `fast` merges the pieces between such places apart, which must change nothing.
/// Nor may a dropped character (no unknown token, no byte fallback) let a `▁▁` merge reach across.
#[test]
fn a_merge_across_a_space_equal() {
    let texts = sample();
    let mut j = read("llama2_style_spbpe_4k_tokenizer.json");
    let vocab = j["model"]["vocab"].as_object_mut().expect("vocab");
    assert!(vocab.contains_key("\u{2581}t") && vocab.contains_key("e"));
    vocab.insert("e\u{2581}t".into(), 4000.into());
    j["added_tokens"][3]["id"] = 4001.into();
    let merges = j["model"]["merges"].as_array_mut().expect("merges");
    merges.insert(0, json!(["e", "\u{2581}t"]));
    assert_eq!(check("merge across a space", &j, &texts), 0);
    let mut j = read("llama2_style_spbpe_4k_tokenizer.json");
    j["model"]["unk_token"] = Value::Null;
    j["model"]["byte_fallback"] = false.into();
    let vocab = j["model"]["vocab"].as_object_mut().expect("vocab");
    assert!(!vocab.contains_key("\u{2581}\u{2581}"));
    vocab.insert("\u{2581}\u{2581}".into(), 4000.into());
    j["added_tokens"][3]["id"] = 4001.into();
    let merges = j["model"]["merges"].as_array_mut().expect("merges");
    merges.insert(0, json!(["\u{2581}", "\u{2581}"]));
    let mut dropped = texts.clone();
    dropped.extend(["\u{4e00} x", "a\u{4e00} \u{4e00}\u{4e00}  b"].map(String::from));
    assert_eq!(check("dropped character before a space", &j, &dropped), 0);
}

/// Added tokens matched on normalised text whose contents normalise alike (the first, specials first, wins) or
/// into a model token (counted by their contents in the file).
#[test]
fn normalised_added_token_contents_equal() {
    let texts = sample();
    let mut j = read("llama2_style_spbpe_4k_tokenizer.json");
    let added = j["added_tokens"].as_array_mut().expect("added tokens");
    for (id, content, special) in [
        (4001, "qq zz", false),
        (4002, "qq\u{2581}zz", false),
        (4003, " the", false),
    ] {
        added.push(json!({"id": id, "content": content, "single_word": false, "lstrip": false, "rstrip": false,
            "normalized": true, "special": special}));
    }
    let mut texts = texts;
    texts.extend(["qq zz", "a qq\u{2581}zz b", " the the"].map(String::from));
    assert_eq!(check("normalised contents", &j, &texts), 0);
}

/// `ByteLevel`'s `add_prefix_space` (RoBERTa's and GPT-2's tokenizers saved with it on): a space before each piece
/// between added tokens that does not start with one when `ByteLevel` splits by its own regex, before each
/// pre-token of the `Split` when one runs first; with added tokens matched on raw and on normalised text, which cut
/// the pieces.
#[test]
fn byte_level_prefix_space_equal() {
    let mut texts = sample();
    texts.extend(
        [
            "",
            " ",
            "hello",
            " hello",
            "  hello",
            "\nhello",
            "<|endoftext|>x",
            "x<|endoftext|> y",
            "a  <|endoftext|>",
            "12 345\t6",
            "a  b   c",
            "\u{e9}t\u{e9}",
        ]
        .map(String::from),
    );
    let gpt2 = read("gpt2_style_bpe_4k_tokenizer.json");
    let qwen2 = read("qwen2_style_bpe_4k_tokenizer.json");
    let mut variants = Vec::new();
    let mut j = gpt2.clone();
    j["pre_tokenizer"]["add_prefix_space"] = true.into();
    variants.push(("ByteLevel with its regex", j));
    let mut j = qwen2.clone();
    j["pre_tokenizer"]["pretokenizers"][1]["add_prefix_space"] = true.into();
    variants.push(("Split then ByteLevel", j));
    // An added token matched on normalised text splits the pieces too.
    for (name, mut j) in variants.clone() {
        let added = j["added_tokens"].as_array_mut().expect("added tokens");
        added.push(
            json!({"id": 4000, "content": "  ", "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": true, "special": false}),
        );
        variants.push((name, j));
    }
    for (name, j) in &variants {
        assert_eq!(check(name, j, &texts), 0, "{name}");
    }
}

/// Regression: the added tokens took the ids their file writes, where the crate gives its own on load (the
/// model's id for a content the vocabulary holds, the next free ones after the vocabulary in the file's order for
/// the rest) and only warns: a hand-edited file whose ids leave a gap or repeat a model token encoded differently.
#[test]
fn added_token_ids_are_the_ones_the_crate_gives() {
    let mut j = read("all-MiniLM-L6-v2/tokenizer.json");
    let added = j["added_tokens"].as_array_mut().expect("added tokens");
    for (id, content, special) in [
        (40000, "zzqx", false),
        (7, "qqwy", true),
        (30522, "hello", false),
    ] {
        added.push(
            json!({"id": id, "content": content, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": special}),
        );
    }
    let mut texts = sample();
    texts.extend(["a zzqx b qqwy hello", "hellozzqx"].map(String::from));
    assert_eq!(check("gapped added ids", &j, &texts), 0);
    let fast = engine::tokenizer::FastTokenizer::from_json(&j, None).expect("loads");
    let mut ids = Vec::new();
    engine::tokenizer::Tokenizer::encode(&fast, "zzqx qqwy hello", &mut ids).expect("encodes");
    // [CLS] zzqx qqwy hello [SEP]: the two new contents after the 30,522 tokens, "hello" the model's own id.
    assert_eq!(ids, [101, 30522, 30523, 7592, 102]);
}

/// WordPiece with added tokens matched on normalised text (what transformers' `add_tokens` writes for a BERT
/// vocabulary): their contents and the text between raw-text matches through the BERT normaliser, under each of
/// its settings; the text between them is then pre-tokenised without being normalised twice.
#[test]
fn wordpiece_normalized_added_tokens_equal() {
    let contents = [
        "covid19",
        "\u{dc}n\u{ef}code",
        "new-token",
        "hello world",
        "\u{65e5}\u{672c}",
        "stra\u{df}e",
        "\u{130}stanbul",
        "a\tb",
        "\u{1c5}",
    ];
    let mut texts = sample();
    for c in contents {
        texts.push(format!("x {} y{}", c.to_uppercase(), c));
        texts.push(format!("{c}{c} {}", c.to_lowercase()));
    }
    texts.extend(
        [
            "COVID19 cases",
            "HELLO  WORLD",
            "hello\tworld",
            "\u{65e5}\u{672c}\u{8a9e}",
            "i\u{307}stanbul",
            "\u{1}covid19\u{2}",
            "a\u{a0}b",
        ]
        .map(String::from),
    );
    for (lowercase, strip_accents, chinese, clean) in [
        (true, None, true, true),
        (false, None, true, true),
        (true, Some(false), false, true),
        (false, Some(true), true, false),
        (true, Some(true), false, false),
    ] {
        let mut j = read("all-MiniLM-L6-v2/tokenizer.json");
        j["normalizer"] = json!({"type": "BertNormalizer", "clean_text": clean,
            "handle_chinese_chars": chinese, "strip_accents": strip_accents, "lowercase": lowercase});
        let added = j["added_tokens"].as_array_mut().expect("added tokens");
        for (i, c) in contents.iter().enumerate() {
            added.push(
                json!({"id": 30522 + i, "content": c, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": true, "special": false}),
            );
        }
        let name =
            format!("lowercase {lowercase}, strip {strip_accents:?}, CJK {chinese}, clean {clean}");
        assert_eq!(check(&name, &j, &texts), 0, "{name}");
    }
}

/// The crate numbers new added tokens from its model's `get_vocab_size`, which for Unigram is the length of the
/// vocabulary's list, a repeated piece included; it ignores an empty added token and one repeated with the same
/// settings. One repeated with other settings is refused (the crate would match it with the last copy's strips).
#[test]
fn added_tokens_after_a_repeated_piece_and_repeats_equal() {
    let mut j = read("xlmr_style_unigram_1k_tokenizer.json");
    let vocab = j["model"]["vocab"].as_array_mut().expect("vocab");
    let repeated = vocab[100].clone();
    vocab.push(repeated);
    let size = vocab.len();
    let added = j["added_tokens"].as_array_mut().expect("added tokens");
    for content in ["zzqq", "", "zzqq", "qqzz"] {
        added.push(
            json!({"id": 0, "content": content, "single_word": false, "lstrip": false,
            "rstrip": false, "normalized": false, "special": false}),
        );
    }
    let mut texts = sample();
    texts.extend(["zzqq qqzz", "qqzzzzqq", "a zzqq"].map(String::from));
    assert_eq!(check("repeated piece", &j, &texts), 0);
    let fast = engine::tokenizer::FastTokenizer::from_json(&j, None).expect("loads");
    let mut ids = Vec::new();
    engine::tokenizer::Tokenizer::encode(&fast, "zzqq", &mut ids).expect("encodes");
    assert!(
        ids.contains(&(size as u32)),
        "{ids:?}: zzqq after the {size} listed pieces"
    );

    let added = j["added_tokens"].as_array_mut().expect("added tokens");
    added.push(
        json!({"id": 0, "content": "qqzz", "single_word": false, "lstrip": true,
        "rstrip": false, "normalized": false, "special": false}),
    );
    match engine::tokenizer::FastTokenizer::from_json(&j, None) {
        Err(e) => assert!(e.to_string().contains("listed twice"), "{e}"),
        Ok(_) => panic!("accepted an added token repeated with other settings"),
    }
}

/// DeBERTa v3's pipeline as transformers' DebertaV2Converter writes it (Strip both sides, the precompiled charsmap,
/// runs of spaces replaced by one, Metaspace, `[CLS] $A [SEP]`), on the fixture `deberta_mean`'s tokenizer
/// (`scripts/make_encoder_fixtures.py`'s `deberta_tokenizer`): the in-house tokenizer reads it, id for id.
#[test]
fn deberta_v3_pipeline_equal() {
    let file = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/deberta_mean/tokenizer.json");
    let mut texts = sample();
    texts.extend(["  a   b  ", "\t[MASK] x", "x [CLS] y [SEP]", "``quoted''"].map(String::from));
    assert_eq!(compare("deberta v3", &file, &texts), 0);
}
