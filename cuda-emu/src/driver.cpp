// The CUDA driver API entry points the engine reaches through cudarc, over the emulated
// device of runtime.cpp. Every entry point checks its arguments as the driver documents and
// returns the driver's codes; anything not listed here is absent, so a new call into the
// driver fails loudly (cudarc names the missing symbol) instead of doing something made up.

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime.h"

using namespace emu;

namespace {

std::atomic<bool> initialised{false};

// Uploads from pageable memory up to this size are staged by the driver and return at once;
// larger ones block until the copy ran (see README: the driver stages pageable memory
// through bounce buffers, and their transfers wait for the stream's earlier work).
constexpr size_t PAGEABLE_STAGING = 64 * 1024;

const char* const DEVICE_NAME = "NVIDIA H100 80GB HBM3 (espalier CUDA emulator)";

CUresult checked(Context* c) {
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    return (CUresult)c->sticky.load();
}

// The context a call without a stream argument works in.
CUresult current_ctx(Context** out) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    Context* c = current();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    *out = c;
    return checked(c);
}

// The stream a handle names: NULL and CU_STREAM_LEGACY (0x1) are the current context's
// legacy default stream. Work that allocates, copies or launches (`work`) also needs the
// stream's context current on the calling thread, as the driver does.
CUresult stream_of(CUstream h, Stream** out, bool work = true) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    uintptr_t v = reinterpret_cast<uintptr_t>(h);
    if (v == 0 || v == 1) {
        Context* c = current();
        if (!c) return CUDA_ERROR_INVALID_CONTEXT;
        *out = c->legacy.get();
        return checked(c);
    }
    if (v == 2) return CUDA_ERROR_NOT_SUPPORTED;  // the per-thread default stream
    if (!streams().has(h)) return CUDA_ERROR_INVALID_HANDLE;
    if (work && current() != h->ctx) return CUDA_ERROR_INVALID_CONTEXT;
    *out = h;
    return checked(h->ctx);
}

bool spins(Context* c, unsigned event_flags) {
    if (event_flags & CU_EVENT_BLOCKING_SYNC) return false;
    return (c->flags & CU_CTX_SCHED_MASK) != CU_CTX_SCHED_BLOCKING_SYNC;
}

// A blocking wait of the host for item `seq` of `s`.
void host_wait(Stream* s, uint64_t seq, bool implicit, unsigned event_flags = 0) {
    count(&EspalierCudaEmuStats::host_waits);
    if (implicit) count(&EspalierCudaEmuStats::implicit_waits);
    if (spins(s->ctx, event_flags)) count(&EspalierCudaEmuStats::spin_waits);
    s->wait(seq);
}

// After a synchronisation the pool gives back what it holds past its release threshold.
void release_after_sync(Context* c) {
    Device* d = device(c->device);
    trim(d, d->pool.release_threshold);
}

CUresult after_wait(Context* c) {
    release_after_sync(c);
    return checked(c);
}

}  // namespace

// ---- initialisation and devices ---------------------------------------------------------

// ESPALIER_CUDA_EMU_REPORT=1: the counters on stderr when the process exits.
static void report() {
    EspalierCudaEmuStats s;
    {
        Stats& st = stats();
        std::lock_guard<std::mutex> g(st.m);
        s = st.s;
    }
    fprintf(stderr,
            "espalier CUDA emulator: %llu launches (%llu blocks), %llu GEMMs; host waits %llu (implicit %llu, "
            "spinning %llu); uploads %llu pinned (%llu bytes), %llu pageable (%llu bytes); %llu readbacks; "
            "%llu items on the legacy stream; events %llu created, %llu live; device bytes peak %llu, live %llu, "
            "reserved %llu; %llu out-of-memory refusals\n",
            (unsigned long long)s.launches, (unsigned long long)s.blocks, (unsigned long long)s.gemms,
            (unsigned long long)s.host_waits, (unsigned long long)s.implicit_waits,
            (unsigned long long)s.spin_waits, (unsigned long long)s.pinned_uploads,
            (unsigned long long)s.pinned_upload_bytes, (unsigned long long)s.pageable_uploads,
            (unsigned long long)s.pageable_upload_bytes, (unsigned long long)s.readbacks,
            (unsigned long long)s.legacy_stream_ops, (unsigned long long)s.events_created,
            (unsigned long long)s.events_live, (unsigned long long)s.device_bytes_peak,
            (unsigned long long)s.device_bytes_live, (unsigned long long)s.device_bytes_reserved,
            (unsigned long long)s.out_of_memory);
}

