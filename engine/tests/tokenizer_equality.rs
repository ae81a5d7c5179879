//! `fast` against the reference `hf`, id for id: every shipped corpus text and seeded random Unicode strings,
//! through WordPiece (all-MiniLM-L6-v2), four Unigram tokenizers (one behind ALBERT's NFKD normaliser), three byte-level BPE ones (the Qwen2, GPT-2
//! and Llama-3 pipelines) and three SentencePiece BPE ones (Llama 2's legacy, Mistral's and Gemma's), with and
//! without truncation.

mod texts;

use engine::tokenizer::{self, Scratch, Tokenizer, TokenizerKind, Truncation, TruncationSide};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use texts::{corpus, corpus_of, random_text, workloads};

const TOKENIZERS: [&str; 11] = [
    "all-MiniLM-L6-v2/tokenizer.json",
    "pegasus_unigram_tokenizer.json",
    "xlmr_style_unigram_1k_tokenizer.json",
    "albert_style_unigram_1k_tokenizer.json",
    "xlmr_style_unigram_ja_8k_tokenizer.json",
    "qwen2_style_bpe_4k_tokenizer.json",
    "gpt2_style_bpe_4k_tokenizer.json",
    "llama3_style_bpe_4k_tokenizer.json",
    "llama2_style_spbpe_4k_tokenizer.json",
    "mistral_style_spbpe_4k_tokenizer.json",
    "gemma_style_spbpe_4k_tokenizer.json",
];

const BPE: [&str; 6] = [
    "qwen2_style_bpe_4k_tokenizer.json",
    "gpt2_style_bpe_4k_tokenizer.json",
    "llama3_style_bpe_4k_tokenizer.json",
    "llama2_style_spbpe_4k_tokenizer.json",
    "mistral_style_spbpe_4k_tokenizer.json",
    "gemma_style_spbpe_4k_tokenizer.json",
];

fn pair(file: &str, truncation: Option<Truncation>) -> (Box<dyn Tokenizer>, Box<dyn Tokenizer>) {
    let path = workloads().join("vocab").join(file);
    let fast = tokenizer::load(&path, TokenizerKind::Fast, truncation, true).expect("fast loads");
    let hf = tokenizer::load(&path, TokenizerKind::Hf, truncation, true).expect("hf loads");
    assert_eq!(fast.vocab_size(), hf.vocab_size(), "{file}: vocab size");
    (fast, hf)
}

/// Asserts equal ids on every text; returns how many ids were compared, so callers can check it was real work.
fn assert_same(file: &str, truncation: Option<Truncation>, texts: &[String]) -> usize {
    let (fast, hf) = pair(file, truncation);
    let (mut scratch, mut a, mut b) = (Scratch::default(), Vec::new(), Vec::new());
    let mut compared = 0;
    for text in texts {
        fast.encode_with(text, &mut scratch, &mut a)
            .expect("fast encodes");
        hf.encode(text, &mut b).expect("hf encodes");
        assert_eq!(a, b, "{file} {truncation:?}: {text:?}");
        compared += a.len();
    }
    compared
}

#[test]
fn corpus_equal_without_truncation() {
    let texts = corpus();
    assert!(texts.len() > 20_000);
    for file in TOKENIZERS {
        assert!(assert_same(file, None, &texts) > texts.len() * 10, "{file}");
    }
}

