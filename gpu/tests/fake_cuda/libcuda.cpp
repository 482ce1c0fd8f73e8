// A CPU stand-in for the CUDA driver (libcuda.so.1), for gpu/tests/cuda_backend.rs: it lets the
// CUDA backend's host code (the driver calls, buffers, arguments, the batch loop) run for real on
// a machine without a card, the way pocl lets the OpenCL backend run.
//
// Memory is host memory; a module is the cubin NVRTC made (its shared-memory size says the stack
// depth it was built for); a launch runs the same kernel source, compiled here as C++ for each
// stack depth, lane after lane on the CPU. NQ_FAKE_CUDA_FAIL=launch makes every launch fail as a
// crashed kernel does (CUDA_ERROR_ILLEGAL_ADDRESS).
//
// Built by the test: c++ -std=c++17 -O2 -shared -fPIC -DKERNEL='"…/kernel.cl"' libcuda.cpp

#include <cstddef>
#include <cstdint>

// Declared by hand: <cstdlib> would bring glibc's own `ulong`, which the kernel's prelude defines.
extern "C" {
void* malloc(size_t);
void free(void*);
char* getenv(const char*);
void* memcpy(void*, const void*, size_t);
int memcmp(const void*, const void*, size_t);
int strcmp(const char*, const char*);
char* strncpy(char*, const char*, size_t);
}

#include "host_prelude.h"

static uint g_lane, g_block;
#define NQ_KERNEL static void
#define NQ_GLOBAL
#define NQ_LOCAL static
#define NQ_LANE g_lane
#define NQ_GID (g_block * NQ_WG + g_lane)
#define NQ_ATOMIC_INC(p) ((*(p))++)
#define NQ_PRELUDE_DONE
#define NQ_WG 64u

typedef void (*Kernel)(const uint*, const uint*, uint, uint*, ulong*, ulong*, uint*, uint);

// The kernel once per stack depth 2..16 (what batches up to N=16 need), as nq_solve_<depth>.
#define NQ_MAXL 2u
#define nq_solve nq_solve_2
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 3u
#define nq_solve nq_solve_3
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 4u
#define nq_solve nq_solve_4
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 5u
#define nq_solve nq_solve_5
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 6u
#define nq_solve nq_solve_6
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 7u
#define nq_solve nq_solve_7
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 8u
#define nq_solve nq_solve_8
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 9u
#define nq_solve nq_solve_9
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 10u
#define nq_solve nq_solve_10
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 11u
#define nq_solve nq_solve_11
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 12u
#define nq_solve nq_solve_12
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 13u
#define nq_solve nq_solve_13
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 14u
#define nq_solve nq_solve_14
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 15u
#define nq_solve nq_solve_15
#include KERNEL
#undef nq_solve
#undef NQ_MAXL
#define NQ_MAXL 16u
#define nq_solve nq_solve_16
#include KERNEL
#undef nq_solve
#undef NQ_MAXL

static Kernel kernel_for(unsigned depth) {
    static const Kernel kernels[] = {
        nullptr, nullptr, nq_solve_2, nq_solve_3, nq_solve_4, nq_solve_5, nq_solve_6,
        nq_solve_7, nq_solve_8, nq_solve_9, nq_solve_10, nq_solve_11, nq_solve_12,
        nq_solve_13, nq_solve_14, nq_solve_15, nq_solve_16,
    };
    return depth < sizeof kernels / sizeof kernels[0] ? kernels[depth] : nullptr;
}

enum {
    OK = 0,
    INVALID_VALUE = 1,
    INVALID_IMAGE = 200,
    NOT_FOUND = 500,
    ILLEGAL_ADDRESS = 700,
    NOT_SUPPORTED = 801,
};

struct Module { unsigned depth; };

// The size of the section `.nv.shared.nq_solve` of an ELF64 cubin, or 0.
static uint64_t shared_size(const unsigned char* elf) {
    if (memcmp(elf, "\x7f" "ELF", 4) != 0 || elf[4] != 2) return 0;
    uint64_t shoff;
    uint16_t shentsize, shnum, shstrndx;
    memcpy(&shoff, elf + 0x28, 8);
    memcpy(&shentsize, elf + 0x3A, 2);
    memcpy(&shnum, elf + 0x3C, 2);
    memcpy(&shstrndx, elf + 0x3E, 2);
    uint64_t strings;
    memcpy(&strings, elf + shoff + (uint64_t)shstrndx * shentsize + 0x18, 8);
    for (uint16_t i = 0; i < shnum; i++) {
        const unsigned char* sh = elf + shoff + (uint64_t)i * shentsize;
        uint32_t name;
        uint64_t size;
        memcpy(&name, sh, 4);
        memcpy(&size, sh + 0x20, 8);
        if (strcmp((const char*)elf + strings + name, ".nv.shared.nq_solve") == 0) return size;
    }
    return 0;
}