EMU_API CUresult cuInit(unsigned flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (!initialised.exchange(true)) {
        const char* v = getenv("ESPALIER_CUDA_EMU_REPORT");
        if (v && strcmp(v, "0") != 0) atexit(report);
    }
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDriverGetVersion(int* v) {
    if (!v) return CUDA_ERROR_INVALID_VALUE;
    *v = 13000;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetCount(int* n) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!n) return CUDA_ERROR_INVALID_VALUE;
    *n = config().devices;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGet(CUdevice* d, int ordinal) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    if (!device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetName(char* name, int len, CUdevice d) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device(d)) return CUDA_ERROR_INVALID_DEVICE;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", DEVICE_NAME);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice d) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device(d)) return CUDA_ERROR_INVALID_DEVICE;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = device(d)->capacity;
    return CUDA_SUCCESS;
}

static CUresult uuid_of(CUuuid* u, CUdevice d) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device(d)) return CUDA_ERROR_INVALID_DEVICE;
    if (!u) return CUDA_ERROR_INVALID_VALUE;
    const char tag[16] = {'e', 's', 'p', 'a', 'l', 'i', 'e', 'r', '-', 'c', 'u', 'd', 'a', 'e', 'm', (char)d};
    memcpy(u->bytes, tag, 16);
    return CUDA_SUCCESS;
}
EMU_API CUresult cuDeviceGetUuid(CUuuid* u, CUdevice d) { return uuid_of(u, d); }
EMU_API CUresult cuDeviceGetUuid_v2(CUuuid* u, CUdevice d) { return uuid_of(u, d); }

// The attributes of an H100 SXM5 80GB (compute capability 9.0), as its driver reports them.
EMU_API CUresult cuDeviceGetAttribute(int* value, int attrib, CUdevice d) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device(d)) return CUDA_ERROR_INVALID_DEVICE;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    int v;
    switch (attrib) {
        case 1: v = 1024; break;          // MAX_THREADS_PER_BLOCK
        case 2: v = 1024; break;          // MAX_BLOCK_DIM_X
        case 3: v = 1024; break;          // MAX_BLOCK_DIM_Y
        case 4: v = 64; break;            // MAX_BLOCK_DIM_Z
        case 5: v = 2147483647; break;    // MAX_GRID_DIM_X
        case 6: v = 65535; break;         // MAX_GRID_DIM_Y
        case 7: v = 65535; break;         // MAX_GRID_DIM_Z
        case 8: v = 49152; break;         // MAX_SHARED_MEMORY_PER_BLOCK
        case 9: v = 65536; break;         // TOTAL_CONSTANT_MEMORY
        case 10: v = 32; break;           // WARP_SIZE
        case 11: v = 2147483647; break;   // MAX_PITCH
        case 12: v = 65536; break;        // MAX_REGISTERS_PER_BLOCK
        case 13: v = 1980000; break;      // CLOCK_RATE (kHz)
        case 14: v = 512; break;          // TEXTURE_ALIGNMENT
        case 15: v = 1; break;            // GPU_OVERLAP
        case 16: v = 132; break;          // MULTIPROCESSOR_COUNT
        case 17: v = 0; break;            // KERNEL_EXEC_TIMEOUT
        case 18: v = 0; break;            // INTEGRATED
        case 19: v = 1; break;            // CAN_MAP_HOST_MEMORY
        case 20: v = 0; break;            // COMPUTE_MODE (default)
        case 31: v = 1; break;            // CONCURRENT_KERNELS
        case 32: v = 1; break;            // ECC_ENABLED
        case 33: v = 0x18 + d; break;     // PCI_BUS_ID
        case 34: v = 0; break;            // PCI_DEVICE_ID
        case 35: v = 0; break;            // TCC_DRIVER
        case 36: v = 2619000; break;      // MEMORY_CLOCK_RATE (kHz)
        case 37: v = 5120; break;         // GLOBAL_MEMORY_BUS_WIDTH (bits)
        case 38: v = 52428800; break;     // L2_CACHE_SIZE
        case 39: v = 2048; break;         // MAX_THREADS_PER_MULTIPROCESSOR
        case 40: v = 3; break;            // ASYNC_ENGINE_COUNT
        case 41: v = 1; break;            // UNIFIED_ADDRESSING
        case 50: v = 0; break;            // PCI_DOMAIN_ID
        case 75: v = 9; break;            // COMPUTE_CAPABILITY_MAJOR
        case 76: v = 0; break;            // COMPUTE_CAPABILITY_MINOR
        case 78: v = 1; break;            // STREAM_PRIORITIES_SUPPORTED
        case 79: v = 1; break;            // GLOBAL_L1_CACHE_SUPPORTED
        case 80: v = 1; break;            // LOCAL_L1_CACHE_SUPPORTED
        case 81: v = 233472; break;       // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
        case 82: v = 65536; break;        // MAX_REGISTERS_PER_MULTIPROCESSOR
        case 83: v = 1; break;            // MANAGED_MEMORY
        case 84: v = 0; break;            // MULTI_GPU_BOARD
        case 86: v = 0; break;            // HOST_NATIVE_ATOMIC_SUPPORTED
        case 88: v = 0; break;            // PAGEABLE_MEMORY_ACCESS
        case 89: v = 1; break;            // CONCURRENT_MANAGED_ACCESS
        case 90: v = 1; break;            // COMPUTE_PREEMPTION_SUPPORTED
        case 95: v = 1; break;            // COOPERATIVE_LAUNCH
        case 97: v = 232448; break;       // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        case 106: v = 32; break;          // MAX_BLOCKS_PER_MULTIPROCESSOR
        case 111: v = 1024; break;        // RESERVED_SHARED_MEMORY_PER_BLOCK
        case 115: v = 1; break;           // MEMORY_POOLS_SUPPORTED
        case 120: v = 1; break;           // CLUSTER_LAUNCH
        default:
            fprintf(stderr, "espalier CUDA emulator: cuDeviceGetAttribute(%d) is not emulated\n", attrib);
            return CUDA_ERROR_INVALID_VALUE;
    }
    *value = v;
    return CUDA_SUCCESS;
}

