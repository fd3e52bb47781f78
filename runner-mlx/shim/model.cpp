// The llama-family forward pass against mlx::core: weights (bf16/f16/f32 or MLX affine
// quantized, any bits/group per tensor), per-sequence KV caches, one step over many sequences.
//
// Invariants: activations are float32 (scales, biases and norms are cast at load), so CPU
// results track llama.cpp's f32 path; a cache holds, per layer, K and V as [1, n_head_kv, len,
// head_dim], already rotated; a failed step leaves every cache as it was.
#include "herd_mlx.h"
#include "util.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "mlx/mlx.h"

namespace mx = mlx::core;

namespace {


// A linear layer y = x W^T: dense, or MLX affine quantized (bits/group inferred per tensor).
struct Linear {
  mx::array w = mx::array(0.0f);
  std::optional<mx::array> scales, biases;
  int bits = 0, group = 0;

  mx::array apply(const mx::array& x) const {
    if (scales) return mx::quantized_matmul(x, w, *scales, biases, true, group, bits);
    return mx::matmul(x, mx::transpose(w));
  }
  // Rows `ids` as dense float32 [n, in] (the embedding lookup).
  mx::array rows(const mx::array& ids) const {
    if (!scales) return mx::astype(mx::take(w, ids, 0), mx::float32);
    std::optional<mx::array> b;
    if (biases) b = mx::take(*biases, ids, 0);
    return mx::dequantize(mx::take(w, ids, 0), mx::take(*scales, ids, 0), b, group, bits,
                          "affine", std::nullopt, mx::float32);
  }
};

struct Layer {
  mx::array attn_norm = mx::array(0.0f), ffn_norm = mx::array(0.0f);
  std::optional<mx::array> q_norm, k_norm;  // qwen3
  Linear q, k, v, o, gate, up, down;
};

}  // namespace

struct HerdMlxModel {
  HerdMlxConfig cfg;
  Linear embed, head;
  mx::array norm = mx::array(0.0f);
  std::vector<Layer> layers;
  uint64_t bytes = 0;
};

struct HerdMlxCache {
  std::vector<mx::array> k, v;  // per layer; empty vectors until the first step
  int32_t len = 0;
};

namespace {

using Weights = std::unordered_map<std::string, mx::array>;

mx::array take_dense(Weights& w, const std::string& name, const mx::Shape& shape) {
  auto it = w.find(name);
  if (it == w.end()) throw std::runtime_error("missing tensor " + name);
  if (it->second.shape() != shape) throw std::runtime_error("tensor " + name + " has the wrong shape");
  auto a = mx::astype(it->second, mx::float32);
  w.erase(it);
  return a;
}

// `prefix`.weight [out, in] (dense) or packed uint32 [out, in*bits/32] with .scales/.biases.
Linear take_linear(Weights& w, const std::string& prefix, int out, int in) {
  Linear l;
  auto it = w.find(prefix + ".weight");
  if (it == w.end()) throw std::runtime_error("missing tensor " + prefix + ".weight");
  auto wt = it->second;
  w.erase(it);
  auto s = w.find(prefix + ".scales");
  if (s == w.end()) {
    if (wt.shape() != mx::Shape{out, in})
      throw std::runtime_error("tensor " + prefix + ".weight has the wrong shape");
    l.w = mx::astype(wt, mx::float32);
    return l;
  }
  if (wt.dtype() != mx::uint32 || wt.ndim() != 2 || wt.shape(0) != out || s->second.ndim() != 2 ||
      s->second.shape(0) != out || s->second.shape(1) == 0 || in % s->second.shape(1) != 0 ||
      (wt.shape(1) * 32) % in != 0)
    throw std::runtime_error("quantized tensor " + prefix + " does not match its shape");
  l.bits = wt.shape(1) * 32 / in;
  l.group = in / s->second.shape(1);
  l.w = wt;
  l.scales = mx::astype(s->second, mx::float32);
  w.erase(s);
  auto b = w.find(prefix + ".biases");
  if (b != w.end()) {
    l.biases = mx::astype(b->second, mx::float32);
    w.erase(b);
  }
  return l;
}

std::vector<mx::array> linear_arrays(const Linear& l) {
  std::vector<mx::array> v{l.w};
  if (l.scales) v.push_back(*l.scales);
  if (l.biases) v.push_back(*l.biases);
  return v;
}

}  // namespace

