// Host stand-ins for what CUDA_PRELUDE (gpu/src/lib.rs) gives the kernel on a card: its types
// and vector constructors, popcount and the constructor macros. Shared by the C++ subset check
// (kernel_subset.rs) and the CPU stand-in driver (libcuda.cpp), which add the lane macros.
typedef unsigned int uint;
typedef unsigned long long ulong;
struct uint4 { uint x, y, z, w; };
struct uint2 { uint x, y; };
static inline uint4 make_uint4(uint a, uint b, uint c, uint d) { return uint4{a, b, c, d}; }
static inline uint2 make_uint2(uint a, uint b) { return uint2{a, b}; }
#define NQ_POPCOUNT(x) ((uint)__builtin_popcount(x))
#define NQ_UINT4(a, b, c, d) make_uint4((a), (b), (c), (d))
#define NQ_UINT2(a, b) make_uint2((a), (b))
