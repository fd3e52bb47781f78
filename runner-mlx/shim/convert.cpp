// GGUF (llama architecture) → MLX checkpoint, for the test model (scripts/make-mlx-test-model).
// mx::load_gguf already yields MLX affine-quantized arrays for Q4_0/Q4_1/Q8_0 tensors; this
// renames them to the Hugging Face names MLX checkpoints use and undoes llama.cpp's Q/K row
// permutation, so the result uses the usual (non-traditional) RoPE like any HF llama. Rows are
// whole quantization groups' owners (groups run along the input axis), so permuting the rows of
// the packed weight, scales and biases together is exact.
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <variant>

#include "herd_mlx.h"
#include "util.h"
#include "mlx/mlx.h"

namespace mx = mlx::core;

namespace {


void json_string(std::ostream& o, const std::string& s) {
  o << '"';
  for (unsigned char ch : s) {
    switch (ch) {
      case '"': o << "\\\""; break;
      case '\\': o << "\\\\"; break;
      case '\n': o << "\\n"; break;
      case '\r': o << "\\r"; break;
      case '\t': o << "\\t"; break;
      default:
        if (ch < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          o << buf;
        } else {
          o << ch;
        }
    }
  }
  o << '"';
}

void json_array(std::ostream& o, mx::array a) {
  a = mx::astype(mx::flatten(a), mx::float64);
  mx::eval(a);
  const double* d = a.data<double>();
  bool scalar = a.size() == 1;
  if (!scalar) o << '[';
  for (size_t i = 0; i < a.size(); i++) {
    if (i) o << ',';
    o.precision(17);
    o << d[i];
  }
  if (!scalar) o << ']';
}

int64_t meta_int(const std::unordered_map<std::string, mx::GGUFMetaData>& meta,
                 const std::string& k) {
  auto it = meta.find(k);
  if (it == meta.end() || !std::holds_alternative<mx::array>(it->second))
    throw std::runtime_error("GGUF metadata lacks " + k);
  auto a = mx::astype(std::get<mx::array>(it->second), mx::int64);
  mx::eval(a);
  return a.data<int64_t>()[0];
}

// GGUF rows are HF rows reshaped (heads, 2, hd/2) with the last two axes swapped; swap back.
mx::array unpermute(const mx::array& a, int64_t heads) {
  auto s = a.shape();
  int rows = s[0], half = rows / int(heads) / 2;
  mx::Shape split{int(heads), half, 2};
  split.insert(split.end(), s.begin() + 1, s.end());
  return mx::reshape(mx::swapaxes(mx::reshape(a, split), 1, 2), s);
}

}  // namespace

extern "C" int32_t herd_mlx_convert_gguf(const char* gguf, const char* out_safetensors,
                                         const char* out_meta_json, char* err, size_t err_len) {
  try {
    auto [tensors, meta] = mx::load_gguf(gguf);
    auto arch = meta.find("general.architecture");
    if (arch == meta.end() || !std::holds_alternative<std::string>(arch->second) ||
        std::get<std::string>(arch->second) != "llama")
      throw std::runtime_error("not a llama-architecture GGUF");
    int64_t n_head = meta_int(meta, "llama.attention.head_count");
    int64_t n_head_kv = meta_int(meta, "llama.attention.head_count_kv");
    const std::unordered_map<std::string, std::string> names{
        {"attn_norm", "input_layernorm"},       {"ffn_norm", "post_attention_layernorm"},
        {"attn_q", "self_attn.q_proj"},         {"attn_k", "self_attn.k_proj"},
        {"attn_v", "self_attn.v_proj"},         {"attn_output", "self_attn.o_proj"},
        {"ffn_gate", "mlp.gate_proj"},          {"ffn_up", "mlp.up_proj"},
        {"ffn_down", "mlp.down_proj"}};
    std::unordered_map<std::string, mx::array> out;
    for (auto& [name, a] : tensors) {
      // name = <base>.<weight|scales|biases>
      auto dot = name.rfind('.');
      std::string base = name.substr(0, dot), kind = name.substr(dot + 1);
      std::string hf;
      if (base == "token_embd") {
        hf = "model.embed_tokens";
      } else if (base == "output_norm") {
        hf = "model.norm";
      } else if (base == "output") {
        hf = "lm_head";
      } else if (base.rfind("blk.", 0) == 0) {
        auto d2 = base.find('.', 4);
        std::string layer = base.substr(4, d2 - 4), part = base.substr(d2 + 1);
        auto it = names.find(part);
        if (it == names.end()) throw std::runtime_error("unknown GGUF tensor " + name);
        hf = "model.layers." + layer + "." + it->second;
        if (part == "attn_q") a = unpermute(a, n_head);
        if (part == "attn_k") a = unpermute(a, n_head_kv);
      } else if (base == "rope_freqs") {
        throw std::runtime_error("rope_freqs (rope scaling) is not supported yet");
      } else {
        throw std::runtime_error("unknown GGUF tensor " + name);
      }
      out.insert_or_assign(hf + "." + kind, a);
    }
    mx::save_safetensors(out_safetensors, out);

    std::ofstream o(out_meta_json);
    o << '{';
    bool first = true;
    for (auto& [k, v] : meta) {
      if (std::holds_alternative<std::monostate>(v)) continue;
      if (!first) o << ',';
      first = false;
      json_string(o, k);
      o << ':';
      if (auto* s = std::get_if<std::string>(&v)) {
        json_string(o, *s);
      } else if (auto* l = std::get_if<std::vector<std::string>>(&v)) {
        o << '[';
        for (size_t i = 0; i < l->size(); i++) {
          if (i) o << ',';
          json_string(o, (*l)[i]);
        }
        o << ']';
      } else {
        json_array(o, std::get<mx::array>(v));
      }
    }
    o << '}';
    if (!o) throw std::runtime_error(std::string("cannot write ") + out_meta_json);
    return 0;
  } catch (const std::exception& e) {
    herd::set_err(err, err_len, e.what());
    return -1;
  }
}
