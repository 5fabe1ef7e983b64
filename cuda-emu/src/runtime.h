// The emulated device: its properties, memory (allocations, the stream-ordered pool, pinned
// host memory), streams and events, kernel modules, and the host threads that run blocks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fiber.h"
#include "registry.h"
#include "types.h"

// What the emulator counts; read by tests through `espalier_cuda_emu_stats`. The layout only
// grows at its end; the caller passes the size it knows.
struct EspalierCudaEmuStats {
    uint64_t launches;             // kernels run
    uint64_t blocks;               // blocks run
    uint64_t host_waits;           // API calls that blocked the host until device work ran
    uint64_t implicit_waits;       // of those, calls that look asynchronous (see README)
    uint64_t spin_waits;           // waits a real driver spins a core through
    uint64_t pinned_uploads;       // host-to-device copies from page-locked memory
    uint64_t pageable_uploads;     // host-to-device copies from pageable memory
    uint64_t pinned_upload_bytes;
    uint64_t pageable_upload_bytes;
    uint64_t readbacks;            // device-to-host copies
    uint64_t legacy_stream_ops;    // work queued on the legacy default (NULL) stream
    uint64_t events_created;
    uint64_t events_live;
    uint64_t device_bytes_live;    // allocated and not freed
    uint64_t device_bytes_reserved;  // held from the device: live + freed, kept by the pool
    uint64_t device_bytes_peak;    // most ever reserved
    uint64_t out_of_memory;        // allocations refused for capacity
    uint64_t gemms;                // cuBLAS GEMM calls run
};

namespace emu {

struct Config {
    int devices = 1;
    uint64_t capacity = 80ull << 30;  // ESPALIER_CUDA_EMU_MEM
    unsigned threads = 1;             // ESPALIER_CUDA_EMU_THREADS: host threads running blocks
    bool poison = true;               // ESPALIER_CUDA_EMU_POISON: new allocations hold NaNs
};
const Config& config();

// Runs `n` items on the emulator's host threads (the calling thread helps); `f(i)` returns
// false to stop early. One parallel run at a time: launches from several streams take turns.
void parallel_for(uint64_t n, const std::function<bool(uint64_t)>& f);

struct Stats {
    std::mutex m;
    EspalierCudaEmuStats s{};
};
Stats& stats();
void count(uint64_t EspalierCudaEmuStats::* field, uint64_t by = 1);

// The delay each stream waits before it runs each queued item (ESPALIER_CUDA_EMU_DELAY_US or
// espalier_cuda_emu_set_op_delay_us): a slow device, so that host work racing the device
// loses the race.
extern std::atomic<unsigned> op_delay_us;

struct Context;

struct Stream {
    Context* ctx;
    unsigned flags;
    bool legacy;
    std::mutex m;
    std::condition_variable cv_work, cv_done;
    std::deque<std::pair<uint64_t, std::function<void()>>> queue;
    uint64_t submitted = 0;
    uint64_t completed = 0;
    bool stop = false;
    std::thread worker;

    Stream(Context* c, unsigned f, bool is_legacy);
    ~Stream();
    // Queues `op`; returns its sequence number. Applies the legacy stream's implicit
    // ordering against blocking streams.
    uint64_t enqueue(std::function<void()> op);
    uint64_t enqueue_raw(std::function<void()> op);
    bool is_done(uint64_t seq);
    void wait(uint64_t seq);  // blocks the host until item `seq` ran
    uint64_t last();          // the sequence number of the last item queued
    void run();
};

struct Event {
    Context* ctx;
    unsigned flags;
    std::mutex m;
    Stream* stream = nullptr;  // where it was last recorded
    uint64_t seq = 0;
    double time_ms = 0;
};

struct Pool;

struct Context {
    int device;
    unsigned flags = 0;
    int refs = 0;
    std::atomic<unsigned> sticky{CUDA_SUCCESS};  // a kernel fault ends the context
    std::string sticky_msg;
    std::unique_ptr<Stream> legacy;
    std::mutex m;
    std::set<Stream*> streams;  // created streams, for context synchronisation
    Pool* pool = nullptr;
    explicit Context(int d);
    void fault(CUresult code, const std::string& msg);
    void synchronize();  // every stream, legacy included
};

// Device memory. Each allocation is its own mapping followed by an inaccessible page, so a
// read or write past its (256-byte rounded) end faults.
struct Allocation {
    uintptr_t ptr = 0;
    size_t bytes = 0;
    size_t rounded = 0;
    void* map = nullptr;
    size_t map_len = 0;
    int device = 0;
    Pool* pool = nullptr;  // null for cuMemAlloc
    bool freed = false;      // cuMemFreeAsync was called
    bool free_ran = false;   // ... and its stream reached the free
    bool reclaimed = false;  // reused for another allocation before the free ran: unmapped then
    Stream* free_stream = nullptr;
    uint64_t free_seq = 0;
};

struct Pool {
    int device;
    uint64_t release_threshold = 0;
    uint64_t reserved_high = 0;
    uint64_t used_high = 0;
};

struct Device {
    int index;
    uint64_t capacity;
    uint64_t reserved = 0;  // mapped for allocations, freed pool blocks included
    uint64_t live = 0;      // not freed
    Pool pool;
    Context* primary = nullptr;
};

Device* device(int ordinal);
std::mutex& memory_lock();

// Allocates `bytes` on the device of `ctx`; from its pool (stream-ordered on `stream`) when
// `pooled`. Frees pool blocks that can be reused to make room; CUDA_ERROR_OUT_OF_MEMORY past
// the capacity.
CUresult allocate(Context* ctx, size_t bytes, bool pooled, Stream* stream, uintptr_t* out);
// Frees an allocation: at once (cuMemFree) or when `stream` reaches this point.
CUresult release(uintptr_t ptr, Stream* stream);
// Unmaps freed pool blocks whose free has run, down to `keep` reserved bytes.
void trim(Device* d, uint64_t keep);
// True when [ptr, ptr + bytes) lies inside one device allocation: one not freed, for work
// queued now (`queued`), or one whose free the stream has not reached yet, for work running
// now (stream order lets a buffer be freed while queued work still reads it).
bool device_range(uintptr_t ptr, size_t bytes, bool queued = true);
// Page-locked host memory.
CUresult host_alloc(size_t bytes, void** out);
CUresult host_free(void* p);
bool is_pinned(const void* p, size_t bytes);

// Handles: every live handle is registered, so a stale or foreign one is refused.
template <typename T>
struct Registry {
    std::mutex m;
    std::set<T*> live;
    void add(T* p) {
        std::lock_guard<std::mutex> g(m);
        live.insert(p);
    }
    bool has(T* p) {
        std::lock_guard<std::mutex> g(m);
        return live.count(p) != 0;
    }
    bool remove(T* p) {
        std::lock_guard<std::mutex> g(m);
        return live.erase(p) != 0;
    }
};
Registry<Stream>& streams();
Registry<Event>& events();

struct Module {
    Context* ctx;
    const KernelFile* file;
    uintptr_t code = 0;  // the device memory its code takes
};
Registry<Module>& modules();

struct Function {
    Module* module;
    const KernelEntry* entry;
    int max_dynamic_smem = 48 * 1024;
};
Registry<Function>& functions();

// The calling thread's current context.
Context*& current();

// Names used in messages.
const char* result_name(CUresult r);
const char* result_string(CUresult r);

}  // namespace emu
