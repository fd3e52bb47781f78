// A linear layer y = x W^T as the checkpoint stores it: dense (bf16/f16/f32), MLX affine
// quantized (packed uint32 words, float scales and biases), or one of MLX's floating-point
// block formats nvfp4 / mxfp4 / mxfp8 (packed words, uint8 E4M3 or E8M0 block scales, no
// biases; nvfp4 optionally with a global multiplier).
//
// Invariants: a quantized Linear's mode/bits/group come from the caller's declared format (the
// Rust side resolved it from the blob's `__metadata__` or config.json's `quantization`), never
// guessed between modes: only an affine weight with nothing declared (bits 0) has its bits and
// group inferred from shapes, as MLX checkpoints without metadata always were affine. fp-mode
// scales stay uint8 (MLX's kernels decode them); affine scales and biases are in the compute
// dtype. The nvfp4 global scale is kept as the checkpoint's multiplier m (dequantized weight =
// fp4 × block scale × m) in float32 and applied after the matmul / dequantize, so it is exact
// rather than converted to MLX's ×2688 form.
#pragma once
#include <optional>
#include <string>
#include <unordered_map>

#include "herd_mlx.h"
#include "mlx/mlx.h"

namespace herd {

namespace mx = mlx::core;

struct Linear {
  mx::array w = mx::array(0.0f);
  std::optional<mx::array> scales, biases;
  // The nvfp4 global multiplier m, float32: a scalar, or one per output row ([out]).
  std::optional<mx::array> global;
  int bits = 0, group = 0;
  std::string mode = "affine";
  // The dtype the checkpoint stores it in (the scales' for an affine tensor; float32 for the fp
  // modes, whose uint8 scales record no float dtype).
  mx::Dtype stored = mx::float32;

  mx::array apply(const mx::array& x) const;
  // Rows `ids` as dense [n, in] in the compute dtype `dt` (the embedding lookup).
  mx::array rows(const mx::array& ids, mx::Dtype dt) const;
  // Every array the layer holds (to evaluate and count at load).
  std::vector<mx::array> arrays() const;
};

using Weights = std::unordered_map<std::string, mx::array>;

// A declared quantization format, by module prefix (`model.layers.0.mlp.up_proj`).
struct Format {
  std::string mode;
  int bits = 0, group = 0;
};
using Formats = std::unordered_map<std::string, Format>;

// Takes `prefix`.weight [out, in] (dense), or the packed weight with its `.scales`, `.biases`
// and `.global_scale` companions in the format `formats` declares for `prefix`, out of `w`.
// Throws naming the tensor when a companion, the format or a shape disagrees.
Linear take_linear(Weights& w, const Formats& formats, const std::string& prefix, int out,
                   int in, mx::Dtype dt);

}  // namespace herd