/// Every text of the project's shared corpora (a superset of `workloads/text`, used where this checkout sits
/// beside them), through each BPE tokenizer whole and right-truncated at three lengths; the counts go to stderr for
/// the record. `hf` encodes each text once: its ids cut to a length, special tokens kept, are what its truncation
/// gives (`corpus_equal_with_truncation` checks that against `hf`'s own truncation on a sample), which keeps this
/// test to minutes.
#[test]
fn bpe_corpus_equal_at_three_truncation_lengths() {
    let shared = workloads().join("../../shared/data/text");
    let texts = if shared.is_dir() {
        corpus_of(&shared)
    } else {
        corpus()
    };
    const LENGTHS: [usize; 3] = [512, 128, 16];
    for file in BPE {
        let (fast, hf) = pair(file, None);
        let cut: Vec<_> = LENGTHS
            .iter()
            .map(|&n| pair(file, Some(Truncation::right(n))).0)
            .collect();
        // The special tokens, and how many of them come before the text.
        let (mut empty, mut one) = (Vec::new(), Vec::new());
        hf.encode("", &mut empty).expect("hf encodes");
        hf.encode("a", &mut one).expect("hf encodes");
        let before = empty.iter().zip(&one).take_while(|(x, y)| x == y).count();
        let after = empty.len() - before;
        let (mut scratch, mut full, mut want, mut got) =
            (Scratch::default(), Vec::new(), Vec::new(), Vec::new());
        let mut counts = [0usize; 4];
        for text in &texts {
            hf.encode(text, &mut full).expect("hf encodes");
            fast.encode_with(text, &mut scratch, &mut got)
                .expect("fast encodes");
            assert_eq!(got, full, "{file}: {text:?}");
            counts[0] += got.len();
            let body = &full[before..full.len() - after];
            for ((t, &n), count) in cut.iter().zip(&LENGTHS).zip(&mut counts[1..]) {
                want.clear();
                want.extend_from_slice(&full[..before]);
                want.extend_from_slice(&body[..body.len().min(n - empty.len())]);
                want.extend_from_slice(&full[full.len() - after..]);
                t.encode_with(text, &mut scratch, &mut got)
                    .expect("fast encodes");
                assert_eq!(got, want, "{file} max_length {n}: {text:?}");
                *count += got.len();
            }
        }
        eprintln!(
            "{file}: {} texts; ids equal whole {}, at 512 {}, at 128 {}, at 16 {}",
            texts.len(),
            counts[0],
            counts[1],
            counts[2],
            counts[3]
        );
        assert!(counts[3] > texts.len() * 10, "{file}");
    }
}

#[test]
fn corpus_equal_with_truncation() {
    // Truncation acts after tokenisation, so a sample of the corpus is enough to exercise it.
    let texts: Vec<String> = corpus().into_iter().step_by(7).collect();
    for file in TOKENIZERS {
        for (max_length, side) in [
            (128, TruncationSide::Right),
            (64, TruncationSide::Left),
            (3, TruncationSide::Right),
        ] {
            assert_same(file, Some(Truncation { max_length, side }), &texts);
        }
    }
}

#[test]
fn random_unicode_equal() {
    let mut rng = StdRng::seed_from_u64(0x5eed_70c3);
    let texts: Vec<String> = (0..3000).map(|_| random_text(&mut rng)).collect();
    for file in TOKENIZERS {
        assert_same(file, None, &texts);
        assert_same(
            file,
            Some(Truncation {
                max_length: 16,
                side: TruncationSide::Left,
            }),
            &texts,
        );
    }
}

#[test]
fn hostile_inputs_equal() {
    let word = "a".repeat(100_000);
    let mixed = "é\u{301}".repeat(20_000);
    let texts = [
        String::new(),
        "\0".into(),
        "\0\0 a\0b".into(),
        word.clone(),
        format!("{word} {word}"),
        mixed,
        " ".repeat(10_000),
        "\u{301}".repeat(1000),
        "[CLS][CLS]<s></s>".into(),
    ];
    for file in TOKENIZERS {
        assert_same(file, None, &texts);
        assert_same(file, Some(Truncation::right(8)), &texts);
    }
}

