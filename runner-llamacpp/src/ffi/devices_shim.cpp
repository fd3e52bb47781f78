// herd: flattens llama.cpp's per-buffer-type memory breakdown (llama_get_memory_breakdown, a C++
// function in src/llama-ext.h that the installed headers do not ship) into a C array that
// ffi/devices.rs reads. The two declarations below mirror llama-ext.h of the pinned llama.cpp
// (native/llama.cpp.lock); the mangled name and the struct layout are checked by linking and by
// runner-llamacpp's memory test (weights must equal llama_model_size on one device).
#include <cstddef>
#include <map>

#include "ggml-backend.h"

struct llama_context;

struct llama_memory_breakdown_data {
    size_t model   = 0;
    size_t context = 0;
    size_t compute = 0;
};

std::map<ggml_backend_buffer_type_t, llama_memory_breakdown_data>
llama_get_memory_breakdown(const llama_context * ctx);

extern "C" {

struct herd_buft_memory {
    ggml_backend_buffer_type_t buft;
    size_t model;
    size_t context;
    size_t compute;
};

// Writes up to `cap` entries and returns how many there are (call again with a larger array if
// the result exceeds `cap`); 0 when llama.cpp threw.
size_t herd_memory_breakdown(const llama_context * ctx, herd_buft_memory * out, size_t cap) {
    try {
        size_t n = 0;
        for (const auto & [buft, d] : llama_get_memory_breakdown(ctx)) {
            if (n < cap) {
                out[n] = herd_buft_memory{buft, d.model, d.context, d.compute};
            }
            n++;
        }
        return n;
    } catch (...) {
        return 0;
    }
}

}
