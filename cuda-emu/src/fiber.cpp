// Fibers and the block scheduler.
//
// A block's threads are fibers on one host thread, each with its own stack. The scheduler
// resumes ready fibers in turn; a fiber runs until it finishes or waits: at `__syncthreads`
// until every thread of the block has arrived, at a warp shuffle until the 32 lanes of its
// warp have. The last thread to arrive releases the others and goes on. When no fiber is
// ready and some have not finished, the block can never finish (on a GPU: a hang, or
// undefined behaviour): the launch fails with an error naming who waited where.
//
// A switch saves and restores only what the ABI asks a callee to keep (x86-64: rbx, rbp,
// r12-r15, the stack pointer, MXCSR and the x87 control word), a few nanoseconds, so a
// kernel whose lanes shuffle for every edge still runs at a useful speed. Other
// architectures use ucontext.

#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace emu {

thread_local Coords coords;

namespace {

#if defined(__x86_64__)
extern "C" void emu_fiber_switch(void** save_sp, void* to_sp);
asm(R"(
    .text
    .p2align 4
    .type emu_fiber_switch,@function
emu_fiber_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_fiber_switch,.-emu_fiber_switch
)");
#endif

enum State : uint8_t { Ready, AtWarp, AtBlock, Done };

constexpr unsigned MAX_THREADS = 1024;
constexpr unsigned WARP = 32;

size_t stack_bytes() {
    static const size_t bytes = [] {
        const char* v = getenv("ESPALIER_CUDA_EMU_STACK_KIB");
        size_t kib = v ? strtoull(v, nullptr, 10) : 0;
        return (kib >= 16 ? kib : 64) * 1024;
    }();
    return bytes;
}

struct Fiber {
#if defined(__x86_64__)
    void* sp = nullptr;
#else
    ucontext_t uc;
#endif
    uint3 tid;
    State state = Done;
};

struct Warp {
    unsigned size = 0;     // lanes in this warp (32 but in a last, partial warp)
    unsigned arrived = 0;  // lanes waiting at the current shuffle
    unsigned gen = 0;      // shuffles completed
    uint64_t slot[2][WARP];
};

// One host thread's fibers: stacks for up to 1024 threads, reused by every block it runs.
struct Scheduler {
    char* stacks = nullptr;
    size_t stride = 0;
    Fiber fibers[MAX_THREADS];
    Warp warps[MAX_THREADS / WARP];
    unsigned ready[MAX_THREADS];
    unsigned ready_head = 0, ready_len = 0;
    unsigned nthreads = 0, done = 0, block_arrived = 0, current = 0;
    const KernelCall* call = nullptr;
    std::string error;
    bool failed = false;
#if defined(__x86_64__)
    void* sched_sp = nullptr;
#else
    ucontext_t sched_uc;
#endif

    Scheduler() {
        const size_t page = (size_t)sysconf(_SC_PAGESIZE);
        stride = stack_bytes() + page;
        void* p = mmap(nullptr, stride * MAX_THREADS, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "espalier CUDA emulator: cannot map fiber stacks\n");
            abort();
        }
        stacks = static_cast<char*>(p);
        // A guard page below each stack: an overflow faults instead of writing into the
        // stack of the next fiber.
        for (unsigned i = 0; i < MAX_THREADS; i++) mprotect(stacks + i * stride, page, PROT_NONE);
    }

    char* stack_top(unsigned i) { return stacks + (i + 1) * stride; }

    void push_ready(unsigned i) {
        ready[(ready_head + ready_len) % MAX_THREADS] = i;
        ready_len++;
    }
    unsigned pop_ready() {
        unsigned i = ready[ready_head];
        ready_head = (ready_head + 1) % MAX_THREADS;
        ready_len--;
        return i;
    }

    void start(unsigned i);
    void resume(unsigned i);
    void yield();
    void fail(std::string msg);
    std::string describe_stall();
};

thread_local Scheduler* tl_sched = nullptr;

Scheduler& sched() {
    if (!tl_sched) tl_sched = new Scheduler();
    return *tl_sched;
}

