// The subset of the CUDA driver, NVRTC and cuBLAS C interfaces the emulator implements:
// handle types, result codes and the enum values espalier and cudarc pass. The values are
// those of the CUDA 13 headers (cudarc's `cuda-13000` bindings carry the same numbers).
#pragma once

#include <cstddef>
#include <cstdint>

#define EMU_API extern "C" __attribute__((visibility("default")))

namespace emu {
struct Context;
struct Stream;
struct Event;
struct Module;
struct Function;
struct Pool;
struct BlasHandle;
struct Program;
}  // namespace emu

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef emu::Context* CUcontext;
typedef emu::Stream* CUstream;
typedef emu::Event* CUevent;
typedef emu::Module* CUmodule;
typedef emu::Function* CUfunction;
typedef emu::Pool* CUmemoryPool;

enum CUresult : unsigned {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_INVALID_VALUE = 1,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_INITIALIZED = 3,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_NO_DEVICE = 100,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_INVALID_IMAGE = 200,
    CUDA_ERROR_INVALID_CONTEXT = 201,
    CUDA_ERROR_NO_BINARY_FOR_GPU = 209,
    CUDA_ERROR_INVALID_PTX = 218,
    CUDA_ERROR_INVALID_HANDLE = 400,
    CUDA_ERROR_NOT_FOUND = 500,
    CUDA_ERROR_NOT_READY = 600,
    CUDA_ERROR_ILLEGAL_ADDRESS = 700,
    CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701,
    CUDA_ERROR_ILLEGAL_INSTRUCTION = 715,
    CUDA_ERROR_LAUNCH_FAILED = 719,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_UNKNOWN = 999,
};

// Flags.
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
constexpr unsigned CU_EVENT_BLOCKING_SYNC = 1;
constexpr unsigned CU_EVENT_DISABLE_TIMING = 2;
constexpr unsigned CU_CTX_SCHED_BLOCKING_SYNC = 4;
constexpr unsigned CU_CTX_SCHED_MASK = 7;

// Memory pool attributes (CUmemPool_attribute).
constexpr int CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES = 1;
constexpr int CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC = 2;
constexpr int CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES = 3;
constexpr int CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4;
constexpr int CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT = 5;
constexpr int CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH = 6;
constexpr int CU_MEMPOOL_ATTR_USED_MEM_CURRENT = 7;
constexpr int CU_MEMPOOL_ATTR_USED_MEM_HIGH = 8;

// Function attributes (CUfunction_attribute).
constexpr int CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;
constexpr int CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
constexpr int CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES = 2;
constexpr int CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3;
constexpr int CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
constexpr int CU_FUNC_ATTRIBUTE_PTX_VERSION = 5;
constexpr int CU_FUNC_ATTRIBUTE_BINARY_VERSION = 6;
constexpr int CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8;

struct CUuuid {
    char bytes[16];
};

// NVRTC.
typedef emu::Program* nvrtcProgram;
enum nvrtcResult : int {
    NVRTC_SUCCESS = 0,
    NVRTC_ERROR_OUT_OF_MEMORY = 1,
    NVRTC_ERROR_PROGRAM_CREATION_FAILURE = 2,
    NVRTC_ERROR_INVALID_INPUT = 3,
    NVRTC_ERROR_INVALID_PROGRAM = 4,
    NVRTC_ERROR_INVALID_OPTION = 5,
    NVRTC_ERROR_COMPILATION = 6,
    NVRTC_ERROR_INTERNAL_ERROR = 11,
};

// cuBLAS.
typedef emu::BlasHandle* cublasHandle_t;
enum cublasStatus_t : int {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};
enum cublasOperation_t : int {
    CUBLAS_OP_N = 0,
    CUBLAS_OP_T = 1,
    CUBLAS_OP_C = 2,
};
enum cublasMath_t : int {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
};
