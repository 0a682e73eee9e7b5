"""A tiny random Llama and a word-level tokenizer with a chat template, made offline: what
`vllm serve` loads in the real-engine tests (no download). Run with the vLLM venv's python.

usage: python make_tiny_model.py OUTDIR
"""

import json
import os
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM

SPECIAL = ["[UNK]", "<s>", "</s>", "<|user|>", "<|assistant|>", "<|system|>"]
TEXT = """alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november
oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu
the quick brown fox jumps over the lazy dog and then it runs away into the forest
hello world how are you today I am fine thank you what is your name my name is tiny
please write a short story about a cat who lives in a big city with many lights
""".split()
VOCAB = 2048
MAX_LEN = 512


def main(out: str) -> None:
    os.makedirs(out, exist_ok=True)
    words: list[str] = []
    for w in SPECIAL + TEXT + [f"w{i}" for i in range(1500)]:
        if w not in words:
            words.append(w)
    vocab = {w: i for i, w in enumerate(words)}
    assert len(vocab) <= VOCAB, len(vocab)
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins tokens with single spaces
    tok.save(f"{out}/tokenizer.json")
    chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} {% endfor %}"
        "{% if add_generation_prompt %}<|assistant|> {% endif %}"
    )
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "[UNK]",
        "bos_token": "<s>",
        "eos_token": "</s>",
        "model_max_length": MAX_LEN,
        "clean_up_tokenization_spaces": False,
        "chat_template": chat_template,
    }
    with open(f"{out}/tokenizer_config.json", "w") as f:
        json.dump(config, f, indent=1)
    with open(f"{out}/special_tokens_map.json", "w") as f:
        json.dump({"unk_token": "[UNK]", "bos_token": "<s>", "eos_token": "</s>"}, f)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=MAX_LEN,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)


if __name__ == "__main__":
    main(sys.argv[1])
