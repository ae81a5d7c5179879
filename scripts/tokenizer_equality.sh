#!/usr/bin/env bash
# Full-corpus equality check of the in-house tokenizer against the Hugging Face crate: every text of every corpus
# through `bench tokenize --tokenizer fast` and `--tokenizer hf`, line by line, for WordPiece (all-MiniLM-L6-v2)
# the three Unigram tokenizers, the three byte-level BPE ones and the three SentencePiece BPE ones, without
# truncation and with right and left truncation.
#
#   scripts/tokenizer_equality.sh [TEXT_DIR]    (default: ../shared/data/text when present, else workloads/text)
#   TOKENIZERS="workloads/vocab/a.json ..." scripts/tokenizer_equality.sh    (only those tokenizers)
#
# Prints one row per (tokenizer, truncation, corpus) and the totals; exits 1 on any mismatch.
set -euo pipefail
cd "$(dirname "$0")/.."
text_dir=${1:-}
if [[ -z $text_dir ]]; then
    if [[ -d ../shared/data/text ]]; then text_dir=../shared/data/text; else text_dir=workloads/text; fi
fi
target=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p harness
bench=$target/release/bench
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

texts=0 mismatches=0
printf '%-42s %-22s %-32s %8s %10s\n' tokenizer truncation corpus texts mismatches
default_tokenizers="workloads/vocab/all-MiniLM-L6-v2/tokenizer.json workloads/vocab/pegasus_unigram_tokenizer.json
    workloads/vocab/xlmr_style_unigram_1k_tokenizer.json workloads/vocab/xlmr_style_unigram_ja_8k_tokenizer.json
    workloads/vocab/qwen2_style_bpe_4k_tokenizer.json workloads/vocab/gpt2_style_bpe_4k_tokenizer.json
    workloads/vocab/llama3_style_bpe_4k_tokenizer.json workloads/vocab/llama2_style_spbpe_4k_tokenizer.json
    workloads/vocab/mistral_style_spbpe_4k_tokenizer.json workloads/vocab/gemma_style_spbpe_4k_tokenizer.json"
for tok in ${TOKENIZERS:-$default_tokenizers}; do
    for trunc in "" "--max-length 128" "--max-length 64 --truncate-left"; do
        for corpus in "$text_dir"/*.jsonl; do
            # shellcheck disable=SC2086  # $trunc is a list of flags
            "$bench" tokenize --tokenizer-json "$tok" --tokenizer fast $trunc <"$corpus" >"$work/fast" &
            # shellcheck disable=SC2086
            "$bench" tokenize --tokenizer-json "$tok" --tokenizer hf $trunc <"$corpus" >"$work/hf"
            wait $!
            n=$(wc -l <"$corpus")
            [[ $(wc -l <"$work/fast") == "$n" && $(wc -l <"$work/hf") == "$n" ]] || { echo "short output on $corpus"; exit 1; }
            m=$(paste -d '\t' "$work/fast" "$work/hf" | awk -F '\t' '$1 != $2' | wc -l)
            printf '%-42s %-22s %-32s %8d %10d\n' "${tok#workloads/vocab/}" "${trunc:-none}" "$(basename "$corpus")" "$n" "$m"
            texts=$((texts + n)) mismatches=$((mismatches + m))
        done
    done
done
echo "total: $texts texts compared, $mismatches mismatches"
[[ $mismatches == 0 ]]
