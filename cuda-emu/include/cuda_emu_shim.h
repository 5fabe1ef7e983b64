// Compiles kernels/*.cu for the host: the CUDA C++ the kernels use, defined over the
// emulator's fibers (src/fiber.cpp). Each thread of a block runs as a fiber on one host
// thread; `__syncthreads` and the warp shuffles are points where a fiber waits for the
// others of its block or warp. A block's `__shared__` variables are static thread-locals:
// a host thread runs one block at a time, so its fibers share them and no other block does.
//
// Device code sees what NVRTC's device code sees, minus `__CUDA_ARCH__`: a kernel that must
// differ on the host (inline PTX) tests `#ifdef __CUDA_ARCH__`.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#define ESPALIER_CUDA_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __restrict__ __restrict
#define __shared__ static thread_local
#define __launch_bounds__(...)

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x, y, z;
};
struct __attribute__((aligned(8))) float2 {
    float x, y;
};
struct __attribute__((aligned(16))) float4 {
    float x, y, z, w;
};
struct __attribute__((aligned(16))) uint4 {
    unsigned x, y, z, w;
};
struct __attribute__((aligned(8))) uint2 {
    unsigned x, y;
};
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }

namespace emu {
// Where the running fiber is: set by the block scheduler before it resumes a fiber.
struct Coords {
    uint3 thread_idx;
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
};
extern thread_local Coords coords;

// The block barrier: returns once every thread of the block has called it.
void syncthreads();

enum class Shfl { Idx, Xor, Down, Up };
// A full-warp exchange: every lane of the warp passes its value's bits; each gets the bits
// of the lane `kind`/`arg`/`width` name (its own where that lane is outside its segment).
uint64_t shfl(uint64_t bits, unsigned mask, Shfl kind, int arg, int width);

template <typename T>
inline T shfl_t(unsigned mask, T v, Shfl kind, int arg, int width) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a wide type");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof(T));
    bits = shfl(bits, mask, kind, arg, width);
    T out;
    std::memcpy(&out, &bits, sizeof(T));
    return out;
}
}  // namespace emu

#define threadIdx (::emu::coords.thread_idx)
#define blockIdx (::emu::coords.block_idx)
#define blockDim (::emu::coords.block_dim)
#define gridDim (::emu::coords.grid_dim)
#define warpSize 32

inline void __syncthreads() { ::emu::syncthreads(); }

template <typename T>
inline T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    return ::emu::shfl_t(mask, v, ::emu::Shfl::Idx, src, width);
}
template <typename T>
inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    return ::emu::shfl_t(mask, v, ::emu::Shfl::Xor, lane_mask, width);
}
template <typename T>
inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return ::emu::shfl_t(mask, v, ::emu::Shfl::Down, (int)delta, width);
}
template <typename T>
inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    return ::emu::shfl_t(mask, v, ::emu::Shfl::Up, (int)delta, width);
}

// Bit casts.
inline float __int_as_float(int v) {
    float f;
    std::memcpy(&f, &v, 4);
    return f;
}
inline float __uint_as_float(unsigned v) {
    float f;
    std::memcpy(&f, &v, 4);
    return f;
}
inline int __float_as_int(float v) {
    int i;
    std::memcpy(&i, &v, 4);
    return i;
}
inline unsigned __float_as_uint(float v) {
    unsigned i;
    std::memcpy(&i, &v, 4);
    return i;
}

// Rounded arithmetic that NVRTC never contracts into an FMA; the host build compiles with
// -ffp-contract=off, so plain operations round the same way.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }

// CUDA's min and max: the integer overloads compare in the common type, the float ones
// are fminf/fmaxf (a NaN loses).
template <typename A, typename B>
inline typename std::common_type<A, B>::type min(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    return (C)a < (C)b ? (C)a : (C)b;
}
template <typename A, typename B>
inline typename std::common_type<A, B>::type max(A a, B b) {
    typedef typename std::common_type<A, B>::type C;
    return (C)a < (C)b ? (C)b : (C)a;
}
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
