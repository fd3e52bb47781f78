// The llama-family forward pass against mlx::core (llama, qwen3, gemma3 text): weights
// (bf16/f16/f32, MLX affine quantized with any bits/group per tensor, or nvfp4/mxfp4/mxfp8;
// linear.h), per-sequence KV caches,
// one step over many sequences.
//
// Invariants: activations, weights (but packed quantized ones), scales, biases, norms and KV
// caches are in the model's compute dtype, set at load: float32 (the default; CPU results then
// track llama.cpp's f32 path) or bfloat16 (half the bytes a dense weight costs a step); logits
// are float32 either way; a cache holds, per layer, K and V, already rotated, for
// every position below its `len` (sliding-window layers included: the window is a mask, so
// truncating a cache for prefix reuse stays exact); a failed step empties the caches it was
// given (their buffers were being written in place) and leaves the others as they were.
#include "herd_mlx.h"
#include "linear.h"
#include "util.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "mlx/mlx.h"
#include "mlx/backend/cuda/cuda.h"

namespace mx = mlx::core;

namespace {


using herd::Linear;
using herd::take_linear;

struct Layer {
  // ffn_norm: before the MLP (llama's post_attention_layernorm, gemma3's
  // pre_feedforward_layernorm).
  mx::array attn_norm = mx::array(0.0f), ffn_norm = mx::array(0.0f);
  std::optional<mx::array> q_norm, k_norm;  // qwen3, gemma3
  // gemma3: on the attention's and the MLP's outputs before the residual add.
  std::optional<mx::array> post_attn_norm, post_ffn_norm;
  Linear q, k, v, o, gate, up, down;
};

}  // namespace

struct HerdMlxModel {
  HerdMlxConfig cfg;
  // The compute dtype (float32 or bfloat16).
  mx::Dtype dt = mx::float32;
  Linear embed, head;
  mx::array norm = mx::array(0.0f);
  float embed_scale = 1.0f;
  std::vector<Layer> layers;
  uint64_t bytes = 0;
};

// Per layer, K and V buffers [1, n_head_kv, cap, head_dim] (empty until the first step) of
// which positions [0, len) hold the sequence; the rest is room to append into. A step writes its
// rows in place (`slice_update` on a buffer only the step's graph references, which MLX donates),
// so appending costs the new rows, not a copy of the whole cache, and truncating is free.
struct HerdMlxCache {
  std::vector<mx::array> k, v;
  int32_t len = 0;
  int32_t cap = 0;
};

