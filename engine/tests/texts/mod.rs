//! What the tokenizer tests share: the shipped vocabularies and corpora, random hostile texts, and the
//! comparison of `fast` with the reference `hf` on one `tokenizer.json`. Each test crate compiles this module on
//! its own.

use std::path::{Path, PathBuf};

use engine::tokenizer::{self, Scratch, TokenizerKind};
use rand::rngs::StdRng;
use rand::Rng;

pub fn workloads() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../workloads")
}

pub fn corpus() -> Vec<String> {
    corpus_of(&workloads().join("text"))
}

pub fn corpus_of(dir: &Path) -> Vec<String> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .expect("corpus directory")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    let mut texts = Vec::new();
    for f in files {
        for line in std::fs::read_to_string(&f).expect("corpus").lines() {
            let v: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            texts.push(v["text"].as_str().expect("text field").to_owned());
        }
    }
    texts
}

/// A random string mixing ASCII, accents and combining marks, CJK, kana, Hangul, emoji (with ZWJ and skin
/// tones), controls, every kind of whitespace, the special tokens' own text, and long runs.
pub fn random_text(rng: &mut StdRng) -> String {
    const PIECES: &[&str] = &[
        "[CLS]",
        "[SEP]",
        "[UNK]",
        "<s>",
        "</s>",
        "<unk>",
        "<pad>",
        "<mask_1>",
        "##",
        "▁",
        "\r\n",
        "  ",
        "   ",
        "e\u{301}",
        "\u{1F44D}\u{1F3FD}",
        "\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}",
        "\u{1F1EB}\u{1F1F7}",
        "ﬁ",
        "Ⅻ",
        "①",
        "ｶﾞ",
        "ＡＢＣ",
        "İ",
        "ß",
        "Σ",
        "ǅ",
        "\u{FEFF}",
        "\u{FFFD}",
        "<|endoftext|>",
        "<|begin_of_text|>",
        "<bos>",
        "<eos>",
        "[INST]",
        "<tab>",
        " <tab>",
        "\u{2581}<tab>",
        "<start_of_turn>",
        "<table>",
        "\n\n\n",
        "'s",
        "'LL",
        "'ſ",
        "'Re",
        "\r\n\r\n",
        " \n ",
        "\t\t",
        "12345",
        "٣٤٥",
        "?!\n",
        "\u{3000}",
        "a\u{308}\u{301}",
        "\u{1100}\u{1161}\u{11A8}",
    ];
    const RANGES: &[(u32, u32)] = &[
        (0x20, 0x7E),
        (0x20, 0x7E),
        (0x20, 0x7E),
        (0x00, 0x1F),
        (0x7F, 0xA0),
        (0xA0, 0x24F),
        (0x300, 0x36F),
        (0x370, 0x3FF),
        (0x400, 0x4FF),
        (0x590, 0x6FF),
        (0x900, 0x97F),
        (0xE00, 0xE7F),
        (0x1100, 0x11FF),
        (0x2000, 0x206F),
        (0x3000, 0x30FF),
        (0x3400, 0x4DBF),
        (0x4E00, 0x9FFF),
        (0xAC00, 0xD7A3),
        (0xF900, 0xFAFF),
        (0xFE00, 0xFE0F),
        (0xFF00, 0xFFEF),
        (0x1F300, 0x1FAFF),
        (0x20000, 0x2A6DF),
        (0xE0000, 0xE007F),
        (0x10FFF0, 0x10FFFF),
    ];
    let mut s = String::new();
    for _ in 0..rng.gen_range(0..40) {
        match rng.gen_range(0..10) {
            0 => s.push_str(PIECES[rng.gen_range(0..PIECES.len())]),
            1 => s.extend(std::iter::repeat_n(' ', rng.gen_range(1..4))),
            2 => s.push_str(
                ["the", "Tokenization", "naïve", "東京", "안녕", "123", "A.B"][rng.gen_range(0..7)],
            ),
            _ => {
                let (lo, hi) = RANGES[rng.gen_range(0..RANGES.len())];
                if let Some(c) = char::from_u32(rng.gen_range(lo..=hi)) {
                    s.push(c);
                }
            }
        }
    }
    s
}

/// Encodes every text with `fast` and `hf` from `file`: the same ids, or both fail. Returns how many failed.
pub fn compare(name: &str, file: &Path, texts: &[String]) -> usize {
    let fast = tokenizer::load(file, TokenizerKind::Fast, None, true).expect("fast loads");
    let hf = tokenizer::load(file, TokenizerKind::Hf, None, true).expect("hf loads");
    assert_eq!(fast.vocab_size(), hf.vocab_size(), "{name}: vocab size");
    assert_eq!(fast.id_bound(), hf.id_bound(), "{name}: id bound");
    let (mut scratch, mut a, mut b) = (Scratch::default(), Vec::new(), Vec::new());
    let mut failed = 0;
    for text in texts {
        let (fa, fb) = (
            fast.encode_with(text, &mut scratch, &mut a),
            hf.encode(text, &mut b),
        );
        assert_eq!(fa.is_ok(), fb.is_ok(), "{name}: {text:?}");
        if fa.is_ok() {
            assert_eq!(a, b, "{name}: {text:?}");
        } else {
            failed += 1;
        }
    }
    failed
}