extern "C" {

const char* herd_mlx_version(void) { return mx::version(); }

HerdMlxModel* herd_mlx_load(const char* const* paths, int32_t n_paths, const HerdMlxConfig* cfg,
                            char* err, size_t err_len) {
  try {
    Weights weights;
    for (int32_t i = 0; i < n_paths; i++) {
      auto [part, meta] = mx::load_safetensors(paths[i]);
      (void)meta;
      for (auto& [raw, a] : part) {
        // Ollama's packed quantized blobs name a weight's companions X.weight.scale and
        // X.weight.bias; MLX (and this forward) call them X.scales and X.biases.
        std::string name = raw;
        auto ends = [&](const std::string& suf) {
          return name.size() > suf.size() &&
                 name.compare(name.size() - suf.size(), suf.size(), suf) == 0;
        };
        if (ends(".weight.scale"))
          name = name.substr(0, name.size() - 13) + ".scales";
        else if (ends(".weight.bias"))
          name = name.substr(0, name.size() - 12) + ".biases";
        if (!weights.emplace(name, a).second)
          throw std::runtime_error("tensor " + name + " appears in more than one weight file");
      }
    }
    auto m = new HerdMlxModel();
    try {
      const auto& c = *cfg;
      m->cfg = c;
      int q_dim = c.n_head * c.head_dim, kv_dim = c.n_head_kv * c.head_dim;
      m->embed = take_linear(weights, "model.embed_tokens", c.n_vocab, c.n_embd);
      for (int i = 0; i < c.n_layer; i++) {
        std::string p = "model.layers." + std::to_string(i);
        Layer l;
        l.attn_norm = take_dense(weights, p + ".input_layernorm.weight", {c.n_embd});
        l.ffn_norm = take_dense(weights, p + ".post_attention_layernorm.weight", {c.n_embd});
        if (c.qk_norm) {
          l.q_norm = take_dense(weights, p + ".self_attn.q_norm.weight", {c.head_dim});
          l.k_norm = take_dense(weights, p + ".self_attn.k_norm.weight", {c.head_dim});
        }
        l.q = take_linear(weights, p + ".self_attn.q_proj", q_dim, c.n_embd);
        l.k = take_linear(weights, p + ".self_attn.k_proj", kv_dim, c.n_embd);
        l.v = take_linear(weights, p + ".self_attn.v_proj", kv_dim, c.n_embd);
        l.o = take_linear(weights, p + ".self_attn.o_proj", c.n_embd, q_dim);
        l.gate = take_linear(weights, p + ".mlp.gate_proj", c.n_ff, c.n_embd);
        l.up = take_linear(weights, p + ".mlp.up_proj", c.n_ff, c.n_embd);
        l.down = take_linear(weights, p + ".mlp.down_proj", c.n_embd, c.n_ff);
        m->layers.push_back(std::move(l));
      }
      m->norm = take_dense(weights, "model.norm.weight", {c.n_embd});
      if (c.tied_embeddings) {
        m->head = m->embed;
      } else {
        m->head = take_linear(weights, "lm_head", c.n_vocab, c.n_embd);
      }
      if (!weights.empty())
        throw std::runtime_error("unexpected tensor " + weights.begin()->first);
      std::vector<mx::array> all{m->norm};
      auto add = [&](const Linear& l) {
        for (auto& a : linear_arrays(l)) all.push_back(a);
      };
      add(m->embed);
      if (!c.tied_embeddings) add(m->head);
      for (auto& l : m->layers) {
        all.push_back(l.attn_norm);
        all.push_back(l.ffn_norm);
        for (auto* n : {&l.q_norm, &l.k_norm})
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
  if (len >= c->len) return;
  if (len <= 0) {
    c->k.clear();
    c->v.clear();
    c->len = 0;
    return;
  }
  for (auto* kv : {&c->k, &c->v})
    for (auto& a : *kv) {
      auto s = a.shape();
      a = mx::slice(a, {0, 0, 0, 0}, {s[0], s[1], len, s[3]});
    }
  std::vector<mx::array> all(c->k);
  all.insert(all.end(), c->v.begin(), c->v.end());
  mx::eval(all);
  c->len = len;
}

int32_t herd_mlx_forward(HerdMlxModel* m, int32_t n_seg, HerdMlxCache* const* caches,
                         const int32_t* tokens, const int32_t* n_tokens, float* logits, char* err,
                         size_t err_len) {
  try {
    const auto& c = m->cfg;
    int total = 0;
    std::vector<int> starts, lasts;
    for (int s = 0; s < n_seg; s++) {
      if (n_tokens[s] <= 0) throw std::runtime_error("a segment has no tokens");
      starts.push_back(total);
      total += n_tokens[s];
      lasts.push_back(total - 1);
    }
    for (int i = 0; i < total; i++)
      if (tokens[i] < 0 || tokens[i] >= c.n_vocab) throw std::runtime_error("token id out of range");
    auto ids = mx::array(tokens, {total}, mx::int32);
    auto x = mx::reshape(m->embed.rows(ids), {1, total, c.n_embd});
    const float scale = 1.0f / std::sqrt(float(c.head_dim));
    // New cache arrays, committed only after the step evaluates.
    std::vector<std::vector<mx::array>> nk(n_seg), nv(n_seg);
    for (size_t li = 0; li < m->layers.size(); li++) {
      const auto& l = m->layers[li];
      auto h = mx::fast::rms_norm(x, l.attn_norm, c.norm_eps);
      auto q = l.q.apply(h), k = l.k.apply(h), v = l.v.apply(h);
      std::vector<mx::array> outs;
      for (int s = 0; s < n_seg; s++) {
        int a = starts[s], n = n_tokens[s];
        auto part = [&](const mx::array& t, int heads) {
          auto p = mx::slice(t, {0, a, 0}, {1, a + n, heads * c.head_dim});
          return mx::transpose(mx::reshape(p, {1, n, heads, c.head_dim}), {0, 2, 1, 3});
        };
        int off = caches[s]->len;
        auto qh = part(q, c.n_head), kh = part(k, c.n_head_kv);
        if (l.q_norm) {
          qh = mx::fast::rms_norm(qh, *l.q_norm, c.norm_eps);
          kh = mx::fast::rms_norm(kh, *l.k_norm, c.norm_eps);
        }
        auto qs = mx::fast::rope(qh, c.head_dim, c.rope_traditional != 0, c.rope_theta, 1.0f, off);
        auto ks = mx::fast::rope(kh, c.head_dim, c.rope_traditional != 0, c.rope_theta, 1.0f, off);
        auto vs = part(v, c.n_head_kv);
        if (off > 0) {
          ks = mx::concatenate({caches[s]->k[li], ks}, 2);
          vs = mx::concatenate({caches[s]->v[li], vs}, 2);
        }
        nk[s].push_back(ks);
        nv[s].push_back(vs);
        auto o = mx::fast::scaled_dot_product_attention(qs, ks, vs, scale, n > 1 ? "causal" : "");
        outs.push_back(mx::reshape(mx::transpose(o, {0, 2, 1, 3}), {1, n, c.n_head * c.head_dim}));
      }
      auto attn = outs.size() == 1 ? outs[0] : mx::concatenate(outs, 1);
      x = mx::add(x, l.o.apply(attn));
      h = mx::fast::rms_norm(x, l.ffn_norm, c.norm_eps);
      auto g = l.gate.apply(h);
      auto act = mx::multiply(mx::multiply(g, mx::sigmoid(g)), l.up.apply(h));
      x = mx::add(x, l.down.apply(act));
    }
    x = mx::fast::rms_norm(x, m->norm, c.norm_eps);
    auto last = mx::take(mx::reshape(x, {total, c.n_embd}),
                         mx::array(lasts.data(), {n_seg}, mx::int32), 0);
    auto out = mx::astype(m->head.apply(last), mx::float32);
    std::vector<mx::array> all{out};
    for (int s = 0; s < n_seg; s++) {
      all.insert(all.end(), nk[s].begin(), nk[s].end());
      all.insert(all.end(), nv[s].begin(), nv[s].end());
    }
    mx::eval(all);
    std::memcpy(logits, out.data<float>(), size_t(n_seg) * c.n_vocab * sizeof(float));
    for (int s = 0; s < n_seg; s++) {
      caches[s]->k = std::move(nk[s]);
      caches[s]->v = std::move(nv[s]);
      caches[s]->len += n_tokens[s];
    }
    return 0;
  } catch (const std::exception& e) {
    herd::set_err(err, err_len, e.what());
    return -1;
  }
}

}  // extern "C"
