// NVRTC, emulated: "compiling" kernels/<stem>.cu checks that the source is exactly the text
// compiled into the emulator (prelude included) and returns an image naming the stem and
// the architecture; cuModuleLoadData resolves the kernels in the host build from it. A
// source the emulator was not built from fails to compile with a log that says why, so a
// kernel edited without rebuilding the emulator cannot run stale code.

#include <cstring>
#include <string>

#include "registry.h"
#include "types.h"

namespace emu {
struct Program {
    std::string source;
    std::string name;
    std::string log;
    std::string image;
};
}  // namespace emu

using emu::Program;

namespace {
constexpr char IMAGE_TAG[] = "ESPALIER-CUDA-EMU-CUBIN";

std::string stem_of(const std::string& name) {
    std::string s = name;
    size_t slash = s.find_last_of('/');
    if (slash != std::string::npos) s = s.substr(slash + 1);
    if (s.size() > 3 && s.compare(s.size() - 3, 3, ".cu") == 0) s.resize(s.size() - 3);
    return s;
}
}  // namespace

EMU_API nvrtcResult nvrtcVersion(int* major, int* minor) {
    if (!major || !minor) return NVRTC_ERROR_INVALID_INPUT;
    *major = 13;
    *minor = 0;
    return NVRTC_SUCCESS;
}

EMU_API const char* nvrtcGetErrorString(nvrtcResult r) {
    switch (r) {
        case NVRTC_SUCCESS: return "NVRTC_SUCCESS";
        case NVRTC_ERROR_OUT_OF_MEMORY: return "NVRTC_ERROR_OUT_OF_MEMORY";
        case NVRTC_ERROR_PROGRAM_CREATION_FAILURE: return "NVRTC_ERROR_PROGRAM_CREATION_FAILURE";
        case NVRTC_ERROR_INVALID_INPUT: return "NVRTC_ERROR_INVALID_INPUT";
        case NVRTC_ERROR_INVALID_PROGRAM: return "NVRTC_ERROR_INVALID_PROGRAM";
        case NVRTC_ERROR_INVALID_OPTION: return "NVRTC_ERROR_INVALID_OPTION";
        case NVRTC_ERROR_COMPILATION: return "NVRTC_ERROR_COMPILATION";
        case NVRTC_ERROR_INTERNAL_ERROR: return "NVRTC_ERROR_INTERNAL_ERROR";
    }
    return "NVRTC_ERROR unknown";
}

EMU_API nvrtcResult nvrtcCreateProgram(nvrtcProgram* prog, const char* src, const char* name, int num_headers,
                                       const char* const*, const char* const*) {
    if (!prog || !src) return NVRTC_ERROR_INVALID_INPUT;
    if (num_headers != 0) return NVRTC_ERROR_INVALID_INPUT;  // the kernels include nothing
    Program* p = new Program();
    p->source = src;
    p->name = name ? name : "default_program";
    *prog = p;
    return NVRTC_SUCCESS;
}

EMU_API nvrtcResult nvrtcDestroyProgram(nvrtcProgram* prog) {
    if (!prog || !*prog) return NVRTC_ERROR_INVALID_PROGRAM;
    delete *prog;
    *prog = nullptr;
    return NVRTC_SUCCESS;
}

EMU_API nvrtcResult nvrtcCompileProgram(nvrtcProgram prog, int num_options, const char* const* options) {
    if (!prog) return NVRTC_ERROR_INVALID_PROGRAM;
    std::string arch = "52";  // NVRTC's default architecture
    for (int i = 0; i < num_options; i++) {
        std::string o = options[i] ? options[i] : "";
        const char* prefixes[] = {"--gpu-architecture=sm_", "-arch=sm_", "--gpu-architecture=compute_", "-arch=compute_"};
        for (const char* pre : prefixes)
            if (o.rfind(pre, 0) == 0) arch = o.substr(strlen(pre));
    }
    const std::string stem = stem_of(prog->name);
    const emu::KernelFile* f = emu::find_file(stem);
    if (!f) {
        prog->log = prog->name + ": the espalier CUDA emulator runs only the kernels/*.cu it was built with, "
                                 "and there is no kernels/" + stem + ".cu among them\n";
        return NVRTC_ERROR_COMPILATION;
    }
    const std::string expected = emu::prelude_text() + std::string(f->text, f->text_len);
    if (prog->source != expected) {
        prog->log = prog->name + ": this source differs from kernels/prelude.cuh + kernels/" + stem +
                    ".cu as the espalier CUDA emulator was built from them: rebuild it (scripts/cuda-emu does when a "
                    "kernel changed)\n";
        return NVRTC_ERROR_COMPILATION;
    }
    prog->image.assign(IMAGE_TAG, sizeof IMAGE_TAG);
    prog->image += stem;
    prog->image.push_back('\0');
    prog->image += arch;
    prog->image.push_back('\0');
    prog->log.clear();
    return NVRTC_SUCCESS;
}

EMU_API nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram prog, size_t* size) {
    if (!prog || !size) return NVRTC_ERROR_INVALID_INPUT;
    *size = prog->log.size() + 1;
    return NVRTC_SUCCESS;
}

EMU_API nvrtcResult nvrtcGetProgramLog(nvrtcProgram prog, char* log) {
    if (!prog || !log) return NVRTC_ERROR_INVALID_INPUT;
    memcpy(log, prog->log.c_str(), prog->log.size() + 1);
    return NVRTC_SUCCESS;
}

static nvrtcResult image_size(nvrtcProgram prog, size_t* size) {
    if (!prog || !size) return NVRTC_ERROR_INVALID_INPUT;
    if (prog->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
    *size = prog->image.size();
    return NVRTC_SUCCESS;
}

static nvrtcResult image(nvrtcProgram prog, char* out) {
    if (!prog || !out) return NVRTC_ERROR_INVALID_INPUT;
    if (prog->image.empty()) return NVRTC_ERROR_INVALID_PROGRAM;
    memcpy(out, prog->image.data(), prog->image.size());
    return NVRTC_SUCCESS;
}

EMU_API nvrtcResult nvrtcGetCUBINSize(nvrtcProgram prog, size_t* size) { return image_size(prog, size); }
EMU_API nvrtcResult nvrtcGetCUBIN(nvrtcProgram prog, char* out) { return image(prog, out); }
EMU_API nvrtcResult nvrtcGetPTXSize(nvrtcProgram prog, size_t* size) { return image_size(prog, size); }
EMU_API nvrtcResult nvrtcGetPTX(nvrtcProgram prog, char* out) { return image(prog, out); }
