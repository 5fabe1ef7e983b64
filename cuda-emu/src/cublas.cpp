// cuBLAS, emulated: handles bound to a stream, and single-precision GEMM (plain and strided
// batched) queued on that stream like a kernel. Arguments are checked as cuBLAS documents
// (sizes, leading dimensions); operands reaching outside their device allocations fault the
// context as an illegal address would on a GPU. Each output is one dot product in k order,
// accumulated in f32.

#include <cstdio>
#include <string>

#include "runtime.h"

using namespace emu;

namespace emu {
struct BlasHandle {
    Context* ctx;
    CUstream stream = nullptr;  // NULL: the legacy default stream
    int math_mode = CUBLAS_DEFAULT_MATH;
    uintptr_t workspace = 0;
};
}  // namespace emu

namespace {

// The default workspace cuBLAS allocates with a handle.
constexpr size_t WORKSPACE = 4u << 20;

Registry<BlasHandle>& handles() {
    static Registry<BlasHandle>* r = new Registry<BlasHandle>();
    return *r;
}

struct Gemm {
    bool ta, tb;
    int m, n, k;
    float alpha, beta;
    const float* a;
    long long lda;
    const float* b;
    long long ldb;
    float* c;
    long long ldc;
};

// Column j of C = alpha · op(A) · op(B)[:, j] + beta · C[:, j].
void gemm_column(const Gemm& g, int j, float* acc) {
    for (int i = 0; i < g.m; i++) acc[i] = 0.0f;
    for (int p = 0; p < g.k; p++) {
        const float bv = g.tb ? g.b[j + (long long)p * g.ldb] : g.b[p + (long long)j * g.ldb];
        if (!g.ta) {
            const float* col = g.a + (long long)p * g.lda;
            for (int i = 0; i < g.m; i++) acc[i] += col[i] * bv;
        } else {
            for (int i = 0; i < g.m; i++) acc[i] += g.a[p + (long long)i * g.lda] * bv;
        }
    }
    float* cj = g.c + (long long)j * g.ldc;
    for (int i = 0; i < g.m; i++) cj[i] = g.beta == 0.0f ? g.alpha * acc[i] : g.alpha * acc[i] + g.beta * cj[i];
}

// The elements an operand of `rows` x `cols` (column-major, leading dimension `ld`) spans.
size_t span(long long rows, long long cols, long long ld) {
    if (rows == 0 || cols == 0) return 0;
    return (size_t)(ld * (cols - 1) + rows);
}

cublasStatus_t queue(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
                     const float* alpha, const float* a, int lda, long long stride_a, const float* b, int ldb,
                     long long stride_b, const float* beta, float* c, int ldc, long long stride_c, int batch) {
    if (!h || !handles().has(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (transa == CUBLAS_OP_C) transa = CUBLAS_OP_T;  // real matrices
    if (transb == CUBLAS_OP_C) transb = CUBLAS_OP_T;
    if ((transa != CUBLAS_OP_N && transa != CUBLAS_OP_T) || (transb != CUBLAS_OP_N && transb != CUBLAS_OP_T))
        return CUBLAS_STATUS_INVALID_VALUE;
    const bool ta = transa == CUBLAS_OP_T, tb = transb == CUBLAS_OP_T;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    const int a_rows = ta ? k : m, a_cols = ta ? m : k;
    const int b_rows = tb ? n : k, b_cols = tb ? k : n;
    if (lda < (a_rows > 1 ? a_rows : 1) || ldb < (b_rows > 1 ? b_rows : 1) || ldc < (m > 1 ? m : 1))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    Stream* s;
    if (h->stream) {
        if (!streams().has(h->stream)) return CUBLAS_STATUS_EXECUTION_FAILED;
        s = h->stream;
    } else {
        s = h->ctx->legacy.get();
    }
    if (s->ctx->sticky.load() != CUDA_SUCCESS) return CUBLAS_STATUS_EXECUTION_FAILED;
    const float al = *alpha, be = *beta;
    const size_t a_span = span(a_rows, a_cols, lda), b_span = span(b_rows, b_cols, ldb), c_span = span(m, n, ldc);
    Context* ctx = s->ctx;
    s->enqueue([=] {
        for (int q = 0; q < batch; q++) {
            Gemm g{ta, tb, m, n, k, al, be, a + q * stride_a, lda, b + q * stride_b, ldb, c + q * stride_c, ldc};
            auto inside = [](const float* p, size_t elems) {
                return elems == 0 || device_range(reinterpret_cast<uintptr_t>(p), elems * 4, false);
            };
            if (!inside(g.a, k ? a_span : 0) || !inside(g.b, k ? b_span : 0) || !inside(g.c, c_span)) {
                char msg[200];
                snprintf(msg, sizeof msg,
                         "cublasSgemm (m=%d n=%d k=%d lda=%d ldb=%d ldc=%d, batch %d): an operand reaches "
                         "outside its device allocation",
                         m, n, k, lda, ldb, ldc, q);
                ctx->fault(CUDA_ERROR_ILLEGAL_ADDRESS, msg);
                return;
            }
            const int cols_per_item = 16;
            parallel_for((uint64_t)((n + cols_per_item - 1) / cols_per_item), [&](uint64_t item) {
                std::vector<float> acc((size_t)m);
                const int j1 = (int)((item + 1) * cols_per_item < (uint64_t)n ? (item + 1) * cols_per_item : n);
                for (int j = (int)(item * cols_per_item); j < j1; j++) gemm_column(g, j, acc.data());
                return true;
            });
        }
        count(&EspalierCudaEmuStats::gemms, (uint64_t)batch);
    });
    return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

EMU_API cublasStatus_t cublasCreate_v2(cublasHandle_t* out) {
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    Context* c = current();
    if (!c) return CUBLAS_STATUS_NOT_INITIALIZED;
    uintptr_t ws;
    CUresult r = allocate(c, WORKSPACE, false, nullptr, &ws);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return CUBLAS_STATUS_ALLOC_FAILED;
    if (r != CUDA_SUCCESS) return CUBLAS_STATUS_INTERNAL_ERROR;
    BlasHandle* h = new BlasHandle();
    h->ctx = c;
    h->workspace = ws;
    handles().add(h);
    *out = h;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    if (!h || !handles().remove(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->ctx->synchronize();
    release(h->workspace, nullptr);
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasSetStream_v2(cublasHandle_t h, CUstream s) {
    if (!h || !handles().has(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (s && !streams().has(s)) return CUBLAS_STATUS_INVALID_VALUE;
    h->stream = s;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasGetStream_v2(cublasHandle_t h, CUstream* s) {
    if (!h || !handles().has(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!s) return CUBLAS_STATUS_INVALID_VALUE;
    *s = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasSetMathMode(cublasHandle_t h, int mode) {
    if (!h || !handles().has(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasGetMathMode(cublasHandle_t h, int* mode) {
    if (!h || !handles().has(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = h->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

EMU_API cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                      const float* alpha, const float* a, int lda, const float* b, int ldb,
                                      const float* beta, float* c, int ldc) {
    return queue(h, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1);
}

EMU_API cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const float* alpha, const float* a, int lda,
                                                 long long stride_a, const float* b, int ldb, long long stride_b,
                                                 const float* beta, float* c, int ldc, long long stride_c,
                                                 int batch) {
    return queue(h, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch);
}

EMU_API const char* cublasGetStatusName(cublasStatus_t s) {
    switch (s) {
        case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
        case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
        case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
        case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

EMU_API const char* cublasGetStatusString(cublasStatus_t s) { return cublasGetStatusName(s); }