/// The BPE paths for bytes missing from the vocabulary, which byte-level vocabularies never take: the Qwen2-style
/// vocabulary with the tokens of bytes 0xC3 (`Ã`, UTF-8 C3 83) and 0x20 (`Ġ`, UTF-8 C4 A0) removed, and each way
/// the crate has of covering them — an unknown token, fused or not, `<0xXX>` byte fallback (complete for `Ã`,
/// incomplete for `Ġ`, which then falls to the unknown token), nothing (dropped), and an unknown token missing
/// from the vocabulary (the encode fails, in both).
#[test]
fn bpe_bytes_missing_from_the_vocabulary_equal() {
    let path = workloads().join("vocab/qwen2_style_bpe_4k_tokenizer.json");
    let base: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("vocab")).expect("JSON");
    let texts: Vec<String> = corpus().into_iter().step_by(5).collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let configs = [
        ("unk", Some("<unk>"), false, false),
        ("fused unk", Some("<unk>"), true, false),
        ("byte fallback", Some("<unk>"), false, true),
        ("dropped", None, false, false),
        ("unk not in vocab", Some("<nope>"), false, false),
    ];
    for (name, unk, fuse, fallback) in configs {
        let mut j = base.clone();
        let vocab = j["model"]["vocab"].as_object_mut().expect("vocab");
        for gone in ["Ã", "Ġ"] {
            vocab.remove(gone);
        }
        for (id, extra) in (10_000..).zip(["<unk>", "<0xC3>", "<0x83>", "<0xC4>"]) {
            vocab.insert(extra.into(), serde_json::Value::from(id));
        }
        j["model"]["merges"]
            .as_array_mut()
            .expect("merges")
            .retain(|m| {
                !m.as_array()
                    .expect("pair")
                    .iter()
                    .any(|t| t == "Ã" || t == "Ġ")
            });
        j["model"]["unk_token"] = unk.map_or(serde_json::Value::Null, Into::into);
        j["model"]["fuse_unk"] = fuse.into();
        j["model"]["byte_fallback"] = fallback.into();
        let file = dir.path().join(format!("{}.json", name.replace(' ', "_")));
        std::fs::write(&file, j.to_string()).expect("write");
        let failed = texts::compare(name, &file, &texts);
        assert_eq!(
            failed > 0,
            name == "unk not in vocab",
            "{name}: {failed} failed"
        );
    }
}

/// RoBERTa's and XLM-R's pipelines: their special tokens as `added_tokens`, `<mask>` taking in the whitespace
/// before it (`lstrip`) and a token taking in the whitespace after it (`rstrip`), and RoBERTa's and BERT's own
/// post-processors (`RobertaProcessing` on the GPT-2-style BPE, XLM-R's template on the XLM-R-style Unigram,
/// `BertProcessing` on MiniLM's WordPiece), on random texts with those tokens among runs of whitespace.
#[test]
fn roberta_xlmr_and_bert_special_tokens_equal() {
    let read = |file: &str| -> serde_json::Value {
        let path = workloads().join("vocab").join(file);
        serde_json::from_str(&std::fs::read_to_string(path).expect("vocab")).expect("JSON")
    };
    let added = |tokens: &[(&str, usize, bool, bool)]| -> serde_json::Value {
        tokens
            .iter()
            .map(|&(content, id, lstrip, rstrip)| {
                serde_json::json!({"id": id, "content": content, "single_word": false, "lstrip": lstrip,
                    "rstrip": rstrip, "normalized": false, "special": true})
            })
            .collect()
    };
    let mut roberta = read("gpt2_style_bpe_4k_tokenizer.json");
    roberta["added_tokens"] = added(&[
        ("<s>", 4000, false, false),
        ("<pad>", 4001, false, false),
        ("</s>", 4002, false, false),
        ("<mask>", 4003, true, false),
        ("<rs>", 4004, false, true),
    ]);
    roberta["post_processor"] = serde_json::json!({"type": "RobertaProcessing", "sep": ["</s>", 4002],
        "cls": ["<s>", 4000], "trim_offsets": true, "add_prefix_space": false});
    let mut xlmr = read("xlmr_style_unigram_1k_tokenizer.json");
    xlmr["added_tokens"] = added(&[
        ("<s>", 0, false, false),
        ("<pad>", 1, false, false),
        ("</s>", 2, false, false),
        ("<unk>", 3, false, false),
        // The vocabulary's own `<mask>` id (the crate takes a model's id over the file's).
        ("<mask>", 1001, true, false),
        ("<rs>", 1002, false, true),
    ]);
    let mut bert = read("all-MiniLM-L6-v2/tokenizer.json");
    bert["post_processor"] =
        serde_json::json!({"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]});

    let mut rng = StdRng::seed_from_u64(0x0b_e27a);
    let spaces = ["", " ", "  ", "\t", " \n ", "\u{3000}", "\u{a0}"];
    let texts: Vec<String> = (0..2000)
        .map(|_| {
            let mut s = random_text(&mut rng);
            for _ in 0..rng.gen_range(0..4) {
                let at = s
                    .char_indices()
                    .map(|(i, _)| i)
                    .nth(rng.gen_range(0..s.chars().count() + 1))
                    .unwrap_or(s.len());
                let token = ["<mask>", "<rs>", "<s>", "<pad>"][rng.gen_range(0..4)];
                let (before, after) = (
                    spaces[rng.gen_range(0..spaces.len())],
                    spaces[rng.gen_range(0..spaces.len())],
                );
                s.insert_str(at, &format!("{before}{token}{after}"));
            }
            s
        })
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, json) in [("roberta", roberta), ("xlmr", xlmr), ("bert", bert)] {
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, json.to_string()).expect("write");
        for truncation in [None, Some(Truncation::right(12))] {
            let fast =
                tokenizer::load(&file, TokenizerKind::Fast, truncation, true).expect("fast loads");
            let hf = tokenizer::load(&file, TokenizerKind::Hf, truncation, true).expect("hf loads");
            let (mut scratch, mut a, mut b) = (Scratch::default(), Vec::new(), Vec::new());
            let mut stripped = 0;
            for text in &texts {
                fast.encode_with(text, &mut scratch, &mut a)
                    .expect("fast encodes");
                hf.encode(text, &mut b).expect("hf encodes");
                assert_eq!(a, b, "{name} {truncation:?}: {text:?}");
                stripped += usize::from(text.contains(" <mask>") || text.contains("<rs> "));
            }
            assert!(
                stripped > 100,
                "{name}: only {stripped} texts strip whitespace"
            );
        }
    }
}