// ---- contexts ---------------------------------------------------------------------------

EMU_API CUresult cuDevicePrimaryCtxRetain(CUcontext* out, CUdevice d) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    Device* dev = device(d);
    if (!dev) return CUDA_ERROR_INVALID_DEVICE;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> g(memory_lock());
    if (!dev->primary) dev->primary = new Context(d);  // lives as long as the process
    dev->primary->refs++;
    *out = dev->primary;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    Device* dev = device(d);
    if (!dev) return CUDA_ERROR_INVALID_DEVICE;
    std::lock_guard<std::mutex> g(memory_lock());
    if (!dev->primary || dev->primary->refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
    dev->primary->refs--;
    return CUDA_SUCCESS;
}

static bool is_context(CUcontext c) {
    for (int i = 0; i < config().devices; i++)
        if (device(i)->primary == c) return true;
    return false;
}

EMU_API CUresult cuCtxGetCurrent(CUcontext* out) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = current();
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSetCurrent(CUcontext c) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (c && !is_context(c)) return CUDA_ERROR_INVALID_CONTEXT;
    current() = c;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxPushCurrent_v2(CUcontext c) { return cuCtxSetCurrent(c); }

EMU_API CUresult cuCtxPopCurrent_v2(CUcontext* out) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (out) *out = current();
    current() = nullptr;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetDevice(CUdevice* d) {
    Context* c;
    if (CUresult r = current_ctx(&c)) return r;
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    *d = c->device;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSetFlags(unsigned flags) {
    Context* c;
    if (CUresult r = current_ctx(&c)) return r;
    c->flags = flags;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxGetFlags(unsigned* flags) {
    Context* c;
    if (CUresult r = current_ctx(&c)) return r;
    if (!flags) return CUDA_ERROR_INVALID_VALUE;
    *flags = c->flags;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuCtxSynchronize() {
    Context* c;
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    c = current();
    if (!c) return CUDA_ERROR_INVALID_CONTEXT;
    count(&EspalierCudaEmuStats::host_waits);
    if (spins(c, 0)) count(&EspalierCudaEmuStats::spin_waits);
    c->synchronize();
    return after_wait(c);
}

EMU_API CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
    Context* c;
    if (CUresult r = current_ctx(&c)) return r;
    if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
    Device* d = device(c->device);
    std::lock_guard<std::mutex> g(memory_lock());
    *total = d->capacity;
    *free_bytes = d->capacity - d->reserved;
    return CUDA_SUCCESS;
}

// ---- streams and events -----------------------------------------------------------------

static CUresult create_stream(CUstream* out, unsigned flags) {
    Context* c;
    if (CUresult r = current_ctx(&c)) return r;
    if (!out || (flags & ~CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
    Stream* s = new Stream(c, flags, false);
    {
        std::lock_guard<std::mutex> g(c->m);
        c->streams.insert(s);
    }
    streams().add(s);
    *out = s;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamCreate(CUstream* out, unsigned flags) { return create_stream(out, flags); }

EMU_API CUresult cuStreamCreateWithPriority(CUstream* out, unsigned flags, int) {
    return create_stream(out, flags);
}

EMU_API CUresult cuStreamDestroy_v2(CUstream h) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!h || !streams().remove(h)) return CUDA_ERROR_INVALID_HANDLE;
    {
        std::lock_guard<std::mutex> g(h->ctx->m);
        h->ctx->streams.erase(h);
    }
    // The driver lets queued work finish after a destroy returns; the worker drains it.
    std::thread([h] { delete h; }).detach();
    return CUDA_SUCCESS;
}

EMU_API CUresult cuStreamSynchronize(CUstream h) {
    Stream* s;
    if (CUresult r = stream_of(h, &s, false)) return r;
    host_wait(s, s->last(), false);
    return after_wait(s->ctx);
}

EMU_API CUresult cuStreamQuery(CUstream h) {
    Stream* s;
    if (CUresult r = stream_of(h, &s, false)) return r;
    return s->is_done(s->last()) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EMU_API CUresult cuEventCreate(CUevent* out, unsigned flags) {
    Context* c;
    if (CUresult r = current_ctx(&c)) return r;
    if (!out || (flags & ~7u)) return CUDA_ERROR_INVALID_VALUE;
    Event* e = new Event();
    e->ctx = c;
    e->flags = flags;
    events().add(e);
    count(&EspalierCudaEmuStats::events_created);
    count(&EspalierCudaEmuStats::events_live);
    *out = e;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuEventDestroy_v2(CUevent e) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!e || !events().remove(e)) return CUDA_ERROR_INVALID_HANDLE;
    {
        Stats& s = stats();
        std::lock_guard<std::mutex> g(s.m);
        s.s.events_live--;
    }
    // A record still queued writes into the event: free it once its stream got there.
    Stream* s;
    uint64_t seq;
    {
        std::lock_guard<std::mutex> g(e->m);
        s = e->stream;
        seq = e->seq;
    }
    if (s && !s->is_done(seq)) {
        s->enqueue_raw([e] { delete e; });
    } else {
        delete e;
    }
    return CUDA_SUCCESS;
}

EMU_API CUresult cuEventRecord(CUevent e, CUstream h) {
    Stream* s;
    if (CUresult r = stream_of(h, &s)) return r;
    if (!e || !events().has(e)) return CUDA_ERROR_INVALID_HANDLE;
    if (e->ctx != s->ctx) return CUDA_ERROR_INVALID_CONTEXT;
    std::lock_guard<std::mutex> g(e->m);
    e->stream = s;
    e->seq = s->enqueue([e] {
        auto now = std::chrono::steady_clock::now().time_since_epoch();
        double ms = std::chrono::duration<double, std::milli>(now).count();
        std::lock_guard<std::mutex> g2(e->m);
        e->time_ms = ms;
    });
    return CUDA_SUCCESS;
}

static bool event_target(Event* e, Stream** s, uint64_t* seq) {
    std::lock_guard<std::mutex> g(e->m);
    *s = e->stream;
    *seq = e->seq;
    return *s != nullptr;
}

EMU_API CUresult cuEventQuery(CUevent e) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!e || !events().has(e)) return CUDA_ERROR_INVALID_HANDLE;
    if (CUresult r = checked(e->ctx)) return r;
    Stream* s;
    uint64_t seq;
    if (!event_target(e, &s, &seq)) return CUDA_SUCCESS;  // never recorded: complete
    return s->is_done(seq) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

EMU_API CUresult cuEventSynchronize(CUevent e) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!e || !events().has(e)) return CUDA_ERROR_INVALID_HANDLE;
    if (CUresult r = checked(e->ctx)) return r;
    Stream* s;
    uint64_t seq;
    if (!event_target(e, &s, &seq)) return CUDA_SUCCESS;
    host_wait(s, seq, false, e->flags);
    return after_wait(e->ctx);
}

