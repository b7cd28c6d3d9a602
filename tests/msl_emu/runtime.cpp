// The msl_emu runtime: guarded buffers, the fiber scheduler of one threadgroup, barriers and
// simdgroup collectives with their checks, and launches over worker threads. Built once into
// libmsl_emu.so by driver.py and loaded (RTLD_GLOBAL) before any kernel.
//
// Barrier and collective sites: a kernel is compiled with frame pointers, so the return address
// of the runtime call and the return addresses up the kernel's own frames (to the entry stub,
// whose frame each fiber records) name the call site: the same line reached through two calls of
// a helper is two sites.
//
// Threadgroup memory accesses: kernels are compiled with -fsanitize=thread, and the __tsan_*
// hooks below (not the TSan runtime) see every load and store. Each byte of a threadgroup array
// remembers its last writer and its readers in the current barrier interval (epoch); the epoch
// advances only when a threadgroup_barrier carrying mem_flags::mem_threadgroup releases. Touching
// another thread's byte of the same epoch (read after write, write after read or write) is a data
// race. A simdgroup_load/store counts as the simdgroup's access.
//
// Fibers: makecontext creates each one (once per launch and worker); _setjmp/_longjmp switch
// (swapcontext would make a system call per switch). A fiber runs one thread of the threadgroup
// at a time and is reused for the next threadgroup on the same worker. Faults (guard pages,
// read-only inputs, fiber stack overflow) are caught on an alternate signal stack and reported
// with the faulting thread; the launch then fails cleanly.
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "emu_runtime.h"

using msl_emu::collective;
using msl_emu::thread_ids;

extern "C" {
int msl_emu_ftz = 0;
int msl_emu_mma_order = 0;
}

