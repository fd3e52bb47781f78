// Quantization of one safetensors file for `runner-mlx quantize` (herd create --experimental
// -q int4|int8|nvfp4|mxfp4|mxfp8), through mx::quantize — the same kernel MLX's own converters
// use. Which tensors: 2-D float `*.weight` matrices whose rows split into whole groups, norms
// excepted; the token embedding and lm_head take the `embed_*` scheme (Ollama promotes them to
// 8 bits: int8 under int4, mxfp8 under the fp modes). Each quantized `X.weight` becomes
// `X.weight` (U32 words) and `X.scales` — in the source dtype for affine, with `X.biases`; uint8
// block scales for the fp modes — and, for nvfp4, `X.global_scale`: a float32 scalar, the
// multiplier m (dequantized weight = fp4 × block scale × m). m = amax / 2688 with MLX's global
// scale amax = max|W| (MLX scales its E4M3 block scales by gs / (6 · 448)), so the largest block
// scale lands at E4M3's top (448) instead of deep in its subnormals for small weights. Every
// other tensor is copied.
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

extern "C" int32_t herd_mlx_quantize_safetensors(const char* in, const char* out,
                                                 const char* mode, int32_t bits,
                                                 int32_t group_size, const char* embed_mode,
                                                 int32_t embed_bits, int32_t embed_group,
                                                 int32_t* n_quantized, char* err,
                                                 size_t err_len) {
  try {
    auto loaded = mx::load_safetensors(std::string(in));
    std::unordered_map<std::string, mx::array> result;
    int32_t n = 0;
    for (auto& [name, a] : loaded.first) {
      bool embed = ends_with(name, "embed_tokens.weight") || ends_with(name, "lm_head.weight");
      const std::string m = embed ? embed_mode : mode;
      const int b = embed ? embed_bits : bits, g = embed ? embed_group : group_size;
      bool matrix = ends_with(name, ".weight") && a.ndim() == 2 && is_float(a.dtype()) &&
                    name.find("norm") == std::string::npos && a.shape(-1) % g == 0;
      if (!matrix) {
        result.insert_or_assign(name, a);
        continue;
      }
      std::string base = name.substr(0, name.size() - std::string(".weight").size());
      std::optional<mx::array> gs;
      if (m == "nvfp4") {
        auto amax = mx::astype(mx::max(mx::abs(a)), mx::float32);
        if (amax.item<float>() > 0) gs = amax;
      }
      auto q = mx::quantize(a, g, b, m, gs);
      result.insert_or_assign(name, q[0]);
      if (m == "affine") {
        result.insert_or_assign(base + ".scales", mx::astype(q[1], a.dtype()));
        result.insert_or_assign(base + ".biases", mx::astype(q[2], a.dtype()));
      } else {
        result.insert_or_assign(base + ".scales", q[1]);
      }
      if (gs) result.insert_or_assign(base + ".global_scale", mx::divide(*gs, mx::array(2688.0f)));
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