EMU_API CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!ms) return CUDA_ERROR_INVALID_VALUE;
    if (!start || !end || !events().has(start) || !events().has(end)) return CUDA_ERROR_INVALID_HANDLE;
    if ((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    Stream *s0, *s1;
    uint64_t q0, q1;
    if (!event_target(start, &s0, &q0) || !event_target(end, &s1, &q1)) return CUDA_ERROR_INVALID_HANDLE;
    if (!s0->is_done(q0) || !s1->is_done(q1)) return CUDA_ERROR_NOT_READY;
    std::lock_guard<std::mutex> g0(start->m);
    std::lock_guard<std::mutex> g1(end->m);
    *ms = (float)(end->time_ms - start->time_ms);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
    return cuEventElapsedTime(ms, start, end);
}

EMU_API CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned flags) {
    Stream* s;
    if (CUresult r = stream_of(h, &s)) return r;
    if (!e || !events().has(e)) return CUDA_ERROR_INVALID_HANDLE;
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    Stream* on;
    uint64_t seq;
    if (!event_target(e, &on, &seq)) return CUDA_SUCCESS;  // never recorded: nothing to wait for
    if (on != s) s->enqueue([on, seq] { on->wait(seq); });
    return CUDA_SUCCESS;
}

// ---- memory -----------------------------------------------------------------------------

