// Kernel sources embedded at build time. CMake runs native/cmake/embed_kernels.cmake over
// native/ops/kernels/ and compiles the generated embedded_kernels.cpp that defines these.
#pragma once

#include <cstddef>

namespace gk {

struct EmbeddedFile {
    const char* name;           // "elementwise" (file stem)
    const char* file;           // "elementwise.cu"
    const unsigned char* data;  // NUL-terminated
    size_t size;                // without the terminating NUL
    bool header;                // *.cuh: offered to NVRTC as an includable header
};

const EmbeddedFile* embedded_files(size_t* count);

}  // namespace gk