[[noreturn]] void fiber_main() {
    Scheduler& s = *tl_sched;
    const KernelCall& c = *s.call;
    c.invoke(c.fn, c.params);
    Fiber& f = s.fibers[s.current];
    f.state = Done;
    s.done++;
#if defined(__x86_64__)
    emu_fiber_switch(&f.sp, s.sched_sp);
#else
    swapcontext(&f.uc, &s.sched_uc);
#endif
    abort();  // a finished fiber is never resumed
}

#if !defined(__x86_64__)
void fiber_main_uc() { fiber_main(); }
#endif

void Scheduler::start(unsigned i) {
    Fiber& f = fibers[i];
#if defined(__x86_64__)
    // The frame emu_fiber_switch pops: MXCSR/x87 control word, six callee-saved registers,
    // then the return address (fiber_main), with the stack aligned as after a call.
    uintptr_t top = reinterpret_cast<uintptr_t>(stack_top(i)) & ~uintptr_t(15);
    uint64_t* sp = reinterpret_cast<uint64_t*>(top);
    *--sp = 0;  // fiber_main's own (never used) return address
    *--sp = reinterpret_cast<uint64_t>(&fiber_main);
    for (int r = 0; r < 6; r++) *--sp = 0;
    uint32_t csr[2];
    asm volatile("stmxcsr %0" : "=m"(csr[0]));
    uint16_t cw;
    asm volatile("fnstcw %0" : "=m"(cw));
    csr[1] = cw;
    --sp;
    std::memcpy(sp, csr, 8);
    f.sp = sp;
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = stack_top(i) - stack_bytes();
    f.uc.uc_stack.ss_size = stack_bytes();
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, fiber_main_uc, 0);
#endif
    f.state = Ready;
}

void Scheduler::resume(unsigned i) {
    current = i;
    coords.thread_idx = fibers[i].tid;
#if defined(__x86_64__)
    emu_fiber_switch(&sched_sp, fibers[i].sp);
#else
    swapcontext(&sched_uc, &fibers[i].uc);
#endif
}

void Scheduler::yield() {
    Fiber& f = fibers[current];
#if defined(__x86_64__)
    emu_fiber_switch(&f.sp, sched_sp);
#else
    swapcontext(&f.uc, &sched_uc);
#endif
}

void Scheduler::fail(std::string msg) {
    if (!failed) {
        failed = true;
        error = std::move(msg);
    }
    // The block is abandoned: this fiber is never resumed.
    fibers[current].state = Done;
    yield();
    abort();
}

std::string fmt_tid(uint3 t) {
    char b[64];
    snprintf(b, sizeof b, "(%u,%u,%u)", t.x, t.y, t.z);
    return b;
}

std::string Scheduler::describe_stall() {
    unsigned at_block = 0, at_warp = 0, exited = 0;
    int first_block = -1, first_warp = -1, first_exit = -1;
    for (unsigned i = 0; i < nthreads; i++) {
        switch (fibers[i].state) {
            case AtBlock:
                at_block++;
                if (first_block < 0) first_block = (int)i;
                break;
            case AtWarp:
                at_warp++;
                if (first_warp < 0) first_warp = (int)i;
                break;
            case Done:
                exited++;
                if (first_exit < 0) first_exit = (int)i;
                break;
            default:
                break;
        }
    }
    char b[512];
    snprintf(b, sizeof b,
             "%u of %u threads wait at __syncthreads (first: thread %s), %u at a warp shuffle "
             "(first: thread %s), %u exited (first: thread %s): a barrier or shuffle not "
             "reached by every thread of its block or warp",
             at_block, nthreads, first_block >= 0 ? fmt_tid(fibers[first_block].tid).c_str() : "-",
             at_warp, first_warp >= 0 ? fmt_tid(fibers[first_warp].tid).c_str() : "-", exited,
             first_exit >= 0 ? fmt_tid(fibers[first_exit].tid).c_str() : "-");
    return b;
}

}  // namespace

