// The emulator's own tests: the driver, NVRTC and cuBLAS entry points against what the CUDA
// documentation says they do. Run by `make -C cuda-emu selftest` (CI does). Tests that
// fault the context run in a child process each (`selftest FAULT-NAME`).

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../src/types.h"

extern "C" {
CUresult cuInit(unsigned);
CUresult cuDeviceGet(CUdevice*, int);
CUresult cuDeviceGetAttribute(int*, int, CUdevice);
CUresult cuDevicePrimaryCtxRetain(CUcontext*, CUdevice);
CUresult cuCtxSetCurrent(CUcontext);
CUresult cuCtxSynchronize();
CUresult cuStreamCreate(CUstream*, unsigned);
CUresult cuStreamSynchronize(CUstream);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemAllocAsync(CUdeviceptr*, size_t, CUstream);
CUresult cuMemFreeAsync(CUdeviceptr, CUstream);
CUresult cuMemHostAlloc(void**, size_t, unsigned);
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr, const void*, size_t, CUstream);
CUresult cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
CUresult cuMemsetD8Async(CUdeviceptr, unsigned char, size_t, CUstream);
CUresult cuModuleLoadData(CUmodule*, const void*);
CUresult cuModuleGetFunction(CUfunction*, CUmodule, const char*);
CUresult cuLaunchKernel(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                        void**, void**);
nvrtcResult nvrtcCreateProgram(nvrtcProgram*, const char*, const char*, int, const char* const*, const char* const*);
nvrtcResult nvrtcCompileProgram(nvrtcProgram, int, const char* const*);
nvrtcResult nvrtcGetProgramLogSize(nvrtcProgram, size_t*);
nvrtcResult nvrtcGetProgramLog(nvrtcProgram, char*);
cublasStatus_t cublasCreate_v2(cublasHandle_t*);
cublasStatus_t cublasSetStream_v2(cublasHandle_t, CUstream);
cublasStatus_t cublasSgemm_v2(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const float*,
                              const float*, int, const float*, int, const float*, float*, int);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                         const float*, const float*, int, long long, const float*, int, long long,
                                         const float*, float*, int, long long, int);
unsigned espalier_cuda_emu_set_op_delay_us(unsigned);
}

static int failures = 0;
#define CHECK(cond, ...)                                       \
    do {                                                       \
        if (!(cond)) {                                         \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                      \
            fprintf(stderr, "\n");                             \
            failures++;                                        \
        }                                                      \
    } while (0)
#define OK(call) CHECK((call) == 0, "%s returned an error", #call)

static CUmodule module() {
    static const char image[] = "ESPALIER-CUDA-EMU-CUBIN\0emu_selftest\00090";
    CUmodule m = nullptr;
    OK(cuModuleLoadData(&m, image));
    return m;
}

static CUfunction function(const char* name) {
    CUfunction f = nullptr;
    OK(cuModuleGetFunction(&f, module(), name));
    return f;
}

static void setup() {
    OK(cuInit(0));
    CUcontext c;
    OK(cuDevicePrimaryCtxRetain(&c, 0));
    OK(cuCtxSetCurrent(c));
}

static void attributes() {
    int v;
    OK(cuDeviceGetAttribute(&v, 16, 0));
    CHECK(v == 132, "132 multiprocessors, got %d", v);
    OK(cuDeviceGetAttribute(&v, 75, 0));
    CHECK(v == 9, "compute capability 9.x, got %d", v);
}

static void launch_limits() {
    CUfunction f = function("shuffles");
    CUdeviceptr out;
    OK(cuMemAlloc_v2(&out, 4096));
    void* args[] = {&out};
    CHECK(cuLaunchKernel(f, 1, 1, 1, 1025, 1, 1, 0, nullptr, args, nullptr) == CUDA_ERROR_INVALID_VALUE,
          "1025 threads per block");
    CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 32, 2, 0, nullptr, args, nullptr) == CUDA_ERROR_INVALID_VALUE,
          "32x32x2 threads per block");
    CHECK(cuLaunchKernel(f, 1, 65536, 1, 32, 1, 1, 0, nullptr, args, nullptr) == CUDA_ERROR_INVALID_VALUE,
          "a grid of 65536 in y");
    CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 49153, nullptr, args, nullptr) == CUDA_ERROR_INVALID_VALUE,
          "48 KiB + 1 of dynamic shared memory");
    OK(cuCtxSynchronize());
}

