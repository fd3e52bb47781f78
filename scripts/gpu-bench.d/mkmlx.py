#!/usr/bin/env python3
"""Random-weight Llama-3-8B-shaped checkpoint in Hugging Face layout, for runner-mlx (numpy only).

    mkmlx.py OUT_DIR [--tiny]

Writes OUT_DIR/{config.json, tokenizer.json, tokenizer_config.json, model.safetensors} (bf16).
The weights are the GGUF bench model's (gpu-bench's mkmodel.py, shared/research/gpu-baseline.md):
the same seeded pool of f16 values and the same random-offset slices, drawn in mkmodel's order,
then rounded to bf16 (round to nearest even). llama.cpp's GGUF layout has Q and K rows permuted
for its adjacent-pair RoPE; HF checkpoints use half-split RoPE, so attn_q/attn_k are permuted
back (convert_hf_to_gguf's permute, inverted) and both engines compute the same function up to
the bf16 rounding. token_embd/output are embed_tokens/lm_head (not tied), norms are ones.
The tokenizer is mkmodel's byte-level BPE (256 bytes, all byte pairs, then triples up to 128000
tokens, 256 special tokens at 128000..128255), as a tokenizer.json with a BOS post-processor.
--tiny: the same vocabulary and layout with 2 layers of width 64 (the CPU smoke).

The safetensors file is written here (JSON header + raw bytes), not with the safetensors package.
"""
import json, os, sys
import numpy as np

FULL = dict(hidden=4096, layers=32, ff=14336, heads=32, kv=8, vocab=128256)
TINY = dict(hidden=64, layers=2, ff=128, heads=4, kv=2, vocab=128256)


def vocab():
    """mkmodel.py's tokens and merges (GPT-2 byte->unicode alphabet)."""
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    chars = [chr(c) for c in cs]
    tokens, merges = list(chars), []
    for a in chars:
        for b in chars:
            tokens.append(a + b); merges.append(f"{a} {b}")
    i = 0
    while len(tokens) < 128000:
        ab = tokens[256 + i // 256]; c = chars[i % 256]
        tokens.append(ab + c); merges.append(f"{ab} {c}"); i += 1
    del tokens[128000:]
    merges = merges[:127744]
    sp = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 6: "<|start_header_id|>",
          7: "<|end_header_id|>", 9: "<|eot_id|>"}
    special = [sp.get(k, f"<|reserved_special_token_{k}|>") for k in range(256)]
    return tokens, merges, special


def tokenizer_json(tokens, merges, special):
    bos = special[0]
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [dict(id=128000 + k, content=s, single_word=False, lstrip=False, rstrip=False,
                              normalized=False, special=True) for k, s in enumerate(special)],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"SpecialToken": {"id": bos, "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {bos: {"id": bos, "ids": [128000], "tokens": [bos]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "ignore_merges": False, "vocab": {t: i for i, t in enumerate(tokens)}, "merges": merges},
    }


def to_bf16(f16):
    """f16 array -> bf16 bit patterns (uint16), round to nearest even (values are finite)."""
    x = f16.astype(np.float32).view(np.uint32)
    return ((x + np.uint32(0x7FFF) + ((x >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)


def unpermute(w, n_head):
    """Inverse of convert_hf_to_gguf's permute (rows of each head: pairs -> halves)."""
    r, c = w.shape
    return w.reshape(n_head, r // n_head // 2, 2, c).swapaxes(1, 2).reshape(r, c)


def plan(s, rng, pool_size):
    """(name, shape, pool offset or None for ones, heads to un-permute) in mkmodel.py's draw order."""
    h, f, kvd, v = s["hidden"], s["ff"], s["hidden"] // s["heads"] * s["kv"], s["vocab"]
    def mat(r, c):
        return int(rng.integers(0, pool_size - r * c + 1))
    out = [("model.embed_tokens.weight", (v, h), mat(v, h), 0)]
    for L in range(s["layers"]):
        p = f"model.layers.{L}."
        out += [(p + "input_layernorm.weight", (h,), None, 0), (p + "post_attention_layernorm.weight", (h,), None, 0)]
        out += [(p + "self_attn.q_proj.weight", (h, h), mat(h, h), s["heads"])]
        out += [(p + "self_attn.k_proj.weight", (kvd, h), mat(kvd, h), s["kv"])]
        out += [(p + "self_attn.v_proj.weight", (kvd, h), mat(kvd, h), 0)]
        out += [(p + "self_attn.o_proj.weight", (h, h), mat(h, h), 0)]
        out += [(p + "mlp.gate_proj.weight", (f, h), mat(f, h), 0), (p + "mlp.up_proj.weight", (f, h), mat(f, h), 0)]
        out += [(p + "mlp.down_proj.weight", (h, f), mat(h, f), 0)]
    out += [("model.norm.weight", (h,), None, 0), ("lm_head.weight", (v, h), mat(v, h), 0)]
    return out


def write_safetensors(path, tensors, pool):
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape, _, _ in tensors:
        n = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)  # the data section starts 8-byte aligned
    ones = to_bf16(np.ones(max(s[0] for _, s, o, _ in tensors if o is None), dtype=np.float16))
    with open(path, "wb") as fh:
        fh.write(len(hb).to_bytes(8, "little")); fh.write(hb)
        for name, shape, o, heads in tensors:
            n = int(np.prod(shape))
            if o is None:
                fh.write(ones[:n].tobytes()); continue
            w = pool[o:o + n].reshape(shape)
            fh.write((unpermute(w, heads) if heads else w).tobytes())
    return 8 + len(hb) + off


def main():
    out = sys.argv[1]
    s = TINY if "--tiny" in sys.argv[2:] else FULL
    os.makedirs(out, exist_ok=True)
    tokens, merges, special = vocab()
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer_json(tokens, merges, special), f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": special[0], "eos_token": special[1], "add_bos_token": True}, f)
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": s["hidden"],
           "intermediate_size": s["ff"], "num_hidden_layers": s["layers"], "num_attention_heads": s["heads"],
           "num_key_value_heads": s["kv"], "head_dim": s["hidden"] // s["heads"], "vocab_size": s["vocab"],
           "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "max_position_embeddings": 131072,
           "tie_word_embeddings": False, "bos_token_id": 128000, "eos_token_id": 128001,
           "torch_dtype": "bfloat16", "hidden_act": "silu"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    # mkmodel.py's generator: the pool first, then one offset per matrix in its tensor order.
    rng = np.random.default_rng(0)
    n = s["vocab"] * s["hidden"]
    pool = to_bf16((rng.standard_normal(n, dtype=np.float32) * 0.02).astype(np.float16))
    size = write_safetensors(os.path.join(out, "model.safetensors"), plan(s, rng, n), pool)
    print("wrote", out, size, "bytes of weights")


if __name__ == "__main__":
    main()
