#include "runtime.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace emu {

namespace {

uint64_t parse_bytes(const char* v, uint64_t fallback) {
    if (!v || !*v) return fallback;
    char* end = nullptr;
    double x = strtod(v, &end);
    if (end == v || x <= 0) return fallback;
    std::string unit(end);
    while (!unit.empty() && unit[0] == ' ') unit.erase(0, 1);
    double mult = 1;
    if (unit == "" || unit == "B") mult = 1;
    else if (unit == "KiB" || unit == "K") mult = 1024.0;
    else if (unit == "MiB" || unit == "M") mult = 1024.0 * 1024;
    else if (unit == "GiB" || unit == "G") mult = 1024.0 * 1024 * 1024;
    else if (unit == "TiB" || unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
    else {
        fprintf(stderr, "espalier CUDA emulator: ESPALIER_CUDA_EMU_MEM=%s: unknown unit, using the default\n", v);
        return fallback;
    }
    return (uint64_t)(x * mult);
}

}  // namespace

const Config& config() {
    static const Config c = [] {
        Config c;
        if (const char* v = getenv("ESPALIER_CUDA_EMU_DEVICES")) c.devices = atoi(v) > 0 ? atoi(v) : 1;
        c.capacity = parse_bytes(getenv("ESPALIER_CUDA_EMU_MEM"), c.capacity);
        unsigned hw = std::thread::hardware_concurrency();
        c.threads = hw ? hw : 1;
        if (const char* v = getenv("ESPALIER_CUDA_EMU_THREADS")) c.threads = atoi(v) > 0 ? atoi(v) : 1;
        if (const char* v = getenv("ESPALIER_CUDA_EMU_POISON")) c.poison = strcmp(v, "0") != 0;
        return c;
    }();
    return c;
}

std::atomic<unsigned> op_delay_us{[] {
    const char* v = getenv("ESPALIER_CUDA_EMU_DELAY_US");
    return v ? (unsigned)strtoul(v, nullptr, 10) : 0u;
}()};

Stats& stats() {
    static Stats* s = new Stats();
    return *s;
}

void count(uint64_t EspalierCudaEmuStats::* field, uint64_t by) {
    Stats& s = stats();
    std::lock_guard<std::mutex> g(s.m);
    s.s.*field += by;
}

// ---- host threads that run blocks -------------------------------------------------------

namespace {

struct Workers {
    std::mutex run_lock;  // one parallel run at a time
    std::mutex m;
    std::condition_variable cv_start, cv_end;
    const std::function<bool(uint64_t)>* job = nullptr;
    uint64_t total = 0;
    std::atomic<uint64_t> next{0};
    std::atomic<bool> stop_early{false};
    uint64_t generation = 0;
    unsigned busy = 0;
    std::vector<std::thread> threads;

    Workers() {
        for (unsigned i = 1; i < config().threads; i++) {
            threads.emplace_back([this] { loop(); });
            threads.back().detach();
        }
    }

    void work(const std::function<bool(uint64_t)>& f) {
        for (;;) {
            if (stop_early.load(std::memory_order_relaxed)) return;
            uint64_t i = next.fetch_add(1);
            if (i >= total) return;
            if (!f(i)) stop_early = true;
        }
    }

    void loop() {
        uint64_t seen = 0;
        for (;;) {
            const std::function<bool(uint64_t)>* f;
            {
                std::unique_lock<std::mutex> g(m);
                cv_start.wait(g, [&] { return generation != seen; });
                seen = generation;
                // A helper that wakes after the run it was woken for has ended (the
                // caller took every item and found no helper busy) must not join it:
                // its job is gone.
                f = job;
                if (f == nullptr) continue;
                busy++;
            }
            work(*f);
            {
                std::lock_guard<std::mutex> g(m);
                busy--;
            }
            cv_end.notify_all();
        }
    }