static void shuffles() {
    CUdeviceptr out;
    OK(cuMemAlloc_v2(&out, 32 * 4 * 4));
    void* args[] = {&out};
    OK(cuLaunchKernel(function("shuffles"), 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr));
    int h[128];
    OK(cuMemcpyDtoH_v2(h, out, sizeof h));
    for (int l = 0; l < 32; l++) {
        CHECK(h[l * 4 + 0] == (l ^ 5), "xor lane %d: %d", l, h[l * 4]);
        CHECK(h[l * 4 + 1] == 70, "idx lane %d: %d", l, h[l * 4 + 1]);
        CHECK(h[l * 4 + 2] == (l + 3 < 32 ? l + 3 : l), "down lane %d: %d", l, h[l * 4 + 2]);
        CHECK(h[l * 4 + 3] == (l >= 2 ? l - 2 : l), "up lane %d: %d", l, h[l * 4 + 3]);
    }
}

static void shared_memory_and_coords() {
    const int blocks = 40, n = blocks * 256;
    std::vector<float> in(n), out(n);
    for (int i = 0; i < n; i++) in[i] = (float)i;
    CUdeviceptr din, dout;
    OK(cuMemAlloc_v2(&din, n * 4));
    OK(cuMemAlloc_v2(&dout, n * 4));
    OK(cuMemcpyHtoDAsync_v2(din, in.data(), n * 4, nullptr));
    void* args[] = {&din, &dout};
    OK(cuLaunchKernel(function("reverse_blocks"), blocks, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr));
    OK(cuMemcpyDtoH_v2(out.data(), dout, n * 4));
    for (int i = 0; i < n; i++) {
        int b = i / 256, t = i % 256;
        if (out[i] != (float)(b * 256 + 255 - t)) {
            CHECK(false, "reverse: out[%d] = %g", i, out[i]);
            break;
        }
    }
    // A 3x2x2 grid of 4x2x3 blocks.
    CUdeviceptr dc;
    OK(cuMemAlloc_v2(&dc, 12 * 24 * 4));
    void* cargs[] = {&dc};
    OK(cuLaunchKernel(function("coords"), 3, 2, 2, 4, 2, 3, 0, nullptr, cargs, nullptr));
    std::vector<unsigned> c(12 * 24);
    OK(cuMemcpyDtoH_v2(c.data(), dc, c.size() * 4));
    for (unsigned bz = 0; bz < 2; bz++)
        for (unsigned by = 0; by < 2; by++)
            for (unsigned bx = 0; bx < 3; bx++)
                for (unsigned tz = 0; tz < 3; tz++)
                    for (unsigned ty = 0; ty < 2; ty++)
                        for (unsigned tx = 0; tx < 4; tx++) {
                            unsigned b = bx + 3 * (by + 2 * bz), t = tx + 4 * (ty + 2 * tz);
                            unsigned want = (tx << 24) | (ty << 16) | (tz << 12) | (bx << 8) | (by << 4) | bz;
                            CHECK(c[b * 24 + t] == want, "coords of block %u thread %u", b, t);
                        }
}

