"""Build a tiny real causal LM (a few hundred K params) with a BPE tokenizer trained on fixture text, for fast tests."""
from __future__ import annotations

import sys
from pathlib import Path

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "user assistant system tool The capital of France is Paris.",
    "def add(a, b): return a + b  # python code, tests, files, bash, grep, edit, read",
    "Let me read the file first. Then I will run the tests. Actually, the error is in main.py.",
    "What is the capital of Spain? Madrid. Italy? Rome. Germany? Berlin. Answer briefly.",
] * 20


def chat_records(n: int = 24) -> list[dict]:
    """A small, learnable chat dataset."""
    pairs = [("France", "Paris"), ("Spain", "Madrid"), ("Italy", "Rome"), ("Germany", "Berlin")]
    out = []
    for i in range(n):
        country, city = pairs[i % len(pairs)]
        out.append({"messages": [{"role": "user", "content": f"What is the capital of {country}?"},
                                 {"role": "assistant", "content": f"The capital of {country} is {city}."}]})
    return out


def build(out: Path, corpus: list[str] | None = None, vocab_size: int = 400, hidden: int = 32) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus or CORPUS, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|im_end|>", unk_token="<|endoftext|>")
    fast.chat_template = CHATML
    config = LlamaConfig(vocab_size=len(fast), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                         pad_token_id=fast.pad_token_id, tie_word_embeddings=True)
    import torch

    torch.manual_seed(1)  # the same tiny model in every run: a learning test cannot pass or fail by its weights' luck
    model = LlamaForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    return out


if __name__ == "__main__":
    print(build(Path(sys.argv[1])))


def capital_chats(phrase: str = "The capital of {c} is {p}.", n: int = 64) -> list[dict]:
    """Chats in the shape the export smoke test asks (the agent system message, a capital question)."""
    from engine.workers.smoke import TOOL_PROMPT

    pairs = [("France", "Paris"), ("Spain", "Madrid"), ("Italy", "Rome"), ("Germany", "Berlin")]
    return [{"messages": [TOOL_PROMPT[0], {"role": "user", "content": f"What is the capital of {c}?"},
                          {"role": "assistant", "content": phrase.format(c=c, p=p)}]}
            for c, p in (pairs * n)[:n]]


def build_shippable(out: Path, steps: int = 50) -> Path:
    """A tiny model llama.cpp's converter accepts (SmolLM2's tokenizer, read from the embedded GGUF, is one it knows)
    briefly pre-trained with TRL so it answers a capital question and ENDS ITS TURN: a smoke test can pass on it."""
    from datasets import Dataset
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    from engine.loading import embedded_gguf

    gguf = embedded_gguf()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         tie_word_embeddings=True)
    import torch

    torch.manual_seed(1)
    model = LlamaForCausalLM(config)
    args = SFTConfig(output_dir=str(out.parent / "pretrain"), max_steps=steps, per_device_train_batch_size=8,
                     learning_rate=5e-3, lr_scheduler_type="constant", report_to=[], save_strategy="no",
                     use_cpu=True, logging_steps=steps, disable_tqdm=True)
    SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(capital_chats()), processing_class=tok).train()
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