/// GPT-NeoX's and ModernBERT's byte-level BPE pipeline: an NFC normaliser, BERT's special tokens with `[MASK]`
/// taking in the whitespace before it, `[CLS] $A [SEP]`, and added tokens matched on normalised text
/// (`normalized: true`: runs of spaces and tabs, a placeholder, and tokens whose text NFC composes), which the
/// crate finds in a second pass, in the NFC form of the text between the first pass's matches. On random texts
/// with all of them among whitespace and decomposed characters.
#[test]
fn neox_style_normalized_added_tokens_equal() {
    let path = workloads()
        .join("vocab")
        .join("gpt2_style_bpe_4k_tokenizer.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("vocab")).expect("JSON");
    let token = |id: usize, content: &str, lstrip: bool, normalized: bool| {
        serde_json::json!({"id": id, "content": content, "single_word": false, "lstrip": lstrip,
            "rstrip": false, "normalized": normalized, "special": !normalized})
    };
    json["normalizer"] = serde_json::json!({"type": "NFC"});
    json["added_tokens"] = serde_json::json!([
        token(4000, "[CLS]", false, false),
        token(4001, "[SEP]", false, false),
        token(4002, "[MASK]", true, false),
        token(4003, "|||IP_ADDRESS|||", false, true),
        token(4004, "  ", false, true),
        token(4005, "    ", false, true),
        token(4006, "\t\t", false, true),
        // Composed forms, which decomposed text ("cafe\u{301}", "c\u{327}\u{301}" or its marks out of canonical
        // order) matches only once normalised. Ids in the file's order: a content the model's vocabulary holds
        // would take the model's id in the crate ("\u{e9}" is byte 0xE9's own piece).
        token(4007, "caf\u{e9}", false, true),
        token(4008, "\u{1e09}", false, true),
    ]);
    json["post_processor"] = serde_json::json!({"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
        "pair": [], "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [4000], "tokens": ["[CLS]"]},
                                       "[SEP]": {"id": "[SEP]", "ids": [4001], "tokens": ["[SEP]"]}}});
    let mut rng = StdRng::seed_from_u64(0x00e0_be27);
    let pieces = [
        "[MASK]",
        "[CLS]",
        "|||IP_ADDRESS|||",
        "cafe\u{301}",
        "caf\u{e9}",
        "c\u{327}\u{301}",
        "c\u{301}\u{327}",
        "\u{1e09}",
        "\u{1e09}\u{301}",
        "  ",
        "     ",
        "\t\t\t",
        " \t\t",
    ];
    let texts: Vec<String> = (0..2000)
        .map(|_| {
            let mut s = random_text(&mut rng);
            for _ in 0..rng.gen_range(0..5) {
                let at = s
                    .char_indices()
                    .map(|(i, _)| i)
                    .nth(rng.gen_range(0..s.chars().count() + 1))
                    .unwrap_or(s.len());
                s.insert_str(at, pieces[rng.gen_range(0..pieces.len())]);
            }
            s
        })
        .collect();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("neox.json");
    std::fs::write(&file, json.to_string()).expect("write");
    for truncation in [None, Some(Truncation::right(12))] {
        let fast =
            tokenizer::load(&file, TokenizerKind::Fast, truncation, true).expect("fast loads");
        let hf = tokenizer::load(&file, TokenizerKind::Hf, truncation, true).expect("hf loads");
        let (mut scratch, mut a, mut b) = (Scratch::default(), Vec::new(), Vec::new());
        let mut second_pass = 0;
        for text in &texts {
            fast.encode_with(text, &mut scratch, &mut a)
                .expect("fast encodes");
            hf.encode(text, &mut b).expect("hf encodes");
            assert_eq!(a, b, "{truncation:?}: {text:?}");
            second_pass += usize::from(b.iter().any(|&id| (4003..=4008).contains(&id)));
        }
        assert!(
            second_pass > 500,
            "only {second_pass} texts matched a normalised added token"
        );
    }
}