namespace {

using herd::Formats;
using herd::Weights;

mx::array take_dense(Weights& w, const std::string& name, const mx::Shape& shape) {
  auto it = w.find(name);
  if (it == w.end()) throw std::runtime_error("missing tensor " + name);
  if (it->second.shape() != shape) throw std::runtime_error("tensor " + name + " has the wrong shape");
  auto a = mx::astype(it->second, mx::float32);
  w.erase(it);
  return a;
}

// A norm's weight as the forward multiplies by it (gemma3 stores w for a scale of (1 + w)), in
// the compute dtype `dt`.
mx::array take_norm(Weights& w, const std::string& name, int dim, bool gemma, mx::Dtype dt) {
  auto a = take_dense(w, name, {dim});
  return mx::astype(gemma ? mx::add(a, mx::array(1.0f)) : a, dt);
}

// Which keys each query may see, [n, len]: query i is at position off + i and sees key j when
// j <= off + i and, with a window, off + i - j < window.
mx::array visible(int off, int n, int len, int window) {
  auto qp = mx::reshape(mx::arange(off, off + n, mx::int32), {n, 1});
  auto kp = mx::reshape(mx::arange(0, len, mx::int32), {1, len});
  auto m = mx::less_equal(kp, qp);
  if (window > 0) m = mx::logical_and(m, mx::greater(kp, mx::subtract(qp, mx::array(window))));
  return m;
}

// Attention of q [1, n_head, n, d] (positions off..off+n-1) over k, v [1, n_head_kv, len, d]
// (positions 0..len-1, len = off + n).
mx::array attend(const mx::array& q, const mx::array& k, const mx::array& v, float scale, int off,
                 int window, float softcap) {
  int n = q.shape(2), len = k.shape(2);
  if (softcap <= 0) {
    // MLX's causal mode aligns the last query with the last key, as the cache needs.
    if (window > 0 && len > window)
      return mx::fast::scaled_dot_product_attention(q, k, v, scale, "array",
                                                    visible(off, n, len, window));
    return mx::fast::scaled_dot_product_attention(q, k, v, scale, n > 1 ? "causal" : "");
  }
  // Soft-capped logits have no fused kernel: scores, c·tanh(s/c), mask, softmax, values.
  int rep = q.shape(1) / k.shape(1);
  auto kr = rep > 1 ? mx::repeat(k, rep, 1) : k;
  auto vr = rep > 1 ? mx::repeat(v, rep, 1) : v;
  const auto dt = q.dtype();
  auto s = mx::multiply(mx::matmul(q, mx::swapaxes(kr, 2, 3)), mx::array(scale, dt));
  s = mx::multiply(mx::tanh(mx::divide(s, mx::array(softcap, dt))), mx::array(softcap, dt));
  s = mx::where(visible(off, n, len, window), s, mx::array(-INFINITY, dt));
  return mx::matmul(mx::softmax(s, -1, true), vr);
}

// GELU, tanh approximation (HF gelu_pytorch_tanh).
mx::array gelu_tanh(const mx::array& x) {
  const float c = std::sqrt(2.0f / float(M_PI));
  const auto dt = x.dtype();
  auto k = [&](float v) { return mx::array(v, dt); };
  auto inner = mx::multiply(k(c), mx::add(x, mx::multiply(k(0.044715f), mx::power(x, k(3.0f)))));
  return mx::multiply(mx::multiply(k(0.5f), x), mx::add(k(1.0f), mx::tanh(inner)));
}

// Positions a cache's buffers grow by (mlx-lm's step): a regrow copies the cache once per
// this many appended positions.
constexpr int kCacheStep = 256;

// Appends k, v [1, n_head_kv, n, head_dim] at position `off` of layer `li`'s buffers of `c`
// (grown to `cap` first when `cap` is larger) and returns that layer's K and V for positions
// [0, off + n). The buffer is replaced at once, so the old one is referenced by this step's
// graph alone and its update happens in place.
std::pair<mx::array, mx::array> append(HerdMlxCache* c, size_t li, const mx::array& k,
                                       const mx::array& v, int off, int cap) {
  const int n = k.shape(2), kv = k.shape(1), d = k.shape(3);
  if (c->k.size() <= li) {
    c->k.push_back(mx::zeros({1, kv, cap, d}, k.dtype()));
    c->v.push_back(mx::zeros({1, kv, cap, d}, k.dtype()));
  } else if (c->k[li].shape(2) < cap) {
    for (auto* b : {&c->k[li], &c->v[li]}) {
      auto fill = mx::zeros({1, kv, cap - off, d}, k.dtype());
      *b = off > 0 ? mx::concatenate({mx::slice(*b, {0, 0, 0, 0}, {1, kv, off, d}), fill}, 2)
                   : fill;
    }
  }
  const mx::Shape start{0, 0, off, 0}, stop{1, kv, off + n, d};
  c->k[li] = mx::slice_update(c->k[li], k, start, stop);
  c->v[li] = mx::slice_update(c->v[li], v, start, stop);
  return {mx::slice(c->k[li], {0, 0, 0, 0}, {1, kv, off + n, d}),
          mx::slice(c->v[li], {0, 0, 0, 0}, {1, kv, off + n, d})};
}

}  // namespace

