// herd::Linear (linear.h): dense, affine and nvfp4/mxfp4/mxfp8 weights, checked at load.
#include "linear.h"

#include <stdexcept>

namespace herd {

namespace {

// MLX's fixed (bits, group) of each floating-point block mode.
bool fp_mode(const std::string& mode, int* bits, int* group) {
  if (mode == "nvfp4") return *bits = 4, *group = 16, true;
  if (mode == "mxfp4") return *bits = 4, *group = 32, true;
  if (mode == "mxfp8") return *bits = 8, *group = 32, true;
  return false;
}

std::runtime_error wrong(const std::string& prefix, const std::string& what) {
  return std::runtime_error("quantized tensor " + prefix + ".weight: " + what);
}

// `y` times the global multiplier `g` (scalar or per output row), computed in float32 and
// rounded once back to `y`'s dtype.
mx::array times_global(const mx::array& y, const mx::array& g) {
  return mx::astype(mx::multiply(mx::astype(y, mx::float32), g), y.dtype());
}

}  // namespace

mx::array Linear::apply(const mx::array& x) const {
  if (!scales) return mx::matmul(x, mx::transpose(w));
  auto y = mx::quantized_matmul(x, w, *scales, biases, true, group, bits, mode);
  return global ? times_global(y, *global) : y;
}

mx::array Linear::rows(const mx::array& ids, mx::Dtype dt) const {
  if (!scales) return mx::astype(mx::take(w, ids, 0), dt);
  std::optional<mx::array> b;
  if (biases) b = mx::take(*biases, ids, 0);
  if (!global)
    return mx::dequantize(mx::take(w, ids, 0), mx::take(*scales, ids, 0), b, group, bits, mode,
                          std::nullopt, dt);
  auto d = mx::dequantize(mx::take(w, ids, 0), mx::take(*scales, ids, 0), b, group, bits, mode,
                          std::nullopt, mx::float32);
  auto g = global->ndim() == 0 ? *global
                               : mx::reshape(mx::take(*global, ids, 0), {int(ids.size()), 1});
  return mx::astype(mx::multiply(d, g), dt);
}

std::vector<mx::array> Linear::arrays() const {
  std::vector<mx::array> v{w};
  for (auto* a : {&scales, &biases, &global})
    if (*a) v.push_back(**a);
  return v;
}

Linear take_linear(Weights& w, const Formats& formats, const std::string& prefix, int out,
                   int in, mx::Dtype dt) {
  Linear l;
  auto it = w.find(prefix + ".weight");
  if (it == w.end()) throw std::runtime_error("missing tensor " + prefix + ".weight");
  auto wt = it->second;
  w.erase(it);
  auto s = w.find(prefix + ".scales");
  auto f = formats.find(prefix);
  if (s == w.end()) {
    if (f != formats.end()) throw wrong(prefix, "its scales are missing");
    if (wt.shape() != mx::Shape{out, in})
      throw std::runtime_error("tensor " + prefix + ".weight has the wrong shape");
    l.stored = wt.dtype();
    l.w = mx::astype(wt, dt);
    return l;
  }
  if (f == formats.end()) throw wrong(prefix, "its quantization format is unknown");
  auto sc = s->second;
  w.erase(s);
  std::optional<mx::array> bias, global;
  for (auto [suffix, slot] : {std::pair{".biases", &bias}, {".global_scale", &global}}) {
    auto c = w.find(prefix + suffix);
    if (c != w.end()) {
      *slot = c->second;
      w.erase(c);
    }
  }
  if (wt.dtype() != mx::uint32 || wt.ndim() != 2 || wt.shape(0) != out)
    throw wrong(prefix, "expected uint32 words with " + std::to_string(out) + " rows");
  if (sc.ndim() != 2 || sc.shape(0) != out || sc.shape(1) == 0)
    throw wrong(prefix, "its scales do not have one row per output");
  l.mode = f->second.mode;
  l.w = wt;
  if (fp_mode(l.mode, &l.bits, &l.group)) {
    if (f->second.bits != l.bits || f->second.group != l.group)
      throw wrong(prefix, l.mode + " is " + std::to_string(l.bits) + "-bit with groups of " +
                              std::to_string(l.group));
    if (sc.dtype() != mx::uint8) throw wrong(prefix, l.mode + " scales must be uint8");
    if (bias) throw wrong(prefix, l.mode + " has no biases");
    if (global) {
      if (l.mode != "nvfp4") throw wrong(prefix, "only nvfp4 has a global scale");
      auto n = global->size();
      if (n != 1 && !(global->ndim() == 1 && global->shape(0) == out))
        throw wrong(prefix, "its global scale must be a scalar or one per output row");
      l.global = n == 1 ? mx::reshape(mx::astype(*global, mx::float32), {})
                        : mx::astype(*global, mx::float32);
    }
    l.scales = sc;
  } else if (l.mode == "affine") {
    if (global) throw wrong(prefix, "only nvfp4 has a global scale");
    if (!bias) throw wrong(prefix, "affine quantization needs biases");
    l.bits = f->second.bits;
    l.group = f->second.group;
    if (l.bits == 0) {
      // Nothing declared: the one (bits, group) the architecture's input width allows.
      if (in % sc.shape(1) != 0 || (wt.shape(1) * 32) % in != 0)
        throw wrong(prefix, "does not match its shape");
      l.bits = wt.shape(1) * 32 / in;
      l.group = in / sc.shape(1);
    }
    l.stored = sc.dtype();
    l.scales = mx::astype(sc, dt);
    l.biases = mx::astype(*bias, dt);
  } else {
    throw wrong(prefix, "unknown quantization mode " + l.mode);
  }
  // The declared format must reproduce the architecture's input width exactly.
  if (int64_t(wt.shape(1)) * 32 != int64_t(in) * l.bits)
    throw wrong(prefix, std::to_string(wt.shape(1)) + " words per row are not " +
                            std::to_string(in) + " " + std::to_string(l.bits) + "-bit values");
  if (l.group <= 0 || in % l.group != 0 || sc.shape(1) != in / l.group)
    throw wrong(prefix, "its scales have " + std::to_string(sc.shape(1)) +
                            " columns, not one per group of " + std::to_string(l.group) + " of " +
                            std::to_string(in) + " inputs");
  if (l.biases && l.biases->shape() != l.scales->shape())
    throw wrong(prefix, "its biases and scales differ in shape");
  return l;
}

}  // namespace herd