EMU_API CUresult cuMemAlloc_v2(CUdeviceptr* out, size_t bytes) {
    Context* c;
    if (CUresult r = current_ctx(&c)) return r;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p;
    CUresult r = allocate(c, bytes, false, nullptr, &p);
    if (r == CUDA_SUCCESS) *out = p;
    return r;
}

EMU_API CUresult cuMemFree_v2(CUdeviceptr p) {
    Context* c;
    if (CUresult r = current_ctx(&c)) return r;
    // cuMemFree waits for the device to stop using the memory: for all queued work.
    count(&EspalierCudaEmuStats::host_waits);
    count(&EspalierCudaEmuStats::implicit_waits);
    c->synchronize();
    return release(p, nullptr);
}

EMU_API CUresult cuMemAllocAsync(CUdeviceptr* out, size_t bytes, CUstream h) {
    Stream* s;
    if (CUresult r = stream_of(h, &s)) return r;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p;
    CUresult r = allocate(s->ctx, bytes, true, s, &p);
    if (r == CUDA_SUCCESS) *out = p;
    return r;
}

EMU_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr* out, size_t bytes, CUmemoryPool pool, CUstream h) {
    Stream* s;
    if (CUresult r = stream_of(h, &s)) return r;
    if (!pool || pool != &device(s->ctx->device)->pool) return CUDA_ERROR_INVALID_VALUE;
    return cuMemAllocAsync(out, bytes, h);
}

EMU_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream h) {
    Stream* s;
    if (CUresult r = stream_of(h, &s)) return r;
    return release(p, s);
}

EMU_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* out, CUdevice d) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!device(d)) return CUDA_ERROR_INVALID_DEVICE;
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = &device(d)->pool;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuDeviceGetMemPool(CUmemoryPool* out, CUdevice d) { return cuDeviceGetDefaultMemPool(out, d); }

static Device* device_of_pool(CUmemoryPool p) {
    for (int i = 0; i < config().devices; i++)
        if (&device(i)->pool == p) return device(i);
    return nullptr;
}

EMU_API CUresult cuMemPoolTrimTo(CUmemoryPool p, size_t keep) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    Device* d = device_of_pool(p);
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    trim(d, keep);
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemPoolSetAttribute(CUmemoryPool p, int attr, void* value) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    Device* d = device_of_pool(p);
    if (!d || !value) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> g(memory_lock());
    switch (attr) {
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
            d->pool.release_threshold = *static_cast<uint64_t*>(value);
            return CUDA_SUCCESS;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
            d->pool.reserved_high = d->reserved;
            return CUDA_SUCCESS;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
            d->pool.used_high = d->live;
            return CUDA_SUCCESS;
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            return CUDA_SUCCESS;  // the emulator reuses only stream-ordered or finished frees
        default:
            return CUDA_ERROR_INVALID_VALUE;
    }
}

EMU_API CUresult cuMemPoolGetAttribute(CUmemoryPool p, int attr, void* value) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    Device* d = device_of_pool(p);
    if (!d || !value) return CUDA_ERROR_INVALID_VALUE;
    std::lock_guard<std::mutex> g(memory_lock());
    uint64_t* out = static_cast<uint64_t*>(value);
    switch (attr) {
        case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *out = d->pool.release_threshold; return CUDA_SUCCESS;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: *out = d->reserved; return CUDA_SUCCESS;
        case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH: *out = d->pool.reserved_high; return CUDA_SUCCESS;
        case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *out = d->live; return CUDA_SUCCESS;
        case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *out = d->pool.used_high; return CUDA_SUCCESS;
        case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
        case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
            *static_cast<int*>(value) = 1;
            return CUDA_SUCCESS;
        default:
            return CUDA_ERROR_INVALID_VALUE;
    }
}

