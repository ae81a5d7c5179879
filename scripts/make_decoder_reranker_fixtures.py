"""Decoder rerankers as sentence-transformers 6's CrossEncoder runs them: random-weight Qwen3 checkpoints whose
(query, document) pairs go through a chat template, with the CrossEncoder's raw scores as the reference.

- qwen3_reranker_seq_cls: a bare Qwen3ForSequenceClassification (one label; tomaarsen/Qwen3-Reranker-0.6B-seq-cls's
  shape: the `score` row over the last token's final state), its tokenizer_config.json holding a ChatML chat
  template, which the CrossEncoder then renders each pair through (roles `query` and `document`, no generation
  prompt, as it infers for a bare checkpoint with a template).
- qwen3_reranker_logit_score: a sentence-transformers 6 save of a Qwen3ForCausalLM (`transformer_task`
  text-generation; zerank-2's and Qwen3-Reranker's layout): a Qwen3-Reranker-style chat_template.jinja (system
  instruction, `<Query>`/`<Document>` from the roles, the generation prompt as processing_kwargs ask), then
  LogitScore: the logit of "yes" minus that of "no" at the last token, the LM head tied to the embeddings.
- qwen3_reranker_true_logit: as the last, zerank-2's LogitScore (a true token alone, `false_token_id` null) over
  an untied `lm_head`, and a template reading its messages as Python strings (`.strip()`).

max length 128: long documents are cut, and the CrossEncoder writes the template's suffix back over the cut
row's last tokens, which the reference's ids show. Writes each directory plus reference.jsonl (query, passage,
ids as the CrossEncoder tokenizes the pair, logits as base64 little-endian f32). Needs the peers venv
(bash scripts/setup_peers.sh). Run from the repository root (naming fixtures makes only those):
  ~/.cache/embedding-workbench/peers-venv/bin/python scripts/make_decoder_reranker_fixtures.py [NAME ...]
"""
import json
import shutil
import sys

import torch
from sentence_transformers import CrossEncoder
from tokenizers import AddedToken, processors
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM, Qwen3ForSequenceClassification

sys.path.insert(0, "scripts")
import fixture_texts  # noqa: E402
import make_cross_encoder_fixtures as ce_fixtures  # noqa: E402  write_reference
import make_encoder_fixtures as enc  # noqa: E402  make_named, OUT
import make_qwen3_fixtures as q3  # noqa: E402  the Qwen byte-level BPE

MAX_LEN = 128
SPECIALS = ["<|im_start|>", "<|im_end|>"]

# A ChatML template as Qwen's tokenizers carry one: every message's role and content, in order.
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Qwen3-Reranker's prompt, written as a template over sentence-transformers 6's pair roles.
RERANKER = """{%- set query = messages | selectattr("role", "eq", "query") | map(attribute="content") | first -%}
{%- set document = messages | selectattr("role", "eq", "document") | map(attribute="content") | first -%}
<|im_start|>system
Judge: "yes" or "no".<|im_end|>
<|im_start|>user
<Instruct>: search
<Query>: {{ query }}
<Document>: {{ document }}<|im_end|>
{% if add_generation_prompt %}
<|im_start|>assistant
<think>

</think>

{% endif %}"""

# zerank-2's turns: the query as the system's, the document as the user's, each stripped.
ZERANK = """{%- for message in messages %}
{%- if message.role == "query" %}<|im_start|>system
{{ message.content.strip() }}<|im_end|>
{% elif message.role == "document" %}<|im_start|>user
{{ message.content.strip() }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}<|im_start|>assistant
{% endif %}"""


def tokenizer():
    """Qwen's byte-level BPE with ChatML's tokens, adding no special tokens of its own (Qwen3's post-processor)."""
    tok = q3.tokenizer()
    tok.no_truncation()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def pairs():
    texts = fixture_texts.sample(20261207)
    out = []
    for i in range(len(texts) - 1):
        q, p = texts[i][:80], texts[i + 1]
        # Every third document long: the pair is cut at MAX_LEN and the template's suffix written back.
        p = (p + " ") * 6 if i % 3 == 0 else p
        if q.strip() and p.strip():
            out.append((q, p))
    return out


