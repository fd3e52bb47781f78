// Affine quantization of one safetensors file for `runner-mlx quantize` (herd create
// --experimental -q int4|int8), through mx::quantize — the same kernel MLX's own converters use.
// Which tensors: 2-D float `*.weight` matrices whose rows split into whole groups, norms
// excepted; `embed_bits` applies to the token embedding and lm_head (Ollama promotes them to
// 8 bits under int4). Each quantized `X.weight` becomes `X.weight` (U32 words), `X.scales` and
// `X.biases` (MLX's checkpoint names, in the source dtype); every other tensor is copied.
#include <string>
#include <unordered_map>

#include "util.h"
#include "mlx/mlx.h"

namespace mx = mlx::core;

namespace {

bool ends_with(const std::string& s, const std::string& suf) {
  return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

bool is_float(mx::Dtype t) {
  return t == mx::float32 || t == mx::float16 || t == mx::bfloat16;
}

}  // namespace

extern "C" int32_t herd_mlx_quantize_safetensors(const char* in, const char* out, int32_t bits,
                                                 int32_t embed_bits, int32_t group_size,
                                                 int32_t* n_quantized, char* err,
                                                 size_t err_len) {
  try {
    auto loaded = mx::load_safetensors(std::string(in));
    std::unordered_map<std::string, mx::array> result;
    int32_t n = 0;
    for (auto& [name, a] : loaded.first) {
      bool embed = ends_with(name, "embed_tokens.weight") || ends_with(name, "lm_head.weight");
      bool matrix = ends_with(name, ".weight") && a.ndim() == 2 && is_float(a.dtype()) &&
                    name.find("norm") == std::string::npos &&
                    a.shape(-1) % group_size == 0;
      if (!matrix) {
        result.insert_or_assign(name, a);
        continue;
      }
      int b = embed ? embed_bits : bits;
      auto q = mx::quantize(a, group_size, b, "affine");
      std::string base = name.substr(0, name.size() - std::string(".weight").size());
      result.insert_or_assign(name, q[0]);
      result.insert_or_assign(base + ".scales", mx::astype(q[1], a.dtype()));
      result.insert_or_assign(base + ".biases", mx::astype(q[2], a.dtype()));
      n++;
    }
    std::unordered_map<std::string, std::string> meta = loaded.second;
    meta["format"] = "mlx";
    mx::save_safetensors(std::string(out), result, meta);
    if (n_quantized) *n_quantized = n;
    return 0;
  } catch (const std::exception& e) {
    herd::set_err(err, err_len, e.what());
    return -1;
  }
}