EMU_API CUresult cuMemHostAlloc(void** out, size_t bytes, unsigned flags) {
    Context* c;
    if (CUresult r = current_ctx(&c)) return r;
    if (!out || (flags & ~0xfu)) return CUDA_ERROR_INVALID_VALUE;
    return host_alloc(bytes, out);
}

EMU_API CUresult cuMemAllocHost_v2(void** out, size_t bytes) { return cuMemHostAlloc(out, bytes, 0); }

EMU_API CUresult cuMemFreeHost(void* p) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    return host_free(p);
}

// Host to device. From page-locked memory the copy reads its source when the stream runs
// it, as DMA does; from pageable memory, small copies are staged at the call and large
// ones block until done (implicit host waits).
static CUresult htod(CUdeviceptr dst, const void* src, size_t n, CUstream h, bool async) {
    Stream* s;
    if (CUresult r = stream_of(h, &s)) return r;
    if (n == 0) return CUDA_SUCCESS;
    if (!src || !device_range(dst, n)) return CUDA_ERROR_INVALID_VALUE;
    void* d = reinterpret_cast<void*>(dst);
    if (is_pinned(src, n)) {
        count(&EspalierCudaEmuStats::pinned_uploads);
        count(&EspalierCudaEmuStats::pinned_upload_bytes, n);
        uint64_t seq = s->enqueue([d, src, n] { memcpy(d, src, n); });
        if (!async) {
            host_wait(s, seq, false);
            return after_wait(s->ctx);
        }
        return CUDA_SUCCESS;
    }
    count(&EspalierCudaEmuStats::pageable_uploads);
    count(&EspalierCudaEmuStats::pageable_upload_bytes, n);
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    uint64_t seq = s->enqueue([d, staged] { memcpy(d, staged->data(), staged->size()); });
    if (n > PAGEABLE_STAGING) {
        host_wait(s, seq, async);
        return after_wait(s->ctx);
    }
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream h) {
    return htod(dst, src, n, h, true);
}

EMU_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
    return htod(dst, src, n, nullptr, false);
}

// Device to host: into pageable memory the call returns once the copy ran.
static CUresult dtoh(void* dst, CUdeviceptr src, size_t n, CUstream h, bool async) {
    Stream* s;
    if (CUresult r = stream_of(h, &s)) return r;
    if (n == 0) return CUDA_SUCCESS;
    if (!dst || !device_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
    count(&EspalierCudaEmuStats::readbacks);
    const void* from = reinterpret_cast<const void*>(src);
    uint64_t seq = s->enqueue([dst, from, n] { memcpy(dst, from, n); });
    if (!async || !is_pinned(dst, n)) {
        host_wait(s, seq, false);
        return after_wait(s->ctx);
    }
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream h) {
    return dtoh(dst, src, n, h, true);
}

EMU_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) { return dtoh(dst, src, n, nullptr, false); }

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h, bool async) {
    Stream* s;
    if (CUresult r = stream_of(h, &s)) return r;
    if (n == 0) return CUDA_SUCCESS;
    if (!device_range(dst, n) || !device_range(src, n)) return CUDA_ERROR_INVALID_VALUE;
    void* d = reinterpret_cast<void*>(dst);
    const void* from = reinterpret_cast<const void*>(src);
    uint64_t seq = s->enqueue([d, from, n] { memmove(d, from, n); });
    (void)seq;
    (void)async;  // device-to-device copies never block the host
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h) {
    return dtod(dst, src, n, h, true);
}

EMU_API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) { return dtod(dst, src, n, nullptr, false); }

static CUresult memset_words(CUdeviceptr dst, uint32_t word, unsigned size, size_t n, CUstream h) {
    Stream* s;
    if (CUresult r = stream_of(h, &s)) return r;
    if (n == 0) return CUDA_SUCCESS;
    if (!device_range(dst, n * size)) return CUDA_ERROR_INVALID_VALUE;
    if (size == 4 && (dst & 3)) return CUDA_ERROR_INVALID_VALUE;
    void* d = reinterpret_cast<void*>(dst);
    s->enqueue([d, word, size, n] {
        if (size == 1) {
            memset(d, (int)(word & 0xff), n);
        } else {
            uint32_t* w = static_cast<uint32_t*>(d);
            for (size_t i = 0; i < n; i++) w[i] = word;
        }
    });
    return CUDA_SUCCESS;
}