// A copy from page-locked memory reads its source when the stream runs it; one from
// pageable memory of at most 64 KiB reads it at the call.
static void copies_read_their_source_when_they_run() {
    CUstream s;
    OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    const size_t n = 4096;
    int* pinned;
    OK(cuMemHostAlloc((void**)&pinned, n * 4, 0));
    std::vector<int> pageable(n, 1);
    for (size_t i = 0; i < n; i++) pinned[i] = 1;
    CUdeviceptr a, b;
    OK(cuMemAllocAsync(&a, n * 4, s));
    OK(cuMemAllocAsync(&b, n * 4, s));
    unsigned before = espalier_cuda_emu_set_op_delay_us(50000);  // a slow device
    OK(cuMemcpyHtoDAsync_v2(a, pinned, n * 4, s));
    OK(cuMemcpyHtoDAsync_v2(b, pageable.data(), n * 4, s));
    for (size_t i = 0; i < n; i++) pinned[i] = pageable[i] = 2;  // before the copies ran
    OK(cuStreamSynchronize(s));
    espalier_cuda_emu_set_op_delay_us(before);
    std::vector<int> ha(n), hb(n);
    OK(cuMemcpyDtoH_v2(ha.data(), a, n * 4));
    OK(cuMemcpyDtoH_v2(hb.data(), b, n * 4));
    CHECK(ha[0] == 2 && ha[n - 1] == 2, "pinned copy read %d: its source when queued", ha[0]);
    CHECK(hb[0] == 1 && hb[n - 1] == 1, "pageable copy read %d: its source after the call", hb[0]);
    // A copy past an allocation's end is refused.
    CHECK(cuMemcpyHtoDAsync_v2(a, pinned, n * 4 + 256, s) == CUDA_ERROR_INVALID_VALUE, "copy past the end");
}

// Capacity: ESPALIER_CUDA_EMU_MEM=16MiB (set by main before cuInit).
static void stream_ordered_pool() {
    CUstream s1, s2;
    OK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    OK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    OK(cuCtxSynchronize());  // earlier tests' frees given back
    CUdeviceptr a, b;
    OK(cuMemAllocAsync(&a, 12 << 20, s1));
    CHECK(cuMemAllocAsync(&b, 8 << 20, s1) == CUDA_ERROR_OUT_OF_MEMORY, "past the capacity");
    unsigned before = espalier_cuda_emu_set_op_delay_us(20000);
    OK(cuMemsetD8Async(a, 0, 12 << 20, s1));  // keeps s1 busy: the free has not run yet
    OK(cuMemFreeAsync(a, s1));
    CHECK(cuMemAllocAsync(&b, 8 << 20, s2) == CUDA_ERROR_OUT_OF_MEMORY,
          "another stream reused a block whose free has not run");
    OK(cuMemAllocAsync(&b, 8 << 20, s1));  // the same stream: after the free in stream order
    espalier_cuda_emu_set_op_delay_us(before);
    OK(cuMemFreeAsync(b, s1));
    OK(cuStreamSynchronize(s1));
    OK(cuMemAllocAsync(&b, 12 << 20, s2));  // everything given back at the synchronisation
    OK(cuMemFreeAsync(b, s2));
    OK(cuStreamSynchronize(s2));
}

static void nvrtc_refuses_a_source_it_was_not_built_from() {
    nvrtcProgram p;
    OK(nvrtcCreateProgram(&p, "extern \"C\" __global__ void f() {}", "emu_selftest.cu", 0, nullptr, nullptr));
    const char* opts[] = {"--gpu-architecture=sm_90"};
    CHECK(nvrtcCompileProgram(p, 1, opts) == NVRTC_ERROR_COMPILATION, "a stale source compiled");
    size_t len;
    OK(nvrtcGetProgramLogSize(p, &len));
    std::string log(len, '\0');
    OK(nvrtcGetProgramLog(p, &log[0]));
    CHECK(log.find("rebuild") != std::string::npos, "log: %s", log.c_str());
}

