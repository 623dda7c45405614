"""Writes a weightless model folder shaped like Qwen3-VL-8B-Instruct, for real vLLM's API server to load.

Runs inside real vLLM's virtualenv (it needs the ``tokenizers`` package vLLM brings):
``python model_folder.py FOLDER``.

vLLM's API server reads a model folder for everything in front of the engine: the architecture and its
multimodal processor (config.json), the image processor's patch and merge sizes and its pixel bounds
(preprocessor_config.json), which decide how many tokens an image becomes, the tokenizer and the chat template.
None of it needs weights, and the engine core that would need them is replaced (fake_engine.py), so the folder
holds no weights and nothing is fetched from a model hub.

What is Qwen3-VL-8B-Instruct's own: the architecture, the sizes of its layers, its image and video processors'
settings and the special tokens its prompts are made of, so image-token counts are real vLLM's. What is not:
the tokenizer is byte-level with no merges (every byte of a text is one token), so counts of text tokens differ
from Qwen's; compare image tokens and shapes, not text tokens. The chat template is a short one that renders
user turns with images as Qwen's does.

The folder also holds ``fake_engine.json``: the token ids of the fake engine's answer. The answer's words are
whole tokens of the vocabulary (no merge makes them from a prompt, but they decode), so every step of the
engine adds a word to a stream and a natural answer ends after a few steps.
"""
import json
import pathlib
import sys

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

# Qwen's special tokens that a chat with images is rendered with, in the order they get ids after the bytes.
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|image_pad|>", "<|video_pad|>"]
END_OF_TURN = "<|im_end|>"
END_OF_TEXT = "<|endoftext|>"
# The fake engine's answer, one vocabulary entry per word (a word's leading space belongs to it).
ANSWER_WORDS = ["The", " picture", " shows", " a", " quiet", " path", " between", " green", " trees", " under",
                " a", " clear", " blue", " sky", "."]

# Qwen chat format: every turn is <|im_start|>role, a newline, its content and <|im_end|>. A content list is
# rendered part by part, an image as the vision markers around one image pad, which vLLM's Qwen3-VL processor
# widens to the image's tokens.
CHAT_TEMPLATE = """\
{%- for message in messages -%}
<|im_start|>{{ message.role }}
{% if message.content is string -%}
{{ message.content }}
{%- else -%}
{%- for part in message.content -%}
{%- if part.type in ('image', 'image_url') -%}
<|vision_start|><|image_pad|><|vision_end|>
{%- elif part.type in ('video', 'video_url') -%}
<|vision_start|><|video_pad|><|vision_end|>
{%- elif part.type == 'text' -%}
{{ part.text }}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
"""

# Qwen3-VL-8B-Instruct's processors: 16-pixel patches merged 2x2 into one token; images between 65536 and
# 16777216 pixels before a --mm-processor-kwargs cap; the fast image processor transformers 4.57 picks.
PROCESSOR_COMMON = {"patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
                    "image_std": [0.5, 0.5, 0.5], "processor_class": "Qwen3VLProcessor"}
IMAGE_PROCESSOR = dict(PROCESSOR_COMMON, image_processor_type="Qwen2VLImageProcessorFast",
                       size={"shortest_edge": 65536, "longest_edge": 16777216})
VIDEO_PROCESSOR = dict(PROCESSOR_COMMON, video_processor_type="Qwen3VLVideoProcessor",
                       size={"shortest_edge": 4096, "longest_edge": 25165824})


def byte_symbols():
    """The printable character byte-level tokenizers stand for each byte with (GPT-2's table): printable
    Latin-1 bytes stand for themselves, the others are moved past 255 in byte order."""
    kept = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    symbols, moved = {}, 0
    for byte in range(256):
        if byte in kept:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + moved)
            moved += 1
    return symbols


def vocabulary():
    """{token: id}: every byte, then each distinct answer word. The specials are added after these."""
    symbols = byte_symbols()
    vocab = {symbols[byte]: byte for byte in range(256)}
    for word in ANSWER_WORDS:
        token = "".join(symbols[byte] for byte in word.encode("utf-8"))
        vocab.setdefault(token, len(vocab))
    return vocab


def build_tokenizer():
    tokenizer = Tokenizer(models.BPE(vocab=vocabulary(), merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    return tokenizer


def answer_ids(tokenizer):
    symbols = byte_symbols()
    return [tokenizer.token_to_id("".join(symbols[byte] for byte in word.encode("utf-8")))
            for word in ANSWER_WORDS]


def model_config(ids, vocab_size):
    """Qwen3-VL-8B-Instruct's config.json with this folder's vocabulary and token ids."""
    return {
        "architectures": ["Qwen3VLForConditionalGeneration"],
        "model_type": "qwen3_vl",
        "image_token_id": ids["<|image_pad|>"],
        "video_token_id": ids["<|video_pad|>"],
        "vision_start_token_id": ids["<|vision_start|>"],
        "vision_end_token_id": ids["<|vision_end|>"],
        "tie_word_embeddings": False,
        "dtype": "bfloat16",
        "text_config": {
            "model_type": "qwen3_vl_text", "vocab_size": vocab_size, "hidden_size": 4096,
            "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "hidden_act": "silu", "max_position_embeddings": 262144,
            "rms_norm_eps": 1e-06, "rope_theta": 5000000, "attention_bias": False, "attention_dropout": 0.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": [24, 20, 20], "mrope_interleaved": True},
            "bos_token_id": ids[END_OF_TEXT], "eos_token_id": ids[END_OF_TURN], "dtype": "bfloat16",
            "use_cache": True,
        },
        "vision_config": {
            "model_type": "qwen3_vl", "depth": 27, "hidden_size": 1152, "intermediate_size": 4304,
            "num_heads": 16, "in_channels": 3, "patch_size": 16, "spatial_merge_size": 2,
            "temporal_patch_size": 2, "out_hidden_size": 4096, "num_position_embeddings": 2304,
            "deepstack_visual_indexes": [8, 16, 24], "hidden_act": "gelu_pytorch_tanh",
        },
    }


def tokenizer_config(ids):
    return {
        "tokenizer_class": "Qwen2Tokenizer",
        "model_max_length": 262144,
        "eos_token": END_OF_TURN, "pad_token": END_OF_TEXT, "bos_token": None, "unk_token": None,
        "clean_up_tokenization_spaces": False, "split_special_tokens": False,
        "added_tokens_decoder": {str(ids[token]): {"content": token, "special": True, "normalized": False,
                                                   "lstrip": False, "rstrip": False, "single_word": False}
                                 for token in SPECIAL_TOKENS},
    }


def write_json(path, content):
    path.write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def write(folder):
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save(str(folder / "tokenizer.json"))
    ids = {token: tokenizer.token_to_id(token) for token in SPECIAL_TOKENS}
    write_json(folder / "tokenizer_config.json", tokenizer_config(ids))
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE, encoding="utf-8")
    write_json(folder / "config.json", model_config(ids, tokenizer.get_vocab_size()))
    write_json(folder / "generation_config.json", {
        "bos_token_id": ids[END_OF_TEXT], "pad_token_id": ids[END_OF_TEXT],
        "eos_token_id": [ids[END_OF_TURN], ids[END_OF_TEXT]]})
    write_json(folder / "preprocessor_config.json", IMAGE_PROCESSOR)
    write_json(folder / "video_preprocessor_config.json", VIDEO_PROCESSOR)
    write_json(folder / "fake_engine.json", {"answer_token_ids": answer_ids(tokenizer)})


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python model_folder.py FOLDER")
    write(sys.argv[1])