/// The default (`auto`) reads a `tokenizer.json` the in-house tokenizer refuses with the crate's, rather than
/// refusing the model: here MiniLM's with a `single_word` added token, which `fast` refuses.
#[test]
fn auto_falls_back_to_the_crate_where_the_in_house_tokenizer_refuses() {
    let path = workloads().join("vocab/all-MiniLM-L6-v2/tokenizer.json");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("vocab")).expect("JSON");
    json["added_tokens"][0]["single_word"] = true.into();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("tokenizer.json");
    std::fs::write(&file, json.to_string()).expect("write");
    let refusal = tokenizer::load(&file, TokenizerKind::Fast, None, true)
        .err()
        .expect("fast refuses");
    assert!(refusal.to_string().contains("single_word"), "{refusal}");
    let auto = tokenizer::load(&file, TokenizerKind::Auto, None, true).expect("auto loads");
    let hf = tokenizer::load(&file, TokenizerKind::Hf, None, true).expect("hf loads");
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for text in ["a [PAD] b", "[PAD]x", "plain text, punctuated."] {
        auto.encode(text, &mut a).expect("auto encodes");
        hf.encode(text, &mut b).expect("hf encodes");
        assert_eq!(a, b, "{text:?}");
    }
}

/// Both implementations say alike how many special ids go before and after a text (what a cut of a client's
/// ids keeps), none with the special tokens left out; and a limit shorter than the special tokens is refused only
/// where an encode adds them (regression: a StaticEmbedding's tokenizer, which adds none, was refused at one).
#[test]
fn special_tokens_around_a_text_and_the_limit_they_need() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut bert: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(workloads().join("vocab/all-MiniLM-L6-v2/tokenizer.json"))
            .expect("vocab"),
    )
    .expect("JSON");
    // Two before the text and two after it, behind a step that adds none; one of them an id past the vocabulary
    // (`id_bound` counts it only where the special tokens are added).
    let special = |id: &str| serde_json::json!({"SpecialToken": {"id": id, "type_id": 0}});
    let tokens = |id: &str, n: u32| serde_json::json!({"id": id, "ids": [n], "tokens": [id]});
    bert["post_processor"] = serde_json::json!({"type": "Sequence", "processors": [
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false},
        {"type": "TemplateProcessing",
            "single": [special("[CLS]"), special("[X]"), {"Sequence": {"id": "A", "type_id": 0}},
                special("[SEP]"), special("[SEP]")],
            "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"[CLS]": tokens("[CLS]", 101), "[X]": tokens("[X]", 40_000),
                "[SEP]": tokens("[SEP]", 102)}}]});
    let wrapped = dir.path().join("wrapped.json");
    std::fs::write(&wrapped, bert.to_string()).expect("write");
    let mut files: Vec<_> = TOKENIZERS
        .iter()
        .map(|f| workloads().join("vocab").join(f))
        .collect();
    files.push(wrapped);
    let mut seen = std::collections::BTreeSet::new();
    for path in &files {
        let load = |kind, truncation, specials| tokenizer::load(path, kind, truncation, specials);
        let around = [TokenizerKind::Fast, TokenizerKind::Hf]
            .map(|kind| load(kind, None, true).expect("loads").specials_around());
        assert_eq!(around[0], around[1], "{}", path.display());
        // The same at a limit of the special tokens alone (the crate's post_process would truncate first).
        let at_limit = Some(Truncation::right(around[0].0 + around[0].1));
        for kind in [TokenizerKind::Fast, TokenizerKind::Hf] {
            let t = load(kind, at_limit, true).expect("loads at the limit");
            assert_eq!(
                t.specials_around(),
                around[0],
                "{} {kind:?}",
                path.display()
            );
        }
        let mut ids = Vec::new();
        let fast = load(TokenizerKind::Fast, None, true).expect("loads");
        fast.encode("a b", &mut ids).expect("encodes");
        let (before, after) = around[0];
        assert!(ids.len() > before + after, "{}: {ids:?}", path.display());
        seen.insert(around[0]);
        // The ids an encode can give, alike with the special tokens and without them.
        for specials in [true, false] {
            let bounds = [TokenizerKind::Fast, TokenizerKind::Hf]
                .map(|kind| load(kind, None, specials).expect("loads").id_bound());
            assert_eq!(bounds[0], bounds[1], "{} {specials}", path.display());
        }
        for kind in [TokenizerKind::Fast, TokenizerKind::Hf] {
            let plain =
                load(kind, Some(Truncation::right(1)), false).expect("no special tokens to hold");
            assert_eq!(plain.specials_around(), (0, 0));
            plain.encode("a b c", &mut ids).expect("encodes");
            assert_eq!(ids.len(), 1);
            if before + after > 1 {
                assert!(load(kind, Some(Truncation::right(1)), true).is_err());
            }
        }
    }
    let expected = [(0, 1), (1, 0), (1, 1), (2, 2)];
    assert!(
        expected.iter().all(|e| seen.contains(e)),
        "the vocabularies cover {expected:?}: {seen:?}"
    );
}