def config(tok, tied):
    """The tokenizer's padding is the config's (a sequence classifier reads the last token that is not it)."""
    vocab = tok.get_vocab_size()
    return Qwen3Config(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                       rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=tied, initializer_range=0.2,
                       attn_implementation="eager", num_labels=1, pad_token_id=tok.token_to_id(q3.EOS))


def perturb(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.3 if n.endswith("norm.weight") else 0.2))
            if n.endswith("norm.weight"):
                p.add_(1.0)
    return model.eval()


def save_tokenizer(d, tok, template=None):
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   model_max_length=MAX_LEN)
    if template is not None:
        fast.chat_template = template
    fast.save_pretrained(str(d))
    for f in ["special_tokens_map.json", "generation_config.json"]:
        (d / f).unlink(missing_ok=True)


def logit_score_files(d, true_id, false_id):
    """sentence-transformers 6's files for a causal LM under LogitScore, as zerank-2 ships them."""
    (d / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.base.modules.transformer.Transformer"},
        {"idx": 1, "name": "1", "path": "1_LogitScore",
         "type": "sentence_transformers.cross_encoder.modules.logit_score.LogitScore"},
    ], indent=2))
    (d / "1_LogitScore").mkdir()
    (d / "1_LogitScore/config.json").write_text(json.dumps({"true_token_id": true_id, "false_token_id": false_id}))
    (d / "sentence_bert_config.json").write_text(json.dumps({
        "transformer_task": "text-generation",
        "modality_config": {"text": {"method": "forward", "method_output_name": "logits"},
                            "message": {"method": "forward", "method_output_name": "logits", "format": "flat"}},
        "module_output_name": "causal_logits",
        "processing_kwargs": {"chat_template": {"add_generation_prompt": True}},
    }, indent=2))
    (d / "config_sentence_transformers.json").write_text(json.dumps({
        "model_type": "CrossEncoder", "activation_fn": "torch.nn.modules.activation.Sigmoid", "prompts": {},
        "default_prompt_name": None}, indent=2))


def reference(d):
    ce = CrossEncoder(str(d), device="cpu", max_length=MAX_LEN)
    batch = pairs()
    scores = ce.predict(batch, batch_size=4, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
    rows = [(q, p, ce.preprocess([(q, p)])["input_ids"][0].tolist(), None, row) for (q, p), row in zip(batch, scores)]
    cut = ce_fixtures.write_reference(d, rows, MAX_LEN)
    print(f"{d}: {len(batch)} pairs, {cut} at the limit")


def fresh(name):
    d = enc.OUT / name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    return d


def qwen3_reranker_seq_cls():
    d = fresh("qwen3_reranker_seq_cls")
    tok = tokenizer()
    perturb(Qwen3ForSequenceClassification(config(tok, True)), 11).save_pretrained(str(d))
    save_tokenizer(d, tok, CHATML)
    reference(d)


def causal(name, template, tied, seed, false_token):
    d = fresh(name)
    tok = tokenizer()
    perturb(Qwen3ForCausalLM(config(tok, tied)), seed).save_pretrained(str(d))
    save_tokenizer(d, tok)
    (d / "chat_template.jinja").write_text(template)
    # "yes" and "no" as the tokenizer has them (the first token of each where the BPE splits them).
    yes, no = (tok.encode(w).ids[0] for w in ["yes", "no"])
    logit_score_files(d, yes, no if false_token else None)
    reference(d)


def qwen3_reranker_logit_score():
    causal("qwen3_reranker_logit_score", RERANKER, True, 12, True)


def qwen3_reranker_true_logit():
    causal("qwen3_reranker_true_logit", ZERANK, False, 13, False)


FIXTURES = [qwen3_reranker_seq_cls, qwen3_reranker_logit_score, qwen3_reranker_true_logit]

if __name__ == "__main__":
    enc.make_named(FIXTURES)
