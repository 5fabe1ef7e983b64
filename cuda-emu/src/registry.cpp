#include "registry.h"

#include <map>
#include <mutex>

#ifndef EMU_PRELUDE_PATH
#error "EMU_PRELUDE_PATH: the path of kernels/prelude.cuh (the Makefile sets it)"
#endif

EMU_INCBIN(emu_src_prelude, EMU_PRELUDE_PATH);

namespace emu {

namespace {
std::map<std::string, const KernelFile*>& files() {
    static std::map<std::string, const KernelFile*>* m = new std::map<std::string, const KernelFile*>();
    return *m;
}
std::mutex& files_lock() {
    static std::mutex* m = new std::mutex();
    return *m;
}
}  // namespace

void register_file(const KernelFile* file) {
    std::lock_guard<std::mutex> g(files_lock());
    files()[file->stem] = file;
}

const KernelFile* find_file(const std::string& stem) {
    std::lock_guard<std::mutex> g(files_lock());
    auto it = files().find(stem);
    return it == files().end() ? nullptr : it->second;
}

std::string prelude_text() { return std::string(emu_src_prelude, emu_src_prelude_end); }

}  // namespace emu