void syncthreads() {
    Scheduler& s = *tl_sched;
    s.block_arrived++;
    if (s.block_arrived == s.nthreads) {
        s.block_arrived = 0;
        for (unsigned i = 0; i < s.nthreads; i++) {
            if (s.fibers[i].state == AtBlock) {
                s.fibers[i].state = Ready;
                s.push_ready(i);
            }
        }
        return;
    }
    s.fibers[s.current].state = AtBlock;
    s.yield();
}

uint64_t shfl(uint64_t bits, unsigned mask, Shfl kind, int arg, int width) {
    Scheduler& s = *tl_sched;
    const unsigned lane = s.current % WARP, w = s.current / WARP;
    Warp& warp = s.warps[w];
    if (mask != 0xffffffffu) {
        char b[160];
        snprintf(b, sizeof b,
                 "thread %s: a warp shuffle with mask %#x (the emulator runs full-warp shuffles only)",
                 fmt_tid(s.fibers[s.current].tid).c_str(), mask);
        s.fail(b);
    }
    if (warp.size != WARP) {
        char b[160];
        snprintf(b, sizeof b,
                 "thread %s: a full-mask warp shuffle in a warp of %u threads (a block of %u "
                 "threads is not a whole number of warps)",
                 fmt_tid(s.fibers[s.current].tid).c_str(), warp.size, s.nthreads);
        s.fail(b);
    }
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
        s.fail("a warp shuffle with a width that is not a power of two up to 32");
    }
    const unsigned g = warp.gen & 1;
    warp.slot[g][lane] = bits;
    warp.arrived++;
    if (warp.arrived == warp.size) {
        warp.arrived = 0;
        warp.gen++;
        for (unsigned i = w * WARP; i < w * WARP + warp.size; i++) {
            if (s.fibers[i].state == AtWarp) {
                s.fibers[i].state = Ready;
                s.push_ready(i);
            }
        }
    } else {
        s.fibers[s.current].state = AtWarp;
        s.yield();
    }
    const unsigned w1 = (unsigned)width - 1, seg = lane & ~w1, pos = lane & w1;
    unsigned src = lane;
    switch (kind) {
        case Shfl::Idx:
            src = seg + ((unsigned)arg & w1);
            break;
        case Shfl::Xor: {
            const unsigned t = lane ^ (unsigned)arg;
            if ((t & ~w1) == seg && t < WARP) src = t;
            break;
        }
        case Shfl::Down:
            if (pos + (unsigned)arg <= w1) src = lane + (unsigned)arg;
            break;
        case Shfl::Up:
            if (pos >= (unsigned)arg) src = lane - (unsigned)arg;
            break;
    }
    return warp.slot[g][src];
}

bool run_block(const KernelCall& call, uint64_t linear, std::string* error) {
    Scheduler& s = sched();
    const dim3 b = call.block, g = call.grid;
    s.call = &call;
    s.nthreads = b.x * b.y * b.z;
    s.done = 0;
    s.block_arrived = 0;
    s.failed = false;
    s.error.clear();
    s.ready_head = s.ready_len = 0;
    coords.block_dim = b;
    coords.grid_dim = g;
    coords.block_idx = {(unsigned)(linear % g.x), (unsigned)((linear / g.x) % g.y),
                        (unsigned)(linear / ((uint64_t)g.x * g.y))};
    const unsigned nwarps = (s.nthreads + WARP - 1) / WARP;
    for (unsigned w = 0; w < nwarps; w++) {
        Warp& warp = s.warps[w];
        warp.size = (w + 1) * WARP <= s.nthreads ? WARP : s.nthreads - w * WARP;
        warp.arrived = 0;
        warp.gen = 0;
    }
    for (unsigned i = 0; i < s.nthreads; i++) {
        s.fibers[i].tid = {i % b.x, (i / b.x) % b.y, i / (b.x * b.y)};
        s.start(i);
        s.push_ready(i);
    }
    while (s.ready_len > 0 && !s.failed) s.resume(s.pop_ready());
    if (s.failed) {
        *error = s.error;
        return false;
    }
    if (s.done < s.nthreads) {
        *error = s.describe_stall();
        return false;
    }
    return true;
}

}  // namespace emu