/// ALBERT's and XLNet's normalisers in front of a Unigram (the XLM-R-style vocabulary's) beyond the shipped
/// albert_style file (transformers 4's ALBERT conversion, in every test above): transformers 5's AlbertTokenizer
/// (WhitespaceSplit then Metaspace, no space rule, and here no charsmap, which would hide NFKD's work behind its
/// own) and XLNet's (case kept, `$A <sep> <cls>`). The in-house tokenizer loads each (`fast`, no fallback) and
/// matches the crate on the corpus, random Unicode (ligatures, full-width letters, `İ`, `Σ`, combining marks) and
/// hostile runs of marks, whole and truncated; Metaspace's `first` behind NFKD is refused.
#[test]
fn albert_and_xlnet_normalisers_equal() {
    use serde_json::json;
    let read = |file: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(workloads().join("vocab").join(file)).expect("vocab");
        serde_json::from_str(&text).expect("JSON")
    };
    let albert = read("albert_style_unigram_1k_tokenizer.json");
    let steps = albert["normalizer"]["normalizers"]
        .as_array()
        .expect("a Sequence")
        .clone();
    let named = |kind: &str| -> Vec<serde_json::Value> {
        steps
            .iter()
            .filter(|s| s["type"] == kind)
            .cloned()
            .collect()
    };
    let [quotes, nfkd, strip, lower, charsmap, spaces] = [
        "Replace",
        "NFKD",
        "StripAccents",
        "Lowercase",
        "Precompiled",
        "Replace",
    ]
    .map(named);
    let normalizer =
        |parts: Vec<serde_json::Value>| json!({"type": "Sequence", "normalizers": parts});
    let metaspace = albert["pre_tokenizer"].clone();
    let special = |id: &str| json!({"SpecialToken": {"id": id, "type_id": 0}});
    let xlnet_template = json!({"type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}}, special("</s>"), special("<s>")], "pair": [],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
            "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}});
    let variants = [
        (
            "albert (transformers 5)",
            normalizer([&quotes[..2], &nfkd, &strip, &lower].concat()),
            json!({"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}, metaspace]}),
            albert["post_processor"].clone(),
        ),
        (
            "xlnet",
            normalizer([&quotes[..2], &nfkd, &strip, &charsmap, &spaces[2..]].concat()),
            metaspace,
            xlnet_template,
        ),
    ];
    let mut rng = StdRng::seed_from_u64(0x00a1_be27);
    let mut texts = corpus();
    texts.extend((0..3000).map(|_| random_text(&mut rng)));
    texts.extend([
        "``Quoted'' ÀÉÎÕÜ ǅ İstanbul ΣΟΦΟΣ ﬁne ①½ Ｔｅｓｔ  two  spaces".into(),
        "q\u{307}\u{323}\u{301}".repeat(5000),
        "\u{301}".repeat(1000),
        format!("a{}b", "\u{0F73}\u{0F75}".repeat(300)),
    ]);
    let dir = tempfile::tempdir().expect("temp dir");
    for (name, normalizer, pre_tokenizer, post_processor) in variants {
        let mut json = albert.clone();
        json["normalizer"] = normalizer;
        json["pre_tokenizer"] = pre_tokenizer;
        json["post_processor"] = post_processor;
        let file = dir.path().join(format!("{}.json", name.replace(' ', "_")));
        std::fs::write(&file, json.to_string()).expect("write");
        let file = file.to_str().expect("utf-8 path");
        let compared = assert_same(file, None, &texts);
        assert!(compared > texts.len() * 10, "{name}: {compared} ids");
        assert_same(file, Some(Truncation::right(16)), &texts);
        let mut first = json.clone();
        let pre = &mut first["pre_tokenizer"];
        let metaspace = match pre.get_mut("pretokenizers") {
            Some(steps) => &mut steps[1],
            None => pre,
        };
        metaspace["prepend_scheme"] = "first".into();
        std::fs::write(file, first.to_string()).expect("write");
        match tokenizer::load(std::path::Path::new(file), TokenizerKind::Fast, None, true) {
            Err(e) => assert!(
                e.to_string().contains("prepend_scheme \"first\""),
                "{name}: {e}"
            ),
            Ok(_) => panic!("{name}: `first` behind NFKD loaded"),
        }
    }
}

/// Pairs of texts (a cross-encoder's input): each tokenizer's pair template, and BERT's and RoBERTa's own
/// processors on MiniLM's vocabulary, id for id and token type for token type, whole and truncated longest first
/// from either side at lengths that cut the shorter text, the longer one, or both to about half; and whether
/// truncation cut the pair.
#[test]
fn pairs_equal_with_their_token_types() {
    let texts = corpus();
    let path = workloads().join("vocab/all-MiniLM-L6-v2/tokenizer.json");
    let minilm: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).expect("vocab")).expect("JSON");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut files: Vec<std::path::PathBuf> = TOKENIZERS
        .iter()
        .map(|f| workloads().join("vocab").join(f))
        .collect();
    for (name, processor) in [
        (
            "bert_processing.json",
            serde_json::json!({"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}),
        ),
        (
            "roberta_processing.json",
            serde_json::json!({"type": "RobertaProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101],
                "trim_offsets": true, "add_prefix_space": false}),
        ),
    ] {
        let mut json = minilm.clone();
        json["post_processor"] = processor;
        let file = dir.path().join(name);
        std::fs::write(&file, json.to_string()).expect("write");
        files.push(file);
    }
    let (mut typed, mut cut) = (0, 0);
    for file in &files {
        for truncation in [None, Some(9), Some(24), Some(64)] {
            for side in [TruncationSide::Right, TruncationSide::Left] {
                let truncation = truncation.map(|max_length| Truncation { max_length, side });
                let load = |kind| tokenizer::load(file, kind, truncation, true).expect("loads");
                let (fast, hf) = (load(TokenizerKind::Fast), load(TokenizerKind::Hf));
                let (mut scratch, mut a, mut b) = (Scratch::default(), Vec::new(), Vec::new());
                for (i, w) in texts.windows(2).step_by(97).take(200).enumerate() {
                    // Short queries before long passages, and the other way round.
                    let (q, p) = if i % 2 == 0 {
                        (&w[0][..w[0].floor_char_boundary(40)], w[1].as_str())
                    } else {
                        (w[0].as_str(), &w[1][..w[1].floor_char_boundary(30)])
                    };
                    let got = fast.encode_pair(q, p, &mut scratch, &mut a).expect("fast");
                    let want = hf.encode_pair(q, p, &mut scratch, &mut b).expect("hf");
                    assert_eq!(
                        (&a, got),
                        (&b, want),
                        "{file:?} {truncation:?}: {q:?} / {p:?}"
                    );
                    typed += usize::from(got.type1_from.is_some());
                    cut += usize::from(got.cut);
                }
            }
        }
    }
    assert!(typed > 1000, "{typed} pairs had tokens of type 1");
    assert!(cut > 1000, "{cut} pairs were cut");
}