EMU_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream h) { return memset_words(d, v, 1, n, h); }
EMU_API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return memset_words(d, v, 1, n, nullptr); }
EMU_API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream h) { return memset_words(d, v, 4, n, h); }
EMU_API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned v, size_t n) { return memset_words(d, v, 4, n, nullptr); }

// ---- modules and launches ---------------------------------------------------------------

// The image the emulated NVRTC makes (nvrtc.cpp): a tag, the kernel file's stem, and the
// architecture it was compiled for.
constexpr char IMAGE_TAG[] = "ESPALIER-CUDA-EMU-CUBIN";
constexpr size_t MODULE_BYTES = 64 * 1024;

EMU_API CUresult cuModuleLoadData(CUmodule* out, const void* image) {
    Context* c;
    if (CUresult r = current_ctx(&c)) return r;
    if (!out || !image) return CUDA_ERROR_INVALID_VALUE;
    const char* p = static_cast<const char*>(image);
    if (strncmp(p, IMAGE_TAG, sizeof IMAGE_TAG) != 0) {
        fprintf(stderr, "espalier CUDA emulator: cuModuleLoadData: not an image of the emulated NVRTC "
                        "(the emulator runs only the kernels compiled into it)\n");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    const char* stem = p + sizeof IMAGE_TAG;
    const char* arch = stem + strlen(stem) + 1;
    if (strcmp(arch, "90") != 0) return CUDA_ERROR_NO_BINARY_FOR_GPU;  // CUBIN for another GPU
    const KernelFile* f = find_file(stem);
    if (!f) return CUDA_ERROR_INVALID_IMAGE;
    // A module's code and constants take device memory (the emulator's model: 64 KiB).
    uintptr_t code;
    if (CUresult r = allocate(c, MODULE_BYTES, false, nullptr, &code)) return r;
    Module* m = new Module{c, f, code};
    modules().add(m);
    *out = m;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuModuleLoadDataEx(CUmodule* out, const void* image, unsigned, void*, void**) {
    return cuModuleLoadData(out, image);
}

EMU_API CUresult cuModuleUnload(CUmodule m) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!m || !modules().remove(m)) return CUDA_ERROR_INVALID_HANDLE;
    m->ctx->synchronize();  // queued launches may still run its code
    release(m->code, nullptr);
    // Functions of the module stay valid for launches already queued; the handle is leaked
    // deliberately (a few bytes per module, modules are loaded once per process).
    return CUDA_SUCCESS;
}

EMU_API CUresult cuModuleGetFunction(CUfunction* out, CUmodule m, const char* name) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!m || !modules().has(m)) return CUDA_ERROR_INVALID_HANDLE;
    if (!out || !name) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < m->file->count; i++) {
        if (strcmp(m->file->entries[i].name, name) == 0) {
            Function* f = new Function{m, &m->file->entries[i]};
            functions().add(f);
            *out = f;
            return CUDA_SUCCESS;
        }
    }
    return CUDA_ERROR_NOT_FOUND;
}

EMU_API CUresult cuFuncGetAttribute(int* value, int attrib, CUfunction f) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!f || !functions().has(f)) return CUDA_ERROR_INVALID_HANDLE;
    if (!value) return CUDA_ERROR_INVALID_VALUE;
    switch (attrib) {
        case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; return CUDA_SUCCESS;
        case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *value = 0; return CUDA_SUCCESS;
        case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *value = 0; return CUDA_SUCCESS;
        case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *value = 0; return CUDA_SUCCESS;
        case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = 32; return CUDA_SUCCESS;
        case CU_FUNC_ATTRIBUTE_PTX_VERSION: *value = 90; return CUDA_SUCCESS;
        case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = 90; return CUDA_SUCCESS;
        case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = f->max_dynamic_smem; return CUDA_SUCCESS;
        default: return CUDA_ERROR_INVALID_VALUE;
    }
}

EMU_API CUresult cuFuncSetAttribute(CUfunction f, int attrib, int value) {
    if (!initialised) return CUDA_ERROR_NOT_INITIALIZED;
    if (!f || !functions().has(f)) return CUDA_ERROR_INVALID_HANDLE;
    if (attrib != CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) return CUDA_ERROR_INVALID_VALUE;
    if (value < 0 || value > 232448) return CUDA_ERROR_INVALID_VALUE;
    f->max_dynamic_smem = value;
    return CUDA_SUCCESS;
}