    void run(uint64_t n, const std::function<bool(uint64_t)>& f) {
        std::lock_guard<std::mutex> one(run_lock);
        if (threads.empty() || n == 1) {
            for (uint64_t i = 0; i < n; i++)
                if (!f(i)) return;
            return;
        }
        {
            std::lock_guard<std::mutex> g(m);
            job = &f;
            total = n;
            next = 0;
            stop_early = false;
            generation++;
        }
        cv_start.notify_all();
        work(f);
        std::unique_lock<std::mutex> g(m);
        // Every helper that joined this generation has left it once `busy` is 0 and the
        // items are all taken.
        cv_end.wait(g, [&] { return busy == 0; });
        job = nullptr;
    }
};

Workers& workers() {
    static Workers* w = new Workers();  // never destroyed: its threads outlive main
    return *w;
}

}  // namespace

void parallel_for(uint64_t n, const std::function<bool(uint64_t)>& f) {
    if (n == 0) return;
    workers().run(n, f);
}

// ---- streams ----------------------------------------------------------------------------

Stream::Stream(Context* c, unsigned f, bool is_legacy) : ctx(c), flags(f), legacy(is_legacy) {
    worker = std::thread([this] { run(); });
}

Stream::~Stream() {
    {
        std::lock_guard<std::mutex> g(m);
        stop = true;
    }
    cv_work.notify_all();
    if (worker.joinable()) worker.join();
}

void Stream::run() {
    for (;;) {
        std::pair<uint64_t, std::function<void()>> item;
        {
            std::unique_lock<std::mutex> g(m);
            cv_work.wait(g, [&] { return stop || !queue.empty(); });
            if (queue.empty()) return;  // stopping, nothing left
            item = std::move(queue.front());
            queue.pop_front();
        }
        unsigned delay = op_delay_us.load(std::memory_order_relaxed);
        if (delay) std::this_thread::sleep_for(std::chrono::microseconds(delay));
        // After a fault the context runs nothing more; items still complete, so that a
        // synchronisation returns the fault instead of waiting forever.
        if (ctx->sticky.load() == CUDA_SUCCESS) item.second();
        {
            std::lock_guard<std::mutex> g(m);
            completed = item.first;
        }
        cv_done.notify_all();
    }
}

uint64_t Stream::enqueue_raw(std::function<void()> op) {
    uint64_t seq;
    {
        std::lock_guard<std::mutex> g(m);
        seq = ++submitted;
        queue.emplace_back(seq, std::move(op));
    }
    cv_work.notify_one();
    return seq;
}

uint64_t Stream::enqueue(std::function<void()> op) {
    // The legacy default stream waits for all work of the context's blocking streams, and
    // they wait for it (CUDA's implicit synchronisation); non-blocking streams take no part.
    if (legacy) {
        count(&EspalierCudaEmuStats::legacy_stream_ops);
        std::vector<std::pair<Stream*, uint64_t>> deps;
        {
            std::lock_guard<std::mutex> g(ctx->m);
            for (Stream* s : ctx->streams)
                if (!(s->flags & CU_STREAM_NON_BLOCKING)) deps.emplace_back(s, s->last());
        }
        for (auto& d : deps)
            if (d.second) enqueue_raw([d] { d.first->wait(d.second); });
    } else if (!(flags & CU_STREAM_NON_BLOCKING)) {
        Stream* l = ctx->legacy.get();
        uint64_t seq = l->last();
        if (seq) enqueue_raw([l, seq] { l->wait(seq); });
    }
    return enqueue_raw(std::move(op));
}

uint64_t Stream::last() {
    std::lock_guard<std::mutex> g(m);
    return submitted;
}

bool Stream::is_done(uint64_t seq) {
    std::lock_guard<std::mutex> g(m);
    return completed >= seq;
}

void Stream::wait(uint64_t seq) {
    std::unique_lock<std::mutex> g(m);
    cv_done.wait(g, [&] { return completed >= seq; });
}

// ---- contexts ---------------------------------------------------------------------------

Context::Context(int d) : device(d) { legacy.reset(new Stream(this, 0, true)); }

void Context::fault(CUresult code, const std::string& msg) {
    unsigned expected = CUDA_SUCCESS;
    if (sticky.compare_exchange_strong(expected, code)) {
        sticky_msg = msg;
        fprintf(stderr, "espalier CUDA emulator: %s (%s); the context is unusable from here on\n",
                msg.c_str(), result_name(code));
    }
}

void Context::synchronize() {
    std::vector<std::pair<Stream*, uint64_t>> all;
    {
        std::lock_guard<std::mutex> g(m);
        for (Stream* s : streams) all.emplace_back(s, s->last());
    }
    all.emplace_back(legacy.get(), legacy->last());
    for (auto& p : all) p.first->wait(p.second);
}

Context*& current() {
    static thread_local Context* c = nullptr;
    return c;
}

// The singletons below are never destroyed: stream and block threads may still run when
// the process exits.
Registry<Stream>& streams() {
    static Registry<Stream>* r = new Registry<Stream>();
    return *r;
}
Registry<Event>& events() {
    static Registry<Event>* r = new Registry<Event>();
    return *r;
}
Registry<Module>& modules() {
    static Registry<Module>* r = new Registry<Module>();
    return *r;
}
Registry<Function>& functions() {
    static Registry<Function>* r = new Registry<Function>();
    return *r;
}

// ---- memory -----------------------------------------------------------------------------

namespace {

std::map<uintptr_t, Allocation>& allocations() {
    static std::map<uintptr_t, Allocation>* m = new std::map<uintptr_t, Allocation>();
    return *m;
}
std::map<uintptr_t, size_t>& pinned() {
    static std::map<uintptr_t, size_t>* m = new std::map<uintptr_t, size_t>();
    return *m;
}

size_t page() {
    static const size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}

void note_reserved(Device* d) {
    Stats& s = stats();
    std::lock_guard<std::mutex> g(s.m);
    s.s.device_bytes_reserved = 0;
    s.s.device_bytes_live = 0;
    for (int i = 0; i < config().devices; i++) {
        s.s.device_bytes_reserved += device(i)->reserved;
        s.s.device_bytes_live += device(i)->live;
    }
    if (s.s.device_bytes_reserved > s.s.device_bytes_peak) s.s.device_bytes_peak = s.s.device_bytes_reserved;
    if (d->reserved > d->pool.reserved_high) d->pool.reserved_high = d->reserved;
    if (d->live > d->pool.used_high) d->pool.used_high = d->live;
}

void unmap(std::map<uintptr_t, Allocation>::iterator it) {
    munmap(it->second.map, it->second.map_len);
    allocations().erase(it);
}

// Gives back the device memory of freed pool blocks of `d` that a new allocation on `stream`
// may reuse (their free ran, or was queued on `stream`, which reaches it before anything it
// queues later) until `need` more bytes fit. A block whose free has not run yet stays mapped
// until it runs. Caller holds the lock.
bool make_room(Device* d, uint64_t need, Stream* stream) {
    auto& all = allocations();
    for (auto it = all.begin(); it != all.end() && d->reserved + need > d->capacity;) {
        Allocation& a = it->second;
        auto next = std::next(it);
        if (a.pool == &d->pool && a.freed && !a.reclaimed && (a.free_ran || a.free_stream == stream)) {
            d->reserved -= a.rounded;
            if (a.free_ran) unmap(it);
            else a.reclaimed = true;
        }
        it = next;
    }
    return d->reserved + need <= d->capacity;
}

// Runs on the stream when it reaches a cuMemFreeAsync.
void on_free_reached(uintptr_t ptr) {
    std::lock_guard<std::mutex> g(memory_lock());
    auto it = allocations().find(ptr);
    if (it == allocations().end()) return;
    Allocation& a = it->second;
    a.free_ran = true;
    // Poisoned, so that a kernel reading it after its free sees NaNs, not the old values.
    if (config().poison) memset(reinterpret_cast<void*>(a.ptr), 0xff, a.rounded);
    if (a.reclaimed) unmap(it);
}

}  // namespace

std::mutex& memory_lock() {
    static std::mutex* m = new std::mutex();
    return *m;
}

Device* device(int ordinal) {
    // Never destroyed: stream threads may outlive exit.
    static std::vector<Device*>& devs = *[] {
        auto* v = new std::vector<Device*>();
        for (int i = 0; i < config().devices; i++) {
            Device* d = new Device();
            d->index = i;
            d->capacity = config().capacity;
            d->pool.device = i;
            v->push_back(d);
        }
        return v;
    }();
    if (ordinal < 0 || ordinal >= (int)devs.size()) return nullptr;
    return devs[ordinal];
}

CUresult allocate(Context* ctx, size_t bytes, bool pooled, Stream* stream, uintptr_t* out) {
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    Device* d = device(ctx->device);
    const size_t rounded = (bytes + 255) & ~size_t(255);
    const size_t body = (rounded + page() - 1) & ~(page() - 1);
    std::lock_guard<std::mutex> g(memory_lock());
    if (!make_room(d, rounded, pooled ? stream : nullptr)) {
        count(&EspalierCudaEmuStats::out_of_memory);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    void* map = mmap(nullptr, body + page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    mprotect(static_cast<char*>(map) + body, page(), PROT_NONE);
    Allocation a;
    a.ptr = reinterpret_cast<uintptr_t>(map) + body - rounded;
    a.bytes = bytes;
    a.rounded = rounded;
    a.map = map;
    a.map_len = body + page();
    a.device = ctx->device;
    a.pool = pooled ? &d->pool : nullptr;
    if (config().poison) memset(reinterpret_cast<void*>(a.ptr), 0xff, rounded);
    allocations()[a.ptr] = a;
    d->reserved += rounded;
    d->live += rounded;
    note_reserved(d);
    *out = a.ptr;
    return CUDA_SUCCESS;
}

CUresult release(uintptr_t ptr, Stream* stream) {
    std::lock_guard<std::mutex> g(memory_lock());
    auto it = allocations().find(ptr);
    if (it == allocations().end() || it->second.freed) return CUDA_ERROR_INVALID_VALUE;
    Allocation& a = it->second;
    Device* d = device(a.device);
    d->live -= a.rounded;
    if (!stream || !a.pool) {
        d->reserved -= a.rounded;
        unmap(it);
    } else {
        a.freed = true;
        a.free_stream = stream;
        a.free_seq = stream->enqueue_raw([ptr] { on_free_reached(ptr); });
    }
    note_reserved(d);
    return CUDA_SUCCESS;
}

void trim(Device* d, uint64_t keep) {
    std::lock_guard<std::mutex> g(memory_lock());
    auto& all = allocations();
    for (auto it = all.begin(); it != all.end() && d->reserved > keep;) {
        Allocation& a = it->second;
        auto next = std::next(it);
        if (a.pool == &d->pool && a.freed && a.free_ran) {
            d->reserved -= a.rounded;
            unmap(it);
        }
        it = next;
    }
    note_reserved(d);
}

bool device_range(uintptr_t ptr, size_t bytes, bool queued) {
    std::lock_guard<std::mutex> g(memory_lock());
    auto& all = allocations();
    auto it = all.upper_bound(ptr);
    if (it == all.begin()) return false;
    --it;
    const Allocation& a = it->second;
    const bool usable = queued ? !a.freed : !a.free_ran;
    return usable && ptr >= a.ptr && ptr + bytes <= a.ptr + a.rounded;
}

CUresult host_alloc(size_t bytes, void** out) {
    if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
    size_t len = (bytes + page() - 1) & ~(page() - 1);
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    std::lock_guard<std::mutex> g(memory_lock());
    pinned()[reinterpret_cast<uintptr_t>(p)] = len;
    *out = p;
    return CUDA_SUCCESS;
}

CUresult host_free(void* p) {
    std::lock_guard<std::mutex> g(memory_lock());
    auto it = pinned().find(reinterpret_cast<uintptr_t>(p));
    if (it == pinned().end()) return CUDA_ERROR_INVALID_VALUE;
    munmap(p, it->second);
    pinned().erase(it);
    return CUDA_SUCCESS;
}

bool is_pinned(const void* p, size_t bytes) {
    uintptr_t x = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> g(memory_lock());
    auto it = pinned().upper_bound(x);
    if (it == pinned().begin()) return false;
    --it;
    return x >= it->first && x + bytes <= it->first + it->second;
}

// ---- result names -----------------------------------------------------------------------

const char* result_name(CUresult r) {
    switch (r) {
#define N(x) \
    case x:  \
        return #x;
        N(CUDA_SUCCESS)
        N(CUDA_ERROR_INVALID_VALUE)
        N(CUDA_ERROR_OUT_OF_MEMORY)
        N(CUDA_ERROR_NOT_INITIALIZED)
        N(CUDA_ERROR_DEINITIALIZED)
        N(CUDA_ERROR_NO_DEVICE)
        N(CUDA_ERROR_INVALID_DEVICE)
        N(CUDA_ERROR_INVALID_IMAGE)
        N(CUDA_ERROR_INVALID_CONTEXT)
        N(CUDA_ERROR_NO_BINARY_FOR_GPU)
        N(CUDA_ERROR_INVALID_PTX)
        N(CUDA_ERROR_INVALID_HANDLE)
        N(CUDA_ERROR_NOT_FOUND)
        N(CUDA_ERROR_NOT_READY)
        N(CUDA_ERROR_ILLEGAL_ADDRESS)
        N(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES)
        N(CUDA_ERROR_ILLEGAL_INSTRUCTION)
        N(CUDA_ERROR_LAUNCH_FAILED)
        N(CUDA_ERROR_NOT_SUPPORTED)
        N(CUDA_ERROR_UNKNOWN)
#undef N
    }
    return nullptr;
}

const char* result_string(CUresult r) {
    switch (r) {
        case CUDA_SUCCESS: return "no error";
        case CUDA_ERROR_INVALID_VALUE: return "invalid argument";
        case CUDA_ERROR_OUT_OF_MEMORY: return "out of memory";
        case CUDA_ERROR_NOT_INITIALIZED: return "initialization error";
        case CUDA_ERROR_DEINITIALIZED: return "driver shutting down";
        case CUDA_ERROR_NO_DEVICE: return "no CUDA-capable device is detected";
        case CUDA_ERROR_INVALID_DEVICE: return "invalid device ordinal";
        case CUDA_ERROR_INVALID_IMAGE: return "device kernel image is invalid";
        case CUDA_ERROR_INVALID_CONTEXT: return "invalid device context";
        case CUDA_ERROR_NO_BINARY_FOR_GPU: return "no kernel image is available for execution on the device";
        case CUDA_ERROR_INVALID_PTX: return "a PTX JIT compilation failed";
        case CUDA_ERROR_INVALID_HANDLE: return "invalid resource handle";
        case CUDA_ERROR_NOT_FOUND: return "named symbol not found";
        case CUDA_ERROR_NOT_READY: return "device not ready";
        case CUDA_ERROR_ILLEGAL_ADDRESS: return "an illegal memory access was encountered";
        case CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES: return "too many resources requested for launch";
        case CUDA_ERROR_ILLEGAL_INSTRUCTION: return "an illegal instruction was encountered";
        case CUDA_ERROR_LAUNCH_FAILED: return "unspecified launch failure";
        case CUDA_ERROR_NOT_SUPPORTED: return "operation not supported";
        case CUDA_ERROR_UNKNOWN: return "unknown error";
    }
    return nullptr;
}

}  // namespace emu
