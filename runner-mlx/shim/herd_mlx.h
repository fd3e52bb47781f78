// herd_mlx: the narrow C API runner-mlx calls (src/ffi.rs declares the same items).
// Every function catches C++ exceptions; failures return NULL / -1 and write a message into
// `err` (NUL-terminated, at most `err_len` bytes).
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct HerdMlxModel HerdMlxModel;
typedef struct HerdMlxCache HerdMlxCache;

// The llama-family shape (llama, qwen3, gemma3 text) the loader checks the weights against
// (from config.json).
typedef struct HerdMlxConfig {
  int32_t n_layer;
  int32_t n_embd;
  int32_t n_ff;
  int32_t n_head;
  int32_t n_head_kv;
  int32_t head_dim;
  int32_t n_vocab;
  float rope_theta;
  float norm_eps;
  int32_t rope_traditional;
  int32_t tied_embeddings;
  // qwen3: RMS-normalise each head of Q and K (self_attn.q_norm / k_norm, [head_dim]) before RoPE.
  int32_t qk_norm;
  // gemma3: every RMSNorm scales by (1 + w); norms after attention and after the MLP as well as
  // before them; GELU (tanh) gated MLP; the embedding times sqrt(n_embd) (rounded to the
  // embedding's stored dtype when that is bf16/f16, as HF does); Q/K norms (with qk_norm).
  int32_t gemma;
  // Attention logit scale; 0 means 1/sqrt(head_dim).
  float attn_scale;
  // Sliding-window attention: a query at position p sees keys at p - sliding_window < j <= p
  // (0: no window). With a window, layer i (0-based) is global when global_every > 0 and
  // (i + 1) % global_every == 0, else it slides (global_every 0: every layer slides).
  int32_t sliding_window;
  int32_t global_every;
  // RoPE base of sliding layers.
  float rope_local_theta;
  // RoPE position multiplier of global layers (1 / linear rope_scaling factor; 1: none).
  float rope_scale;
  // Soft-capping c·tanh(x/c) of attention logits and of the output logits (0: none).
  float attn_softcap;
  float final_softcap;
} HerdMlxConfig;

// The declared format of one quantized weight, `prefix`.weight (e.g. model.layers.0.mlp.up_proj):
// MLX's `mode` ("affine", "nvfp4", "mxfp4", "mxfp8"), bits and group size. bits 0 (affine only)
// means undeclared: bits and group follow from the shapes the config fixes.
typedef struct HerdMlxQuant {
  const char* prefix;
  const char* mode;
  int32_t bits;
  int32_t group;
} HerdMlxQuant;

const char* herd_mlx_version(void);
// "cuda" or "cpu": where the loaded libmlx computes.
const char* herd_mlx_backend(void);

// Load the tensors of `n_paths` safetensors files (merged by name; a name in two files is an
// error) checked against `cfg`, computing in bfloat16 when `compute_bf16` is nonzero, else in
// float32. Every quantized weight (one with scales) must have its format among the `n_quants`
// `quants`; a weight whose shapes disagree with its format is an error naming it.
HerdMlxModel* herd_mlx_load(const char* const* paths, int32_t n_paths, const HerdMlxQuant* quants,
                            int32_t n_quants, const HerdMlxConfig* cfg, int32_t compute_bf16,
                            char* err, size_t err_len);
void herd_mlx_model_free(HerdMlxModel* m);
uint64_t herd_mlx_model_bytes(const HerdMlxModel* m);

HerdMlxCache* herd_mlx_cache_new(const HerdMlxModel* m);
void herd_mlx_cache_free(HerdMlxCache* c);
int32_t herd_mlx_cache_len(const HerdMlxCache* c);
// Keep the first `len` positions (prefix reuse); len >= the current length changes nothing.
void herd_mlx_cache_truncate(HerdMlxCache* c, int32_t len);

// One step over `n_seg` segments: segment i appends its `n_tokens[i]` tokens (consecutive in
// `tokens`) to `caches[i]` (distinct caches) and gets the logits of its last `n_out[i]` tokens
// (1 <= n_out[i] <= n_tokens[i]; all 1 when `n_out` is null), in segment and position order, as
// float32 rows of `n_vocab` in `logits`. Returns 0, or -1 with `err` set: bad input (a token out
// of range, an empty segment, a bad row count) leaves the caches unchanged; a failed evaluation
// empties them (length 0), since their buffers are written in place.
int32_t herd_mlx_forward(HerdMlxModel* m, int32_t n_seg, HerdMlxCache* const* caches,
                         const int32_t* tokens, const int32_t* n_tokens, const int32_t* n_out,
                         float* logits, char* err, size_t err_len);

// Convert a llama-architecture GGUF to an MLX checkpoint: tensors under their Hugging Face
// names (MLX affine-quantized where the GGUF is, Q/K rows un-permuted to the HF layout) in
// `out_safetensors`; the GGUF metadata as one JSON object in `out_meta_json`.
int32_t herd_mlx_convert_gguf(const char* gguf, const char* out_safetensors,
                              const char* out_meta_json, char* err, size_t err_len);

#ifdef __cplusplus
}
#endif