namespace {

const size_t kPage = 4096;
const size_t kStack = 64 * 1024;
const int kMaxThreads = 1024;

// ---- guarded buffers -----------------------------------------------------------------------------
struct Buffer {
    char *base;       // mapping: [guard page][slack + data][guard page]
    size_t mapped;
    char *data;       // ends exactly at the trailing guard page
    size_t bytes;
};
std::mutex buffers_lock;
std::vector<Buffer> buffers;

std::string describe_address(const void *addr) {
    const char *p = static_cast<const char *>(addr);
    std::lock_guard<std::mutex> g(buffers_lock);
    for (size_t i = 0; i < buffers.size(); i++) {
        const Buffer &b = buffers[i];
        if (p < b.base || p >= b.base + b.mapped) continue;
        char msg[256];
        long off = (long)(p - b.data);
        if (p >= b.data + b.bytes)
            snprintf(msg, sizeof msg, "past the end of a %zu-byte buffer (byte %ld, the guard page after it)", b.bytes,
                     off);
        else if (p < b.base + kPage)
            snprintf(msg, sizeof msg, "before the start of a %zu-byte buffer (byte %ld, the guard page before it)",
                     b.bytes, off);
        else if (p < b.data)
            snprintf(msg, sizeof msg, "before the start of a %zu-byte buffer (byte %ld)", b.bytes, off);
        else
            snprintf(msg, sizeof msg, "inside a read-only %zu-byte input buffer (byte %ld): a write to an input",
                     b.bytes, off);
        return msg;
    }
    return "";
}

// ---- scheduler state of one worker (one OS thread, one threadgroup at a time) --------------------
enum State { RUNNABLE, AT_BARRIER, AT_SIMD, DONE };

struct Fiber {
    jmp_buf ctx;
    char *stack_lo, *stack_hi;  // usable stack; a guard page lies below stack_lo
    State state;
    int line;                   // barrier or collective site while blocked
    uint64_t site;              // its call site (msl_emu_site)
    int flags;                  // a barrier's mem_flags
    char *entry_frame;          // the entry stub's frame: call sites are walked up to it
    int index;                  // thread index in the threadgroup
    thread_ids ids;
    collective *posted;
};

struct Launch;

// One threadgroup array and the shadow of each byte: who wrote it and who read it, in which epoch.
const int kSeveral = -2;        // more than one reader in the epoch
const int kSimdBase = 1 << 20;  // accessor ids of simdgroup collectives: kSimdBase + simdgroup
struct Shadow {
    uint32_t w_epoch, r_epoch;
    int writer, reader;
};
struct Region {
    char *p;
    size_t bytes;
    const char *name;
    std::vector<Shadow> shadow;
};

struct Worker {
    Launch *launch;
    jmp_buf sched;
    jmp_buf boot;
    sigjmp_buf fault;
    Fiber *fibers = nullptr;
    int nfibers = 0;
    Fiber *cur = nullptr;
    Fiber *booting = nullptr;
    char *stacks = nullptr;
    size_t stacks_bytes = 0;
    bool in_kernel = false;
    const void *fault_addr = nullptr;
    int fault_signal = 0;
    // the threadgroup in flight
    int barrier_arrived = 0;
    int simd_arrived[kMaxThreads / 32];
    collective *simd_args[kMaxThreads / 32][32];
    Fiber *executor = nullptr;
    std::vector<Region> regions;  // threadgroup arrays on this OS thread
    uint32_t epoch = 0;           // barrier interval of threadgroup memory (see the top)
    int unordered_line = 0;       // the last barrier that released without mem_threadgroup
    int collective_sg = -1;       // the simdgroup whose collective runs now (its executor lane)
    std::string error;
    uint64_t rng = 0;
};

thread_local Worker *W = nullptr;

struct Launch {
    void (*entry)(void *const *);
    void *const *buffers;
    uint32_t grid[3], tg[3];
    int nthreads;
    int order;  // 0 forward, 1 reverse, 2 seeded shuffle
    uint64_t seed;
    std::vector<uint32_t> group_order;
    std::atomic<uint32_t> next{ 0 };
    std::atomic<bool> failed{ false };
    std::mutex error_lock;
    std::string error;
};

[[noreturn]] void to_scheduler_with_error(const std::string &msg) {
    if (W->error.empty()) W->error = msg;
    _longjmp(W->sched, 2);
}

std::string where(const Fiber *f) {
    char buf[160];
    const thread_ids &t = f->ids;
    snprintf(buf, sizeof buf, "thread (%u, %u, %u) of threadgroup (%u, %u, %u)", t.thread_position_in_threadgroup.x,
             t.thread_position_in_threadgroup.y, t.thread_position_in_threadgroup.z,
             t.threadgroup_position_in_grid.x, t.threadgroup_position_in_grid.y, t.threadgroup_position_in_grid.z);
    return buf;
}

inline void yield(Fiber *f) {
    if (_setjmp(f->ctx) == 0) _longjmp(W->sched, 1);
}

inline void resume(Fiber *f) {
    W->cur = f;
    if (_setjmp(W->sched) == 0) _longjmp(f->ctx, 1);
}

void fiber_main() {
    Fiber *f = W->booting;
    if (_setjmp(f->ctx) == 0) _longjmp(W->boot, 1);  // created: back to make_fibers
    for (;;) {
        Launch *l = W->launch;
        l->entry(l->buffers);
        f = W->cur;
        f->state = DONE;
        yield(f);
    }
}

bool make_fibers(Worker *w, int n) {
    w->stacks_bytes = (size_t)n * (kStack + kPage);
    void *m = mmap(nullptr, w->stacks_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return false;
    w->stacks = static_cast<char *>(m);
    w->fibers = new Fiber[n];
    w->nfibers = n;
    for (int i = 0; i < n; i++) {
        Fiber *f = &w->fibers[i];
        f->index = i;
        char *lo = w->stacks + (size_t)i * (kStack + kPage);
        mprotect(lo, kPage, PROT_NONE);  // overflow lands here
        f->stack_lo = lo + kPage;
        f->stack_hi = f->stack_lo + kStack;
        ucontext_t uc;
        getcontext(&uc);
        uc.uc_stack.ss_sp = f->stack_lo;
        uc.uc_stack.ss_size = kStack;
        uc.uc_link = nullptr;
        makecontext(&uc, fiber_main, 0);
        w->booting = f;
        if (_setjmp(w->boot) == 0) setcontext(&uc);
    }
    return true;
}

void free_fibers(Worker *w) {
    if (w->stacks) munmap(w->stacks, w->stacks_bytes);
    delete[] w->fibers;
    w->stacks = nullptr;
    w->fibers = nullptr;
}

uint64_t next_random(uint64_t &s) {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void make_order(int order, uint64_t &rng, int n, std::vector<int> &out) {
    out.resize((size_t)n);
    for (int i = 0; i < n; i++) out[(size_t)i] = order == 1 ? n - 1 - i : i;
    if (order == 2)
        for (int i = n - 1; i > 0; i--) std::swap(out[(size_t)i], out[next_random(rng) % (uint64_t)(i + 1)]);
}

std::string lines_of(const Worker *w, State s) {
    std::vector<int> seen;
    for (int i = 0; i < w->nfibers; i++) {
        const Fiber &f = w->fibers[i];
        if (f.state != s) continue;
        bool dup = false;
        for (int v : seen) dup |= v == f.line;
        if (!dup) seen.push_back(f.line);
    }
    std::string out;
    for (size_t i = 0; i < seen.size(); i++) out += (i ? ", " : "") + std::to_string(seen[i]);
    return out;
}

// Why no thread can move: a divergent barrier, or a collective some lanes never reach.
std::string diagnose(const Worker *w) {
    int counts[4] = { 0, 0, 0, 0 };
    for (int i = 0; i < w->nfibers; i++) counts[w->fibers[i].state]++;
    char buf[512];
    if (counts[AT_BARRIER] && counts[DONE] && !counts[AT_SIMD])
        snprintf(buf, sizeof buf,
                 "divergent barrier: %d of %d threads wait at threadgroup_barrier (line %s) while %d returned "
                 "without reaching it",
                 counts[AT_BARRIER], w->nfibers, lines_of(w, AT_BARRIER).c_str(), counts[DONE]);
    else
        snprintf(buf, sizeof buf,
                 "deadlock: %d threads wait at a barrier (line %s), %d at a simdgroup collective (line %s), "
                 "%d returned; a collective needs every lane of its simdgroup",
                 counts[AT_BARRIER], lines_of(w, AT_BARRIER).c_str(), counts[AT_SIMD], lines_of(w, AT_SIMD).c_str(),
                 counts[DONE]);
    return buf;
}

void set_ids(Worker *w, Fiber *f, uint32_t g) {
    const Launch *l = w->launch;
    const uint32_t *G = l->grid, *T = l->tg;
    const uint32_t i = (uint32_t)f->index;
    const uint32_t gx = g % G[0], gy = (g / G[0]) % G[1], gz = g / (G[0] * G[1]);
    const uint32_t lx = i % T[0], ly = (i / T[0]) % T[1], lz = i / (T[0] * T[1]);
    const uint32_t nsimd = (uint32_t)(l->nthreads + 31) / 32;
    thread_ids &t = f->ids;
    t.thread_position_in_threadgroup = { lx, ly, lz };
    t.threadgroup_position_in_grid = { gx, gy, gz };
    t.thread_position_in_grid = { gx * T[0] + lx, gy * T[1] + ly, gz * T[2] + lz };
    t.threads_per_threadgroup = { T[0], T[1], T[2] };
    t.threadgroups_per_grid = { G[0], G[1], G[2] };
    t.threads_per_grid = { G[0] * T[0], G[1] * T[1], G[2] * T[2] };
    t.thread_index_in_threadgroup = { i, 0, 0 };
    t.thread_index_in_simdgroup = { i % 32, 0, 0 };
    t.simdgroup_index_in_threadgroup = { i / 32, 0, 0 };
    t.threads_per_simdgroup = { 32, 0, 0 };
    t.simdgroups_per_threadgroup = { nsimd, 0, 0 };
}

// Run one threadgroup to completion; false (with w->error) on a failed check or a fault.
bool run_group(Worker *w, uint32_t g, std::vector<int> &order) {
    Launch *l = w->launch;
    const int n = l->nthreads;
    for (auto &r : w->regions) memset(r.p, 0xff, r.bytes);  // poison threadgroup memory
    w->epoch++;
    w->unordered_line = 0;
    w->barrier_arrived = 0;
    for (int s = 0; s < (n + 31) / 32; s++) w->simd_arrived[s] = 0;
    for (int i = 0; i < n; i++) {
        w->fibers[i].state = RUNNABLE;
        set_ids(w, &w->fibers[i], g);
    }
    w->rng = l->seed * 0x9e3779b97f4a7c15ull + g + 1;
    for (;;) {
        make_order(l->order, w->rng, n, order);
        bool progressed = false;
        for (int idx : order) {
            Fiber *f = &w->fibers[idx];
            while (f->state == RUNNABLE) {
                progressed = true;
                w->in_kernel = true;
                resume(f);
                w->in_kernel = false;
                if (!w->error.empty()) return false;
            }
        }
        int done = 0;
        for (int i = 0; i < n; i++) done += w->fibers[i].state == DONE;
        if (done == n) return true;
        if (w->barrier_arrived == n) {  // everyone is at a barrier: the same one?
            const Fiber &f0 = w->fibers[0];
            int flags = f0.flags;
            for (int i = 1; i < n; i++) {
                const Fiber &f = w->fibers[i];
                if (f.line != f0.line) {
                    w->error = "divergent barriers: the threads of a threadgroup wait at different barriers (lines " +
                               lines_of(w, AT_BARRIER) + ")";
                    return false;
                }
                if (f.site != f0.site) {
                    w->error = "divergent barriers: " + where(&f0) + " and " + where(&f) +
                               " wait at the barrier of line " + std::to_string(f0.line) +
                               " reached from different call sites (two calls of a helper are two barriers)";
                    return false;
                }
                flags &= f.flags;
            }
            if (flags & msl_emu::MEM_THREADGROUP) w->epoch++;
            else w->unordered_line = f0.line;
            for (int i = 0; i < n; i++) w->fibers[i].state = RUNNABLE;
            w->barrier_arrived = 0;
            continue;
        }
        if (!progressed) {
            w->error = diagnose(w);
            return false;
        }
    }
}

void *worker_main(void *arg) {
    Worker *w = static_cast<Worker *>(arg);
    W = w;
    Launch *l = w->launch;
    stack_t alt;
    alt.ss_sp = malloc(64 * 1024);
    alt.ss_size = 64 * 1024;
    alt.ss_flags = 0;
    sigaltstack(&alt, nullptr);
    std::vector<int> order;
    if (!make_fibers(w, l->nthreads)) w->error = "cannot map fiber stacks";
    if (w->error.empty() && sigsetjmp(w->fault, 1) != 0) {
        w->in_kernel = false;
        std::string what = describe_address(w->fault_addr);
        char buf[200];
        if (w->fault_signal == SIGILL)  // the only trap kernels are compiled with (driver.py)
            snprintf(buf, sizeof buf, "signed integer overflow (a UBSan trap) at %p", w->fault_addr);
        else
            snprintf(buf, sizeof buf, "%s at address %p", w->fault_signal == SIGBUS ? "bus error" : "segmentation fault",
                     w->fault_addr);
        const Fiber *f = w->cur;
        bool overflow = f && (const char *)w->fault_addr >= f->stack_lo - kPage && (const char *)w->fault_addr < f->stack_lo;
        w->error = std::string(buf) + (what.empty() ? "" : ": " + what) + (overflow ? ": stack overflow" : "") +
                   (f ? " in " + where(f) : "");
    }
    while (w->error.empty() && !l->failed.load()) {
        uint32_t i = l->next.fetch_add(1);
        if (i >= l->group_order.size()) break;
        if (!run_group(w, l->group_order[i], order)) break;
    }
    if (!w->error.empty()) {
        std::lock_guard<std::mutex> g(l->error_lock);
        if (l->error.empty()) l->error = w->error;
        l->failed.store(true);
    }
    stack_t off;
    off.ss_sp = nullptr;
    off.ss_size = 0;
    off.ss_flags = SS_DISABLE;
    sigaltstack(&off, nullptr);
    free(alt.ss_sp);
    free_fibers(w);
    W = nullptr;
    return nullptr;
}

struct sigaction old_segv, old_bus, old_ill;

void on_fault(int sig, siginfo_t *info, void *) {
    Worker *w = W;
    if (w && w->in_kernel) {
        w->fault_addr = info->si_addr;
        w->fault_signal = sig;
        siglongjmp(w->fault, 1);
    }
    // Not a kernel's fault: put the previous handler back and let the access fault again.
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
    sigaction(SIGILL, &old_ill, nullptr);
}

std::mutex launch_lock;

}  // namespace

// ---- what kernels call (emu_runtime.h) -----------------------------------------------------------
extern "C" const thread_ids *msl_emu_ids(void) { return &W->cur->ids; }

extern "C" void msl_emu_fail(const char *message) { to_scheduler_with_error(message + (" in " + where(W->cur))); }

namespace {
inline uint64_t mix(uint64_t h, const void *p) {
    h ^= (uint64_t)(uintptr_t)p;
    h *= 0x100000001b3ull;
    return h ^ (h >> 29);
}

// The return address `ret` in kernel code, then the return addresses up the kernel's frames.
uint64_t site_of(const Fiber *f, const void *ret, void *frame) {
    uint64_t h = mix(0xcbf29ce484222325ull, ret);
    char *fp = static_cast<char *>(frame);
    for (int depth = 0; depth < 256 && fp >= f->stack_lo && fp < f->entry_frame; depth++) {
        char **link = reinterpret_cast<char **>(fp);
        h = mix(h, link[1]);
        if (link[0] <= fp) break;
        fp = link[0];
    }
    return h;
}
}  // namespace

extern "C" void msl_emu_set_entry_frame(void *frame) { W->cur->entry_frame = static_cast<char *>(frame); }

extern "C" __attribute__((noinline)) uint64_t msl_emu_site(void *frame) {
    return site_of(W->cur, __builtin_return_address(0), frame);
}

extern "C" __attribute__((noinline)) void msl_emu_barrier(int line, int flags, void *frame) {
    Fiber *f = W->cur;
    f->site = site_of(f, __builtin_return_address(0), frame);
    f->state = AT_BARRIER;
    f->line = line;
    f->flags = flags;
    W->barrier_arrived++;
    yield(f);
}

extern "C" void msl_emu_register_threadgroup(void *p, size_t bytes, const char *name) {
    memset(p, 0xff, bytes);
    W->regions.push_back(Region{ static_cast<char *>(p), bytes, name, std::vector<Shadow>(bytes, Shadow{ 0, 0, -1, -1 }) });
}

// ---- threadgroup memory accesses (the -fsanitize=thread hooks) -----------------------------------
namespace {
std::string accessor(const Worker *w, int id) {
    if (id >= kSimdBase) return "simdgroup " + std::to_string(id - kSimdBase) + " (a simdgroup_load/store)";
    if (id == kSeveral) return "several threads";
    return where(&w->fibers[id]);
}

[[noreturn]] void race(Worker *w, const Region &r, size_t byte, const char *what, int me, int other) {
    char buf[160];
    snprintf(buf, sizeof buf, "data race on threadgroup memory: %s byte %zu of %s (%zu bytes): ", what, byte, r.name,
             r.bytes);
    std::string msg = buf + accessor(w, me) + " and " + accessor(w, other) +
                      " in the same barrier interval (no threadgroup_barrier(mem_flags::mem_threadgroup) between them";
    if (w->unordered_line)
        msg += "; the barrier at line " + std::to_string(w->unordered_line) + " does not order threadgroup memory";
    to_scheduler_with_error(msg + ")");
}

inline void on_access(const void *addr, size_t n, bool write) {
    Worker *w = W;
    if (!w || !w->in_kernel) return;
    const char *p = static_cast<const char *>(addr);
    for (Region &r : w->regions) {
        if ((size_t)(p - r.p) >= r.bytes) continue;
        const int me = w->collective_sg >= 0 ? kSimdBase + w->collective_sg : w->cur->index;
        const uint32_t e = w->epoch;
        for (size_t i = (size_t)(p - r.p); i < r.bytes && n > 0; i++, n--) {
            Shadow &s = r.shadow[i];
            if (s.w_epoch == e && s.writer != me)
                race(w, r, i, write ? "a write after a write to" : "a read after a write to", me, s.writer);
            if (write) {
                if (s.r_epoch == e && s.reader != me) race(w, r, i, "a write after a read of", me, s.reader);
                s.w_epoch = e, s.writer = me;
            } else if (s.r_epoch != e) {
                s.r_epoch = e, s.reader = me;
            } else if (s.reader != me) {
                s.reader = kSeveral;
            }
        }
        return;
    }
}
}  // namespace

extern "C" {
void __tsan_init(void) {}
void __tsan_func_entry(void *) {}
void __tsan_func_exit(void) {}
void __tsan_read1(void *p) { on_access(p, 1, false); }
void __tsan_read2(void *p) { on_access(p, 2, false); }
void __tsan_read4(void *p) { on_access(p, 4, false); }
void __tsan_read8(void *p) { on_access(p, 8, false); }
void __tsan_read16(void *p) { on_access(p, 16, false); }
void __tsan_write1(void *p) { on_access(p, 1, true); }
void __tsan_write2(void *p) { on_access(p, 2, true); }
void __tsan_write4(void *p) { on_access(p, 4, true); }
void __tsan_write8(void *p) { on_access(p, 8, true); }
void __tsan_write16(void *p) { on_access(p, 16, true); }
void __tsan_unaligned_read2(void *p) { on_access(p, 2, false); }
void __tsan_unaligned_read4(void *p) { on_access(p, 4, false); }
void __tsan_unaligned_read8(void *p) { on_access(p, 8, false); }
void __tsan_unaligned_read16(void *p) { on_access(p, 16, false); }
void __tsan_unaligned_write2(void *p) { on_access(p, 2, true); }
void __tsan_unaligned_write4(void *p) { on_access(p, 4, true); }
void __tsan_unaligned_write8(void *p) { on_access(p, 8, true); }
void __tsan_unaligned_write16(void *p) { on_access(p, 16, true); }
void __tsan_read_range(void *p, size_t n) { on_access(p, n, false); }
void __tsan_write_range(void *p, size_t n) { on_access(p, n, true); }
void __tsan_vptr_update(void **, void *) {}
void __tsan_vptr_read(void **) {}
}

static const char *op_name(int op) {
    switch (op) {
    case msl_emu::OP_LOAD: return "simdgroup_load";
    case msl_emu::OP_STORE: return "simdgroup_store";
    case msl_emu::OP_MMA: return "simdgroup_multiply_accumulate";
    case msl_emu::OP_SUM: return "simd_sum";
    case msl_emu::OP_BROADCAST: return "simd_broadcast";
    case msl_emu::OP_SHUFFLE: return "simd_shuffle";
    case msl_emu::OP_WARP_MMA: return "mma.sync (tg_mma_m16n8k16_bf16)";
    default: return "simdgroup_barrier";
    }
}

// Every lane posted: the same operation at the same site, uniform arguments where required.
static void check_uniform(Worker *w, collective *const *all, const Fiber *lanes[], int n) {
    const collective *c0 = all[0];
    char buf[400];
    for (int i = 1; i < n; i++) {
        const collective *c = all[i];
        if (c->op == c0->op && c->line == c0->line && c->site != c0->site) {
            snprintf(buf, sizeof buf,
                     "divergent simdgroup: lanes 0 and %d reach %s (line %d) from different call sites in simdgroup %u "
                     "of threadgroup (%u, %u, %u)",
                     i, op_name(c0->op), c0->line, lanes[0]->ids.simdgroup_index_in_threadgroup.x,
                     lanes[0]->ids.threadgroup_position_in_grid.x, lanes[0]->ids.threadgroup_position_in_grid.y,
                     lanes[0]->ids.threadgroup_position_in_grid.z);
            to_scheduler_with_error(buf);
        }
        if (c->op != c0->op || c->line != c0->line) {
            snprintf(buf, sizeof buf,
                     "divergent simdgroup: lane 0 is at %s (line %d) while lane %d is at %s (line %d) in simdgroup %u "
                     "of threadgroup (%u, %u, %u)",
                     op_name(c0->op), c0->line, i, op_name(c->op), c->line, lanes[0]->ids.simdgroup_index_in_threadgroup.x,
                     lanes[0]->ids.threadgroup_position_in_grid.x, lanes[0]->ids.threadgroup_position_in_grid.y,
                     lanes[0]->ids.threadgroup_position_in_grid.z);
            to_scheduler_with_error(buf);
        }
        const char *what = nullptr;
        if (c->ptr != c0->ptr) what = "the memory pointer";
        for (int k = 0; k < 4 && !what; k++)
            if (c->u[k] != c0->u[k]) what = k == 0 ? "elements_per_row" : k == 3 ? "transpose" : "matrix_origin";
        for (int k = 0; k < c0->nmat && !what; k++) {
            // the same variable: the same distance from the top of each lane's own stack
            const char *p0 = static_cast<const char *>(c0->mat[k]), *p = static_cast<const char *>(c->mat[k]);
            if (p0 < lanes[0]->stack_lo || p0 >= lanes[0]->stack_hi || p < lanes[i]->stack_lo || p >= lanes[i]->stack_hi)
                what = "a matrix argument (not a thread-local variable)";
            else if (lanes[0]->stack_hi - p0 != lanes[i]->stack_hi - p)
                what = "a matrix argument (lanes name different variables)";
        }
        if (!what && c0->lane_arg_uniform && c->lane_arg != c0->lane_arg) what = "the source lane";
        if (what) {
            snprintf(buf, sizeof buf, "non-uniform argument of %s (line %d): %s differs between lane 0 and lane %d, %s",
                     op_name(c0->op), c0->line, what, i, where(lanes[i]).c_str());
            to_scheduler_with_error(buf);
        }
    }
    (void)w;
}

extern "C" collective *const *msl_emu_simd_arrive(collective *c) {
    Worker *w = W;
    Fiber *f = w->cur;
    const int sg = f->index / 32, lane = f->index % 32;
    const int size = std::min(32, w->launch->nthreads - sg * 32);
    w->simd_args[sg][lane] = c;
    f->posted = c;
    f->line = c->line;
    if (++w->simd_arrived[sg] < size) {
        f->state = AT_SIMD;
        yield(f);
        return nullptr;  // released: the executing lane did the work
    }
    for (int i = size; i < 32; i++) w->simd_args[sg][i] = nullptr;
    if (size < 32 && (c->op == msl_emu::OP_LOAD || c->op == msl_emu::OP_STORE || c->op == msl_emu::OP_MMA ||
                      c->op == msl_emu::OP_WARP_MMA))
        to_scheduler_with_error(std::string(op_name(c->op)) + " (line " + std::to_string(c->line) + ") in a simdgroup of " +
                                std::to_string(size) + " threads: " +
                                (c->op == msl_emu::OP_WARP_MMA ? "mma.sync needs all 32 lanes of a warp"
                                                               : "simdgroup matrices need all 32 lanes"));
    const Fiber *lanes[32];
    for (int i = 0; i < size; i++) lanes[i] = &w->fibers[sg * 32 + i];
    check_uniform(w, w->simd_args[sg], lanes, size);
    w->executor = f;
    w->collective_sg = sg;
    return w->simd_args[sg];
}

extern "C" void msl_emu_simd_release(void) {
    Worker *w = W;
    const int sg = w->executor->index / 32;
    const int size = std::min(32, w->launch->nthreads - sg * 32);
    for (int i = 0; i < size; i++) {
        Fiber *f = &w->fibers[sg * 32 + i];
        if (f != w->executor) f->state = RUNNABLE;
    }
    w->simd_arrived[sg] = 0;
    w->executor = nullptr;
    w->collective_sg = -1;
}

// ---- what the driver calls -----------------------------------------------------------------------
// A buffer of `bytes` that ends exactly at a guard page (another guards the page before it); the
// bytes between that page and the data are 0xFF. NULL if the mapping fails.
extern "C" void *msl_emu_alloc(size_t bytes) {
    size_t data_pages = (bytes + kPage - 1) / kPage;
    size_t mapped = (data_pages + 2) * kPage;
    void *m = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    char *base = static_cast<char *>(m);
    mprotect(base, kPage, PROT_NONE);
    mprotect(base + (data_pages + 1) * kPage, kPage, PROT_NONE);
    char *data = base + (data_pages + 1) * kPage - bytes;
    memset(base + kPage, 0xff, data_pages * kPage);
    std::lock_guard<std::mutex> g(buffers_lock);
    buffers.push_back(Buffer{ base, mapped, data, bytes });
    return data;
}

// Make a buffer read-only (an input): a kernel's write to it faults and is reported.
extern "C" int msl_emu_protect_readonly(void *data) {
    std::lock_guard<std::mutex> g(buffers_lock);
    for (const Buffer &b : buffers)
        if (b.data == data) {
            size_t data_pages = (b.mapped / kPage) - 2;
            return mprotect(b.base + kPage, data_pages * kPage, PROT_READ);
        }
    return -1;
}

extern "C" void msl_emu_free(void *data) {
    std::lock_guard<std::mutex> g(buffers_lock);
    for (size_t i = 0; i < buffers.size(); i++)
        if (buffers[i].data == data) {
            munmap(buffers[i].base, buffers[i].mapped);
            buffers.erase(buffers.begin() + (long)i);
            return;
        }
}

// Run entry over grid x tg. order: 0 forward, 1 reverse, 2 shuffled (seeded) for the threads of
// a threadgroup at every scheduling round, and likewise for the threadgroups. Returns 0, or 1
// with a message in err.
extern "C" int msl_emu_launch(void (*entry)(void *const *), const uint32_t *grid, const uint32_t *tg,
                              void *const *bufs, int order, uint64_t seed, int workers, int ftz, int mma_order,
                              char *err, size_t errcap) {
    std::lock_guard<std::mutex> serial(launch_lock);
    auto fail = [&](const std::string &msg) {
        snprintf(err, errcap, "%s", msg.c_str());
        return 1;
    };
    uint64_t nthreads = (uint64_t)tg[0] * tg[1] * tg[2];
    if (nthreads == 0 || nthreads > (uint64_t)kMaxThreads)
        return fail("threadgroup of " + std::to_string(nthreads) + " threads (Metal allows 1 .. 1024)");
    uint64_t ngroups = (uint64_t)grid[0] * grid[1] * grid[2];
    if (ngroups == 0) return 0;
    if (ngroups > 0xffffffffull) return fail("grid too large for the emulator");
    if (order < 0 || order > 2 || mma_order < 0 || mma_order > 3) return fail("bad order");
    Launch l;
    l.entry = entry;
    l.buffers = bufs;
    memcpy(l.grid, grid, sizeof l.grid);
    memcpy(l.tg, tg, sizeof l.tg);
    l.nthreads = (int)nthreads;
    l.order = order;
    l.seed = seed;
    std::vector<int> perm;
    uint64_t rng = seed ^ 0x5bd1e995ull;
    make_order(order, rng, (int)ngroups, perm);
    l.group_order.assign(perm.begin(), perm.end());
    msl_emu_ftz = ftz;
    msl_emu_mma_order = mma_order;

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &old_segv);
    sigaction(SIGBUS, &sa, &old_bus);
    sigaction(SIGILL, &sa, &old_ill);

    int nw = workers < 1 ? 1 : workers;
    if ((uint64_t)nw > ngroups) nw = (int)ngroups;
    std::vector<Worker *> ws;
    std::vector<pthread_t> ids;
    for (int i = 0; i < nw; i++) {
        Worker *w = new Worker();
        w->launch = &l;
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 1 << 20);
        if (pthread_create(&t, &attr, worker_main, w) != 0) {
            delete w;
            pthread_attr_destroy(&attr);
            break;
        }
        pthread_attr_destroy(&attr);
        ws.push_back(w);
        ids.push_back(t);
    }
    for (pthread_t t : ids) pthread_join(t, nullptr);
    for (Worker *w : ws) delete w;
    sigaction(SIGSEGV, &old_segv, nullptr);
    sigaction(SIGBUS, &old_bus, nullptr);
    sigaction(SIGILL, &old_ill, nullptr);
    if (ws.empty()) return fail("cannot start worker threads");
    if (l.failed.load()) return fail(l.error);
    return 0;
}