extern "C" {

const char* herd_mlx_version(void) { return mx::version(); }

// The backend the loaded libmlx computes on: the same binary runs against the CPU or the CUDA
// wheel's library.
const char* herd_mlx_backend(void) { return mx::cu::is_available() ? "cuda" : "cpu"; }

HerdMlxModel* herd_mlx_load(const char* const* paths, int32_t n_paths, const HerdMlxQuant* quants,
                            int32_t n_quants, const HerdMlxConfig* cfg, int32_t compute_bf16,
                            char* err, size_t err_len) {
  try {
    Formats formats;
    for (int32_t i = 0; i < n_quants; i++)
      formats[quants[i].prefix] = {quants[i].mode, quants[i].bits, quants[i].group};
    Weights weights;
    for (int32_t i = 0; i < n_paths; i++) {
      auto [part, meta] = mx::load_safetensors(paths[i]);
      // The blobs' quant_type metadata was read by the Rust side into `quants`.
      (void)meta;
      for (auto& [raw, a] : part) {
        // Ollama's packed quantized blobs name a weight's companions X.weight.scale,
        // X.weight.bias and X.weight.global_scale; MLX (and this forward) call them X.scales,
        // X.biases and X.global_scale.
        std::string name = raw;
        auto ends = [&](const std::string& suf) {
          return name.size() > suf.size() &&
                 name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
        };
        if (ends(".weight.scale"))
          name = name.substr(0, name.size() - 13) + ".scales";
        else if (ends(".weight.bias"))
          name = name.substr(0, name.size() - 12) + ".biases";
        else if (ends(".weight.global_scale"))
          name = name.substr(0, name.size() - 20) + ".global_scale";
        if (!weights.emplace(name, a).second)
          throw std::runtime_error("tensor " + name + " appears in more than one weight file");
      }
    }
    auto m = new HerdMlxModel();
    try {
      const auto& c = *cfg;
      m->cfg = c;
      const auto dt = compute_bf16 ? mx::bfloat16 : mx::float32;
      m->dt = dt;
      int q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
      m->embed = take_linear(weights, formats, "model.embed_tokens", c.n_vocab, c.n_embd, dt);
      for (int i = 0; i < c.n_layer; i++) {
        std::string p = "model.layers." + std::to_string(i);
        Layer l;
        const bool g = c.gemma != 0;
        l.attn_norm = take_norm(weights, p + ".input_layernorm.weight", c.n_embd, g, dt);
        if (g) {
          l.post_attn_norm = take_norm(weights, p + ".post_attention_layernorm.weight", c.n_embd, g, dt);
          l.ffn_norm = take_norm(weights, p + ".pre_feedforward_layernorm.weight", c.n_embd, g, dt);
          l.post_ffn_norm = take_norm(weights, p + ".post_feedforward_layernorm.weight", c.n_embd, g, dt);
        } else {
          l.ffn_norm = take_norm(weights, p + ".post_attention_layernorm.weight", c.n_embd, g, dt);
        }
        if (c.qk_norm) {
          l.q_norm = take_norm(weights, p + ".self_attn.q_norm.weight", c.head_dim, g, dt);
          l.k_norm = take_norm(weights, p + ".self_attn.k_norm.weight", c.head_dim, g, dt);
        }
        l.q = take_linear(weights, formats, p + ".self_attn.q_proj", q_dim, c.n_embd, dt);
        l.k = take_linear(weights, formats, p + ".self_attn.k_proj", kv_dim, c.n_embd, dt);
        l.v = take_linear(weights, formats, p + ".self_attn.v_proj", kv_dim, c.n_embd, dt);
        l.o = take_linear(weights, formats, p + ".self_attn.o_proj", c.n_embd, q_dim, dt);
        l.gate = take_linear(weights, formats, p + ".mlp.gate_proj", c.n_ff, c.n_embd, dt);
        l.up = take_linear(weights, formats, p + ".mlp.up_proj", c.n_ff, c.n_embd, dt);
        l.down = take_linear(weights, formats, p + ".mlp.down_proj", c.n_embd, c.n_ff, dt);
        m->layers.push_back(std::move(l));
      }
      m->norm = take_norm(weights, "model.norm.weight", c.n_embd, c.gemma != 0, dt);
      if (c.gemma) {
        // HF multiplies by sqrt(hidden) cast to the embedding's dtype.
        auto s = mx::array(std::sqrt(float(c.n_embd)));
        if (m->embed.stored == mx::bfloat16 || m->embed.stored == mx::float16)
          s = mx::astype(mx::astype(s, m->embed.stored), mx::float32);
        m->embed_scale = s.item<float>();
      }
      if (c.tied_embeddings) {
        m->head = m->embed;
      } else {
        m->head = take_linear(weights, formats, "lm_head", c.n_vocab, c.n_embd, dt);
      }
      if (!weights.empty())
        throw std::runtime_error("unexpected tensor " + weights.begin()->first);
      std::vector<mx::array> all{m->norm};
      auto add = [&](const Linear& l) {
        for (auto& a : l.arrays()) all.push_back(a);
      };
      add(m->embed);
      if (!c.tied_embeddings) add(m->head);
      for (auto& l : m->layers) {
        all.push_back(l.attn_norm);
        all.push_back(l.ffn_norm);
        for (auto* n : {&l.q_norm, &l.k_norm, &l.post_attn_norm, &l.post_ffn_norm})
          if (*n) all.push_back(**n);
        for (auto* x : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) add(*x);
      }
      mx::eval(all);
      for (auto& a : all) m->bytes += a.nbytes();
      return m;
    } catch (...) {
      delete m;
      throw;
    }
  } catch (const std::exception& e) {
    herd::set_err(err, err_len, e.what());
    return nullptr;
  }
}

void herd_mlx_model_free(HerdMlxModel* m) { delete m; }
uint64_t herd_mlx_model_bytes(const HerdMlxModel* m) { return m->bytes; }

HerdMlxCache* herd_mlx_cache_new(const HerdMlxModel*) { return new HerdMlxCache(); }
void herd_mlx_cache_free(HerdMlxCache* c) { delete c; }
int32_t herd_mlx_cache_len(const HerdMlxCache* c) { return c->len; }

void herd_mlx_cache_truncate(HerdMlxCache* c, int32_t len) {
  if (len < c->len) c->len = len < 0 ? 0 : len;
}

int32_t herd_mlx_forward(HerdMlxModel* m, int32_t n_seg, HerdMlxCache* const* caches,
                         const int32_t* tokens, const int32_t* n_tokens, const int32_t* n_out,
                         float* logits, char* err, size_t err_len) {
  // Set once the caches' buffers start to be replaced: before that an error leaves them alone.
  bool writing = false;
  try {
    const auto& c = m->cfg;
    int total = 0;
    std::vector<int> starts, lasts;
    for (int s = 0; s < n_seg; s++) {
      if (n_tokens[s] <= 0) throw std::runtime_error("a segment has no tokens");
      const int rows = n_out ? n_out[s] : 1;
      if (rows < 1 || rows > n_tokens[s]) throw std::runtime_error("bad output row count");
      starts.push_back(total);
      total += n_tokens[s];
      for (int r = total - rows; r < total; r++) lasts.push_back(r);
    }
    const int n_rows = int(lasts.size());
    for (int i = 0; i < total; i++)
      if (tokens[i] < 0 || tokens[i] >= c.n_vocab) throw std::runtime_error("token id out of range");
    auto ids = mx::array(tokens, {total}, mx::int32);
    auto x = mx::reshape(m->embed.rows(ids, m->dt), {1, total, c.n_embd});
    if (m->embed_scale != 1.0f) x = mx::multiply(x, mx::array(m->embed_scale, m->dt));
    const float scale = c.attn_scale > 0 ? c.attn_scale : 1.0f / std::sqrt(float(c.head_dim));
    // Each cache's capacity for this step (kCacheStep-rounded), set on it once it evaluated.
    std::vector<int> caps(n_seg);
    for (int s = 0; s < n_seg; s++) {
      const int need = caches[s]->len + n_tokens[s];
      caps[s] = need <= caches[s]->cap ? caches[s]->cap
                                       : (need + kCacheStep - 1) / kCacheStep * kCacheStep;
    }
    // A decode step (one token per sequence): the per-row work (heads, q/k norms, RoPE at each
    // sequence's own position) runs once over the batch, and only the cache append and the
    // attention are per sequence, so a step's graph grows by ~6 ops per sequence and layer
    // instead of ~18 (MLX's per-op cost dominates batched decode on a GPU). Row-wise ops: the
    // same numbers as the per-segment path.
    const bool decode = total == n_seg;
    std::vector<int32_t> offs(n_seg);
    for (int s = 0; s < n_seg; s++) offs[s] = caches[s]->len;
    const auto off_arr = mx::array(offs.data(), {n_seg}, mx::int32);
    writing = true;
    for (size_t li = 0; li < m->layers.size(); li++) {
      const auto& l = m->layers[li];
      const bool sliding = c.sliding_window > 0 &&
                           !(c.global_every > 0 && (int(li) + 1) % c.global_every == 0);
      const int window = sliding ? c.sliding_window : 0;
      const float base = sliding ? c.rope_local_theta : c.rope_theta;
      const float pos_scale = sliding ? 1.0f : c.rope_scale;
      auto h = mx::fast::rms_norm(x, l.attn_norm, c.norm_eps);
      auto q = l.q.apply(h), k = l.k.apply(h), v = l.v.apply(h);
      std::vector<mx::array> outs;
      if (decode) {
        // [B, heads, 1, head_dim]
        auto heads = [&](const mx::array& t, int n) {
          return mx::transpose(mx::reshape(t, {n_seg, 1, n, c.head_dim}), {0, 2, 1, 3});
        };
        auto qh = heads(q, c.n_head), kh = heads(k, c.n_head_kv), vh = heads(v, c.n_head_kv);
        if (l.q_norm) {
          qh = mx::fast::rms_norm(qh, *l.q_norm, c.norm_eps);
          kh = mx::fast::rms_norm(kh, *l.k_norm, c.norm_eps);
        }
        auto qs = mx::fast::rope(qh, c.head_dim, c.rope_traditional != 0, base, pos_scale, off_arr);
        auto ks = mx::fast::rope(kh, c.head_dim, c.rope_traditional != 0, base, pos_scale, off_arr);
        for (int s = 0; s < n_seg; s++) {
          auto row = [&](const mx::array& t, int n) {
            return mx::slice(t, {s, 0, 0, 0}, {s + 1, n, 1, c.head_dim});
          };
          auto [kc, vc] = append(caches[s], li, row(ks, c.n_head_kv), row(vh, c.n_head_kv),
                                 offs[s], caps[s]);
          outs.push_back(attend(row(qs, c.n_head), kc, vc, scale, offs[s], window, c.attn_softcap));
        }
        // [B, H, 1, d] -> [1, B, H*d]: the rows in segment order, as below.
        auto o = outs.size() == 1 ? outs[0] : mx::concatenate(outs, 0);
        auto attn = mx::reshape(mx::transpose(o, {0, 2, 1, 3}), {1, n_seg, c.n_head * c.head_dim});
        outs.assign(1, attn);
      } else {
        for (int s = 0; s < n_seg; s++) {
          int a = starts[s], n = n_tokens[s];
          auto part = [&](const mx::array& t, int heads) {
            auto p = mx::slice(t, {0, a, 0}, {1, a + n, heads * c.head_dim});
            return mx::transpose(mx::reshape(p, {1, n, heads, c.head_dim}), {0, 2, 1, 3});
          };
          const int off = offs[s];
          auto qh = part(q, c.n_head), kh = part(k, c.n_head_kv);
          if (l.q_norm) {
            qh = mx::fast::rms_norm(qh, *l.q_norm, c.norm_eps);
            kh = mx::fast::rms_norm(kh, *l.k_norm, c.norm_eps);
          }
          auto qs = mx::fast::rope(qh, c.head_dim, c.rope_traditional != 0, base, pos_scale, off);
          auto ks = mx::fast::rope(kh, c.head_dim, c.rope_traditional != 0, base, pos_scale, off);
          auto [kc, vc] = append(caches[s], li, ks, part(v, c.n_head_kv), off, caps[s]);
          auto o = attend(qs, kc, vc, scale, off, window, c.attn_softcap);
          outs.push_back(mx::reshape(mx::transpose(o, {0, 2, 1, 3}), {1, n, c.n_head * c.head_dim}));
        }
      }
      auto attn = outs.size() == 1 ? outs[0] : mx::concatenate(outs, 1);
      auto a = l.o.apply(attn);
      if (l.post_attn_norm) a = mx::fast::rms_norm(a, *l.post_attn_norm, c.norm_eps);
      x = mx::add(x, a);
      h = mx::fast::rms_norm(x, l.ffn_norm, c.norm_eps);
      auto g = l.gate.apply(h);
      auto act = c.gemma ? gelu_tanh(g) : mx::multiply(g, mx::sigmoid(g));
      auto f = l.down.apply(mx::multiply(act, l.up.apply(h)));
      if (l.post_ffn_norm) f = mx::fast::rms_norm(f, *l.post_ffn_norm, c.norm_eps);
      x = mx::add(x, f);
    }
    x = mx::fast::rms_norm(x, m->norm, c.norm_eps);
    auto last = mx::take(mx::reshape(x, {total, c.n_embd}),
                         mx::array(lasts.data(), {n_rows}, mx::int32), 0);
    auto out = mx::astype(m->head.apply(last), mx::float32);
    if (c.final_softcap > 0) {
      auto cap = mx::array(c.final_softcap);
      out = mx::multiply(mx::tanh(mx::divide(out, cap)), cap);
    }
    std::vector<mx::array> all{out};
    for (int s = 0; s < n_seg; s++) {
      all.insert(all.end(), caches[s]->k.begin(), caches[s]->k.end());
      all.insert(all.end(), caches[s]->v.begin(), caches[s]->v.end());
    }
    mx::eval(all);
    std::memcpy(logits, out.data<float>(), size_t(n_rows) * c.n_vocab * sizeof(float));
    for (int s = 0; s < n_seg; s++) {
      caches[s]->len += n_tokens[s];
      caches[s]->cap = caps[s];
    }
    return 0;
  } catch (const std::exception& e) {
    // The buffers may have been written in place: start these sequences over.
    for (int s = 0; writing && s < n_seg; s++) {
      caches[s]->k.clear();
      caches[s]->v.clear();
      caches[s]->len = caches[s]->cap = 0;
    }
    herd::set_err(err, err_len, e.what());
    return -1;
  }
}

}  // extern "C"
