// Helpers the shim's translation units share.
#pragma once
#include <algorithm>
#include <cstring>
#include <string>

namespace herd {
// Copy `msg` into the caller's error buffer (NUL-terminated, truncated to `n` bytes).
inline void set_err(char* err, size_t n, const std::string& msg) {
  if (err && n > 0) {
    size_t k = std::min(n - 1, msg.size());
    std::memcpy(err, msg.data(), k);
    err[k] = 0;
  }
}
}  // namespace herd
