// SHA-256 (FIPS 180-4), for JIT cache keys and cache-file integrity checks.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gk {

class Sha256 {
public:
    Sha256();
    void update(const void* data, size_t size);
    void update(const std::string& s) { update(s.data(), s.size()); }
    // Length-prefixed field, so that ("ab", "c") and ("a", "bc") hash differently.
    void field(const std::string& s);
    std::array<uint8_t, 32> digest();
    std::string hex_digest();

private:
    void block(const uint8_t* p);
    uint32_t h_[8];
    uint8_t buffer_[64];
    size_t buffered_ = 0;
    uint64_t total_bytes_ = 0;
};

std::string sha256_hex(const void* data, size_t size);

}  // namespace gk
