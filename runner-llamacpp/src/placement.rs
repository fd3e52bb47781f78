//! Where llama.cpp puts a model's layers, for `/info` (issue 20: "show where layers went").
//! llama.cpp has no API that reports it, so this restates its rule (llama-model.cpp
//! `load_tensors`, pinned b11434) as a pure function over the same inputs: the offload devices
//! in llama.cpp's order (RPC devices first, then local GPUs), the split weights (tensor_split, or
//! each device's free memory), `n_gpu_layers` and the layer count. The input layer always stays
//! on the CPU; the output layer counts as layer `n_layer`.

/// Layers (of `n_layer + 1`: the repeating ones plus the output layer) per device: one count per
/// entry of `weights` (the offload devices, in order), then the CPU's count last.
pub fn layers_per_device(n_layer: u32, gpu_layers: i32, weights: &[f32]) -> Vec<u32> {
    let mut counts = vec![0u32; weights.len() + 1];
    let total = n_layer as i64 + 1;
    let ngl = if gpu_layers < 0 {
        total
    } else {
        gpu_layers as i64
    };
    let start = (total - ngl).max(0);
    let act = if weights.is_empty() {
        0
    } else {
        ngl.min(total)
    };
    // Cumulative, normalised split points, in f32 as llama.cpp computes them.
    let mut splits: Vec<f32> = Vec::with_capacity(weights.len());
    let mut sum = 0.0f32;
    for w in weights {
        sum += *w;
        splits.push(sum);
    }
    for s in &mut splits {
        *s /= sum;
    }
    for il in 0..total {
        if il < start || il - start >= act {
            *counts.last_mut().unwrap() += 1;
            continue;
        }
        let x = (il - start) as f32 / act as f32;
        // std::upper_bound: the first split point greater than x.
        let dev = splits
            .iter()
            .position(|&s| s > x)
            .unwrap_or(splits.len() - 1);
        counts[dev] += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_split_matches_llama_cpp_rule() {
        // (n_layer, n_gpu_layers, weights) → per device, CPU last
        let cases: &[(u32, i32, &[f32], &[u32])] = &[
            (30, -1, &[], &[31]),
            (30, 0, &[1.0], &[0, 31]),
            (30, -1, &[1.0], &[31, 0]),
            (30, 99, &[1.0], &[31, 0]),
            (30, 16, &[1.0], &[16, 15]),
            // Two devices, equal weights: the offloaded layers halve.
            (30, -1, &[1.0, 1.0], &[16, 15, 0]),
            (30, 10, &[3.0, 1.0], &[8, 2, 21]),
            // A device with no weight gets nothing.
            (18, -1, &[0.0, 1.0], &[0, 19, 0]),
        ];
        for (n, ngl, w, want) in cases {
            assert_eq!(
                layers_per_device(*n, *ngl, w),
                *want,
                "n_layer={n} ngl={ngl} w={w:?}"
            );
            assert_eq!(want.iter().sum::<u32>(), n + 1);
        }
    }
}