extern "C" {
int cuInit(unsigned) { return OK; }
int cuDriverGetVersion(int* v) { *v = 12080; return OK; }
// NVRTC itself asks the driver for its internal tables when it finds one: none here.
int cuGetExportTable(const void** table, const void*) {
    *table = nullptr;
    return NOT_SUPPORTED;
}
int cuGetErrorName(int code, const char** name) {
    *name = code == ILLEGAL_ADDRESS ? "CUDA_ERROR_ILLEGAL_ADDRESS"
          : code == INVALID_VALUE   ? "CUDA_ERROR_INVALID_VALUE"
          : code == INVALID_IMAGE   ? "CUDA_ERROR_INVALID_IMAGE"
                                    : "CUDA_ERROR_NOT_FOUND";
    return OK;
}
int cuDeviceGetCount(int* n) { *n = 1; return OK; }
int cuDeviceGet(int* d, int ordinal) { *d = ordinal; return ordinal == 0 ? OK : INVALID_VALUE; }
int cuDeviceGetName(char* name, int len, int) {
    strncpy(name, "CPU stand-in for a CUDA device", (size_t)len);
    return OK;
}
int cuDeviceGetAttribute(int* v, int attribute, int) {
    switch (attribute) {
        case 8: *v = 48 * 1024; return OK;  // shared memory per block
        case 16: *v = 2; return OK;         // multiprocessors
        case 75: *v = 9; return OK;         // compute capability 9.0
        case 76: *v = 0; return OK;
        default: return INVALID_VALUE;
    }
}
int cuDeviceTotalMem_v2(size_t* bytes, int) { *bytes = (size_t)1 << 30; return OK; }
int cuDevicePrimaryCtxRetain(void** ctx, int) { *ctx = (void*)0x1; return OK; }
int cuDevicePrimaryCtxRelease_v2(int) { return OK; }
int cuCtxSetCurrent(void* ctx) { return ctx ? OK : INVALID_VALUE; }
int cuCtxSynchronize() { return OK; }
int cuModuleLoadData(void** module, const void* image) {
    uint64_t shared = shared_size((const unsigned char*)image);
    // 24 bytes a level and lane, and sm_90 reserves 1 KiB of every group's shared memory.
    unsigned depth = (unsigned)(shared / (24 * NQ_WG));
    if (!kernel_for(depth)) return INVALID_IMAGE;
    *module = new Module{depth};
    return OK;
}
int cuModuleGetFunction(void** f, void* module, const char* name) {
    if (strcmp(name, "nq_solve") != 0) return NOT_FOUND;
    *f = module;
    return OK;
}
int cuModuleUnload(void* module) { delete (Module*)module; return OK; }
int cuMemAlloc_v2(uint64_t* ptr, size_t bytes) {
    *ptr = (uint64_t)malloc(bytes);
    return *ptr ? OK : 2;
}
int cuMemFree_v2(uint64_t ptr) { free((void*)ptr); return OK; }
int cuMemcpyHtoD_v2(uint64_t dst, const void* src, size_t n) { memcpy((void*)dst, src, n); return OK; }
int cuMemcpyDtoH_v2(void* dst, uint64_t src, size_t n) { memcpy(dst, (const void*)src, n); return OK; }
int cuMemsetD32_v2(uint64_t dst, unsigned value, size_t n) {
    for (size_t i = 0; i < n; i++) ((unsigned*)dst)[i] = value;
    return OK;
}
int cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, void*, int, size_t) {
    *blocks = 3;
    return OK;
}
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                   unsigned bz, unsigned shared, void*, void** params, void** extra) {
    const char* fail = getenv("NQ_FAKE_CUDA_FAIL");
    if (fail && strcmp(fail, "launch") == 0) return ILLEGAL_ADDRESS;
    if (gy != 1 || gz != 1 || bx != NQ_WG || by != 1 || bz != 1 || shared != 0 || extra)
        return INVALID_VALUE;
    Kernel k = kernel_for(((Module*)f)->depth);
    for (g_block = 0; g_block < gx; g_block++) {
        for (g_lane = 0; g_lane < bx; g_lane++) {
            k(*(const uint**)params[0], *(const uint**)params[1], *(uint*)params[2],
              *(uint**)params[3], *(ulong**)params[4], *(ulong**)params[5], *(uint**)params[6],
              *(uint*)params[7]);
        }
    }
    return OK;
}
}
