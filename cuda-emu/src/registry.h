// The kernels compiled into the emulator: one entry per `extern "C" __global__` function of
// kernels/<stem>.cu, with the text of that file as it was compiled, so that the emulated
// NVRTC can refuse a source the host build does not match.
#pragma once

#include <cstddef>
#include <string>
#include <type_traits>
#include <utility>

namespace emu {

struct KernelEntry {
    const char* name;
    void (*invoke)(void* fn, void* const* params);
    void* fn;
    unsigned nparams;
    const size_t* sizes;  // each parameter's size in bytes
};

struct KernelFile {
    const char* stem;
    const char* text;  // kernels/<stem>.cu as compiled
    size_t text_len;
    const KernelEntry* entries;
    unsigned count;
};

// Calls a kernel through an array of pointers to its arguments, as cuLaunchKernel gets them.
template <typename F>
struct Invoker;
template <typename... A>
struct Invoker<void (*)(A...)> {
    static constexpr unsigned count = sizeof...(A);
    static constexpr size_t sizes[sizeof...(A) + 1] = {sizeof(A)..., 0};
    template <size_t... I>
    static void call_impl(void* f, void* const* p, std::index_sequence<I...>) {
        reinterpret_cast<void (*)(A...)>(f)(
            *static_cast<typename std::remove_cv<A>::type*>(p[I])...);
    }
    static void call(void* f, void* const* p) { call_impl(f, p, std::index_sequence_for<A...>{}); }
};

void register_file(const KernelFile* file);
const KernelFile* find_file(const std::string& stem);
// kernels/prelude.cuh as compiled.
std::string prelude_text();

struct FileRegistrar {
    KernelFile file;
    FileRegistrar(const char* stem, const char* begin, const char* end, const KernelEntry* entries,
                  unsigned count)
        : file{stem, begin, (size_t)(end - begin), entries, count} {
        register_file(&file);
    }
};

}  // namespace emu

#define EMU_ENTRY(ns, name)                                                             \
    emu::KernelEntry {                                                                  \
        #name, &emu::Invoker<decltype(&ns::name)>::call, reinterpret_cast<void*>(&ns::name), \
            emu::Invoker<decltype(&ns::name)>::count, emu::Invoker<decltype(&ns::name)>::sizes \
    }

// Embeds a file's bytes as `sym` .. `sym_end` (read-only data, not exported).
#define EMU_INCBIN(sym, path)                                                              \
    extern "C" const char sym[];                                                           \
    extern "C" const char sym##_end[];                                                     \
    asm(".pushsection .rodata\n.global " #sym "\n.hidden " #sym "\n" #sym ":\n.incbin \"" path \
        "\"\n.global " #sym "_end\n.hidden " #sym "_end\n" #sym "_end:\n.byte 0\n.popsection\n")