EMU_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                unsigned bz, unsigned smem, CUstream h, void** params, void** extra) {
    Stream* s;
    if (CUresult r = stream_of(h, &s)) return r;
    if (!f || !functions().has(f)) return CUDA_ERROR_INVALID_HANDLE;
    if (f->module->ctx != s->ctx) return CUDA_ERROR_INVALID_CONTEXT;
    // The launch limits of the device.
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
    if (bx > 1024 || by > 1024 || bz > 64 || (uint64_t)bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
    if (gx > 2147483647u || gy > 65535 || gz > 65535) return CUDA_ERROR_INVALID_VALUE;
    if ((int)smem > f->max_dynamic_smem) return CUDA_ERROR_INVALID_VALUE;
    if (extra) return CUDA_ERROR_NOT_SUPPORTED;
    const KernelEntry* k = f->entry;
    if (k->nparams > 0 && !params) return CUDA_ERROR_INVALID_VALUE;
    // The arguments are copied at the call, as the driver does.
    std::vector<size_t> offsets(k->nparams);
    size_t total = 0;
    for (unsigned i = 0; i < k->nparams; i++) {
        offsets[i] = total;
        total += (k->sizes[i] + 15) & ~size_t(15);
    }
    auto storage = std::make_shared<std::vector<unsigned char>>(total + 16);
    auto ptrs = std::make_shared<std::vector<void*>>(k->nparams);
    for (unsigned i = 0; i < k->nparams; i++) {
        if (!params[i]) return CUDA_ERROR_INVALID_VALUE;
        memcpy(storage->data() + offsets[i], params[i], k->sizes[i]);
        (*ptrs)[i] = storage->data() + offsets[i];
    }
    std::string name = std::string(f->module->file->stem) + "::" + k->name;
    Context* ctx = s->ctx;
    s->enqueue([k, ptrs, storage, gx, gy, gz, bx, by, bz, name, ctx] {
        (void)storage;  // holds the argument values `ptrs` points to
        KernelCall call{k->invoke, k->fn, ptrs->data(), {gx, gy, gz}, {bx, by, bz}, name.c_str()};
        const uint64_t blocks = (uint64_t)gx * gy * gz;
        std::mutex m;
        std::string first_error;
        parallel_for(blocks, [&](uint64_t b) {
            std::string err;
            if (run_block(call, b, &err)) return true;
            std::lock_guard<std::mutex> g(m);
            if (first_error.empty()) {
                char where[96];
                snprintf(where, sizeof where, " in block (%llu,%llu,%llu)", (unsigned long long)(b % gx),
                         (unsigned long long)((b / gx) % gy), (unsigned long long)(b / ((uint64_t)gx * gy)));
                first_error = err + where;
            }
            return false;
        });
        count(&EspalierCudaEmuStats::launches);
        count(&EspalierCudaEmuStats::blocks, blocks);
        if (!first_error.empty()) ctx->fault(CUDA_ERROR_ILLEGAL_INSTRUCTION, "kernel " + name + ": " + first_error);
    });
    return CUDA_SUCCESS;
}

// ---- errors -----------------------------------------------------------------------------

EMU_API CUresult cuGetErrorName(CUresult r, const char** out) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = result_name(r);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EMU_API CUresult cuGetErrorString(CUresult r, const char** out) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    *out = result_string(r);
    return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- the emulator's own interface (tests) -----------------------------------------------

// Copies the counters into `out` (at most `size` bytes of it); returns the bytes written.
EMU_API size_t espalier_cuda_emu_stats(EspalierCudaEmuStats* out, size_t size) {
    Stats& s = stats();
    std::lock_guard<std::mutex> g(s.m);
    size_t n = size < sizeof(EspalierCudaEmuStats) ? size : sizeof(EspalierCudaEmuStats);
    memcpy(out, &s.s, n);
    return n;
}

// Sets the delay each stream waits before running each queued item; returns the previous.
EMU_API unsigned espalier_cuda_emu_set_op_delay_us(unsigned us) { return op_delay_us.exchange(us); }

// The capacity of every emulated device in bytes (ESPALIER_CUDA_EMU_MEM).
EMU_API unsigned long long espalier_cuda_emu_capacity() { return config().capacity; }