static void gemms() {
    cublasHandle_t h;
    OK(cublasCreate_v2(&h));
    const int m = 37, n = 29, k = 45, lda = 50, ldb = 61, ldc = 40, batch = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            const int ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
            const long long sa = (long long)lda * ac, sb = (long long)ldb * bc, sc = (long long)ldc * n;
            std::vector<float> A(sa * batch), B(sb * batch), C(sc * batch, 7.0f);
            for (size_t i = 0; i < A.size(); i++) A[i] = (float)((i * 37) % 11) - 5.0f;
            for (size_t i = 0; i < B.size(); i++) B[i] = (float)((i * 17) % 7) - 3.0f;
            CUdeviceptr da, db, dc;
            OK(cuMemAlloc_v2(&da, A.size() * 4));
            OK(cuMemAlloc_v2(&db, B.size() * 4));
            OK(cuMemAlloc_v2(&dc, C.size() * 4));
            OK(cuMemcpyHtoDAsync_v2(da, A.data(), A.size() * 4, nullptr));
            OK(cuMemcpyHtoDAsync_v2(db, B.data(), B.size() * 4, nullptr));
            OK(cuMemcpyHtoDAsync_v2(dc, C.data(), C.size() * 4, nullptr));
            const float alpha = 2.0f, beta = 0.5f;
            OK(cublasSgemmStridedBatched(h, (cublasOperation_t)ta, (cublasOperation_t)tb, m, n, k, &alpha,
                                         (const float*)da, lda, sa, (const float*)db, ldb, sb, &beta, (float*)dc,
                                         ldc, sc, batch));
            std::vector<float> got(C.size());
            OK(cuMemcpyDtoH_v2(got.data(), dc, got.size() * 4));
            (void)ar;
            (void)br;
            for (int q = 0; q < batch; q++)
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < m; i++) {
                        float acc = 0;
                        for (int p = 0; p < k; p++) {
                            float a = ta ? A[q * sa + p + (long long)i * lda] : A[q * sa + i + (long long)p * lda];
                            float b = tb ? B[q * sb + j + (long long)p * ldb] : B[q * sb + p + (long long)j * ldb];
                            acc += a * b;
                        }
                        float want = alpha * acc + beta * 7.0f, g = got[q * sc + i + (long long)j * ldc];
                        if (g != want) {
                            CHECK(false, "gemm ta=%d tb=%d batch %d C[%d,%d] = %g, want %g", ta, tb, q, i, j, g, want);
                            return;
                        }
                    }
            // Rows past m of each column are not written.
            CHECK(got[m] == 7.0f, "gemm wrote past m");
        }
    const float one = 1.0f, zero = 0.0f;
    CHECK(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, nullptr, 3, nullptr, 4, &zero, nullptr, 4) ==
              CUBLAS_STATUS_INVALID_VALUE,
          "lda < m accepted");
}

// Faults, each in a child process: the context is unusable after one.
static int fault(const char* name) {
    setup();
    CUdeviceptr out;
    OK(cuMemAlloc_v2(&out, 4096));
    void* args[] = {&out};
    if (!strcmp(name, "divergent_barrier")) {
        OK(cuLaunchKernel(function("divergent_barrier"), 1, 1, 1, 64, 1, 1, 0, nullptr, args, nullptr));
    } else if (!strcmp(name, "partial_warp_shuffle")) {
        OK(cuLaunchKernel(function("partial_warp_shuffle"), 1, 1, 1, 48, 1, 1, 0, nullptr, args, nullptr));
    } else {
        return 2;
    }
    CUresult r = cuCtxSynchronize();
    CHECK(r == CUDA_ERROR_ILLEGAL_INSTRUCTION, "%s: synchronize returned %u", name, (unsigned)r);
    CHECK(cuMemAlloc_v2(&out, 64) == CUDA_ERROR_ILLEGAL_INSTRUCTION, "%s: the context still works", name);
    return failures ? 1 : 0;
}

int main(int argc, char** argv) {
    if (argc == 2) return fault(argv[1]);
    setenv("ESPALIER_CUDA_EMU_MEM", "16MiB", 1);
    setup();
    attributes();
    launch_limits();
    shuffles();
    shared_memory_and_coords();
    copies_read_their_source_when_they_run();
    stream_ordered_pool();
    nvrtc_refuses_a_source_it_was_not_built_from();
    gemms();
    for (const char* f : {"divergent_barrier", "partial_warp_shuffle"}) {
        std::string cmd = std::string(argv[0]) + " " + f + " 2>/dev/null";
        int status = system(cmd.c_str());
        CHECK(status == 0, "fault test %s failed (status %d)", f, status);
    }
    if (failures) {
        fprintf(stderr, "cuda-emu selftest: %d failure(s)\n", failures);
        return 1;
    }
    printf("cuda-emu selftest: ok\n");
    return 0;
}
