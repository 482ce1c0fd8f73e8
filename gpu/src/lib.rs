//! N-Queens jobs counted on a graphics card, through OpenCL (any OpenCL device) or CUDA, exactly as
//! [`Job::solve`] counts them.
//!
//! The libraries are loaded at run time (OpenCL through `opencl3`'s `dynamic` feature; CUDA's
//! driver and NVRTC with `libloading`): nothing of a vendor SDK is needed to build, and a binary
//! that uses this crate starts on machines with no GPU library at all; [`GpuSolver::new`] then
//! fails with [`GpuError::NoPlatform`].
//!
//! How a batch of jobs is counted ([`GpuSolver::solve_jobs`]):
//! - each job's search is read as plain masks ([`Job::search_plan`]) and split by 2 to 4 more rows
//!   (the same expansion as [`Job::split`], without building a `Job` per part) into *work items*,
//!   enough to fill the device ([`GpuOptions::target_items`]);
//! - items are sorted longest first (by the partial placements two rows further down, the same
//!   measure as [`Job::estimate`]) and handed out by an atomic counter, so lanes that finish early
//!   take the next item;
//! - each lane searches its item depth first without recursion, in branch-free steps (every lane
//!   of a warp runs the same instructions), its stack in local memory laid out `[level][lane]`,
//!   and the last row counted by popcount; each item gets one 64-bit count;
//! - a dispatch runs a bounded number of steps ([`GpuOptions::dispatch_ms`] sets the length), and a
//!   lane with an unfinished item saves it to global memory and resumes it in the next dispatch,
//!   so that driver watchdogs stay quiet and progress can be reported;
//! - the host merges the items of each job ([`JobCounts::merge`]); the rotation-symmetric counts
//!   (`sym180`, `sym90`) are computed on the CPU ([`Job::symmetric_counts`], next to nothing).
//!
//! `nodes` counts the queens the kernel places (its steps) in every searched row but the last
//! (whose squares are counted, not placed), plus those the host places when splitting; it differs
//! from the CPU solver's figure, as [`JobCounts::same_answer`] allows.
//!
//! Any device error ends the batch with a [`GpuError`]: a fault never yields a count.

#![warn(missing_docs)]

mod backend;
mod cuda;
mod device;
mod error;
mod items;
mod opencl;

pub use device::{DeviceInfo, DeviceKind, DeviceSelector};
pub use error::GpuError;
pub use opencl::list_devices;

use backend::{Backend, Kernel};
use items::{Batch, Planner};
use nqueens_core::{Job, JobCounts};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The kernel source (OpenCL C in a subset NVRTC also compiles under [`CUDA_PRELUDE`], see its
/// header).
pub const KERNEL_SOURCE: &str = include_str!("kernel.cl");

/// The prelude under which NVRTC compiles [`KERNEL_SOURCE`] as CUDA C++: the CUDA backend
/// prepends it and passes `-DNQ_MAXL=...u -DNQ_WG=...u`, as the OpenCL backend does;
/// `gpu/tests/kernel_nvrtc.rs` compiles the kernel this way for Ampere and Hopper.
pub const CUDA_PRELUDE: &str = r#"typedef unsigned int uint;
typedef unsigned long long ulong;
#define NQ_KERNEL extern "C" __global__ void __launch_bounds__(NQ_WG)
#define NQ_GLOBAL
#define NQ_LOCAL __shared__
#define NQ_LANE threadIdx.x
#define NQ_GID (blockIdx.x * blockDim.x + threadIdx.x)
#define NQ_POPCOUNT(x) __popc(x)
#define NQ_ATOMIC_INC(p) atomicAdd((p), 1u)
#define NQ_UINT4(a, b, c, d) make_uint4((a), (b), (c), (d))
#define NQ_UINT2(a, b) make_uint2((a), (b))
#define NQ_PRELUDE_DONE
"#;

/// A fault to inject, for tests of the error paths: it makes a real device call fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The kernel source gets an `#error` line: the build fails with the compiler's log.
    Build,
    /// After the first dispatch of a batch, a read outside a buffer: the driver returns an error.
    MidBatch,
}

impl Fault {
    /// The fault named by `NQ_GPU_FAULT` (`build` or `midbatch`), if any.
    pub fn from_env() -> Option<Fault> {
        match std::env::var("NQ_GPU_FAULT").ok()?.trim() {
            "build" => Some(Fault::Build),
            "midbatch" | "mid-batch" => Some(Fault::MidBatch),
            _ => None,
        }
    }
}

/// Tuning of a [`GpuSolver`]; the defaults depend on the kind of device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuOptions {
    /// Lanes per work group (the kernel is compiled for it).
    pub work_group: usize,
    /// Work groups per compute unit in one dispatch [default: as many as one runs at once where
    /// that is known (CUDA; NVIDIA cards under OpenCL), else 16 on a GPU and 2 elsewhere]. More
    /// than run at once make a dispatch run in waves, the last one part-empty.
    pub groups_per_unit: Option<usize>,
    /// Work items wanted per batch: jobs are split by 2, 3 or 4 more rows until a batch has about
    /// this many [default: 2^21 on a GPU, 2^14 elsewhere].
    pub target_items: Option<usize>,
    /// Most work items in one batch (device memory) [default: 4 x `target_items`].
    pub max_items: Option<usize>,
    /// Wanted length of one dispatch; the step budget adapts to it.
    pub dispatch_ms: u64,
    /// Most steps a lane takes in one dispatch, in units of 1024 (tests set 1 so that items stop
    /// and resume across many dispatches) [default: 2^20].
    pub max_chunks: u32,
    /// Rows below a child that must each keep a free square for it to be searched (0, 1 or 2;
    /// 1 by default: the row after next, as the CPU search checks; 0 and 2 to measure what
    /// each brings on a card).
    pub lookahead_rows: u32,
    /// A fault to inject (tests; see [`Fault::from_env`]).
    pub fault: Option<Fault>,
}

impl Default for GpuOptions {
    fn default() -> Self {
        GpuOptions {
            work_group: 64,
            groups_per_unit: None,
            target_items: None,
            max_items: None,
            dispatch_ms: 100,
            max_chunks: 1 << 20,
            lookahead_rows: 1,
            fault: None,
        }
    }
}

impl GpuOptions {
    /// The defaults, with these if set (for trying settings on a card without a rebuild):
    /// `NQ_GPU_ITEMS` ([`GpuOptions::target_items`]), `NQ_GPU_WG` ([`GpuOptions::work_group`]),
    /// `NQ_GPU_LOOKAHEAD=0|1|2` ([`GpuOptions::lookahead_rows`]; more than 2 is 2), `NQ_GPU_GROUPS`
    /// ([`GpuOptions::groups_per_unit`]). Faults are never read from the
    /// environment here: a program that wants them asks [`Fault::from_env`].
    pub fn from_env() -> Self {
        let number = |name: &str| std::env::var(name).ok().and_then(|v| v.trim().parse().ok());
        let defaults = GpuOptions::default();
        GpuOptions {
            target_items: number("NQ_GPU_ITEMS"),
            work_group: number("NQ_GPU_WG").unwrap_or(defaults.work_group),
            lookahead_rows: number("NQ_GPU_LOOKAHEAD")
                .map_or(defaults.lookahead_rows, |v: usize| v.min(2) as u32),
            groups_per_unit: number("NQ_GPU_GROUPS"),
            ..defaults
        }
    }
}

/// What the last [`GpuSolver::solve_jobs`] did, for logs and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SolveStats {
    /// Jobs solved.
    pub jobs: usize,
    /// Work items searched on the device.
    pub items: u64,
    /// Batches (item lists uploaded).
    pub batches: usize,
    /// Kernel dispatches.
    pub dispatches: usize,
    /// Steps the kernel took (queens placed on the device; the host's are not counted): steps
    /// per device second is the kernel's own rate.
    pub steps: u64,
    /// Times a lane stopped in an unfinished item at the end of a dispatch (and resumed it in
    /// the next).
    pub resumed: u64,
    /// Seconds the device was busy (dispatches and transfers).
    pub device_seconds: f64,
    /// Seconds in all.
    pub seconds: f64,
}

/// A device (OpenCL or CUDA) ready to count jobs. Not shared between threads: one owner drives
/// the device.
pub struct GpuSolver {
    device: Box<dyn Backend>,
    options: GpuOptions,
    /// Compiled kernels by stack depth (`NQ_MAXL`).
    kernels: HashMap<usize, Kernel>,
    /// Step budget of a dispatch, in units of 1024 steps; adapted to `dispatch_ms`.
    chunks: u32,
    stats: SolveStats,
}

/// Deepest stack the kernel is compiled for at start-up (a build error shows there); deeper
/// batches get their own build.
const PROBE_MAXL: usize = 16;

impl GpuSolver {
    /// Opens the selected device with the options from the environment ([`GpuOptions::from_env`])
    /// and compiles the kernel, so that a build error shows here.
    pub fn new(selector: DeviceSelector) -> Result<GpuSolver, GpuError> {
        GpuSolver::with_options(selector, GpuOptions::from_env())
    }

    /// Opens the selected device with these options and compiles the kernel.
    pub fn with_options(
        selector: DeviceSelector,
        options: GpuOptions,
    ) -> Result<GpuSolver, GpuError> {
        if options.work_group == 0 || !options.work_group.is_power_of_two() {
            return Err(GpuError::Config {
                reason: format!("work group {} is not a power of two", options.work_group),
            });
        }
        let device = open_device(selector)?;
        let mut solver = GpuSolver {
            device,
            options,
            kernels: HashMap::new(),
            chunks: 4,
            stats: SolveStats::default(),
        };
        solver.ensure_kernel(PROBE_MAXL)?;
        Ok(solver)
    }

    /// Switches an injected fault on or off from now on (tests: a device that passes its
    /// self-test and fails later). A [`Fault::Build`] shows at the next kernel build.
    pub fn set_fault(&mut self, fault: Option<Fault>) {
        self.options.fault = fault;
        if fault == Some(Fault::Build) {
            self.kernels.clear();
        }
    }

    /// The device in use.
    pub fn device(&self) -> &DeviceInfo {
        self.device.info()
    }

    /// What the last call to [`GpuSolver::solve_jobs`] did.
    pub fn last_stats(&self) -> SolveStats {
        self.stats
    }

    /// Counts every job: the same [`JobCounts`] as [`Job::solve`] (but `nodes`), in the same order.
    pub fn solve_jobs(&mut self, jobs: &[Job]) -> Result<Vec<JobCounts>, GpuError> {
        self.solve_jobs_each(jobs, &mut |_, _| {})
    }

    /// [`GpuSolver::solve_jobs`], also handing each job's counts to `on_job` (with the job's
    /// position in `jobs`) as soon as its batch is counted, so that a caller can record results
    /// and show progress during one long call. After an error, the jobs already handed over are
    /// counted; the others are not.
    pub fn solve_jobs_each(
        &mut self,
        jobs: &[Job],
        on_job: &mut dyn FnMut(usize, &JobCounts),
    ) -> Result<Vec<JobCounts>, GpuError> {
        let started = Instant::now();
        self.stats = SolveStats { jobs: jobs.len(), ..SolveStats::default() };
        let gpu = self.device.info().kind == DeviceKind::Gpu;
        let target =
            self.options.target_items.unwrap_or(if gpu { 1 << 21 } else { 1 << 14 }).max(1);
        let max_items = self.options.max_items.unwrap_or(target.saturating_mul(4)).max(target);
        let planner = Planner::new(jobs, target, max_items)?;
        let mut results = vec![JobCounts::default(); jobs.len()];
        // The next batch is prepared on the CPU while the device counts the current one.
        std::thread::scope(|scope| -> Result<(), GpuError> {
            let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Batch, GpuError>>(1);
            let planner = &planner;
            scope.spawn(move || {
                for range in planner.ranges() {
                    if tx.send(planner.batch(range)).is_err() {
                        return;
                    }
                }
            });
            for batch in rx {
                let batch = batch?;
                let counts = self.run_batch(&batch)?;
                batch.merge_into(&counts, &mut results)?;
                self.stats.batches += 1;
                self.stats.items += batch.items as u64;
                for i in batch.jobs.clone() {
                    on_job(i, &results[i]);
                }
            }
            Ok(())
        })?;
        self.stats.seconds = started.elapsed().as_secs_f64();
        Ok(results)
    }

    /// Compiles the kernel for stacks of `maxl` rows, unless done before.
    fn ensure_kernel(&mut self, maxl: usize) -> Result<(), GpuError> {
        if !self.kernels.contains_key(&maxl) {
            let mut source = String::new();
            if self.options.fault == Some(Fault::Build) {
                source.push_str("#error \"fault injected: NQ_GPU_FAULT=build\"\n");
            }
            source.push_str(KERNEL_SOURCE);
            let mut defines =
                vec![format!("NQ_MAXL={maxl}u"), format!("NQ_WG={}u", self.options.work_group)];
            if self.options.lookahead_rows != 1 {
                defines.push(format!("NQ_LOOKAHEAD_ROWS={}", self.options.lookahead_rows.min(2)));
            }
            let kernel = self.device.build(&source, &defines)?;
            self.kernels.insert(maxl, kernel);
        }
        Ok(())
    }

    /// Counts every item of one batch; one 64-bit count (and node count) per item. The batch's
    /// buffers are freed whatever the outcome.
    fn run_batch(&mut self, batch: &Batch) -> Result<Vec<(u64, u64)>, GpuError> {
        let result = self.count_batch(batch);
        self.device.release_buffers();
        result
    }

    /// Counts every item of one batch (see [`GpuSolver::run_batch`]).
    fn count_batch(&mut self, batch: &Batch) -> Result<Vec<(u64, u64)>, GpuError> {
        let n_items = batch.items;
        if n_items == 0 {
            return Ok(Vec::new());
        }
        let wg = self.options.work_group;
        // Local memory: 6 words per level and lane (a frame of 4, the row data of 2); deeper
        // stacks than the device holds are refused.
        let maxl = batch.maxl.max(2);
        let local_bytes = (maxl * 6 * wg * 4) as u64;
        let local_mem_bytes = self.device.info().local_mem_bytes;
        if local_bytes > local_mem_bytes {
            return Err(GpuError::OutOfMemory {
                what: format!(
                    "local memory: {local_bytes} bytes for {maxl} rows x {wg} lanes, the device has {local_mem_bytes}"
                ),
            });
        }
        self.ensure_kernel(maxl)?;
        let kernel = self.kernels[&maxl];
        let lanes = self.lanes(kernel, local_bytes, n_items);
        let started = Instant::now();
        let mut args = upload_batch(self.device.as_mut(), batch, lanes, maxl)?;
        let dispatches = self.dispatch_until_counted(kernel, &mut args, lanes, n_items)?;
        let device = self.device.as_mut();
        let found = backend::read_u64(device, args.counts, n_items, "the item counts")?;
        let placed = backend::read_u64(device, args.nodes, n_items, "the node counts")?;
        self.stats.steps += placed.iter().sum::<u64>();
        self.stats.dispatches += dispatches;
        self.stats.device_seconds += started.elapsed().as_secs_f64();
        // Every item writes its count exactly once; one left at the fill value was never counted.
        if let Some(i) = found.iter().position(|&c| c == u64::MAX) {
            return Err(GpuError::Incomplete { item: i });
        }
        Ok(found.into_iter().zip(placed).collect())
    }

    /// Lanes of one dispatch of `kernel` (each group using `local_bytes`): enough resident
    /// groups to fill every compute unit, but no more than `n_items` items need.
    fn lanes(&self, kernel: Kernel, local_bytes: u64, n_items: usize) -> usize {
        let wg = self.options.work_group;
        let info = self.device.info();
        let groups_per_unit = self
            .options
            .groups_per_unit
            .or_else(|| self.device.resident_groups(kernel, wg, local_bytes as usize))
            .unwrap_or(if info.kind == DeviceKind::Gpu { 16 } else { 2 })
            .max(1);
        let wanted = info.compute_units.max(1) as usize * groups_per_unit * wg;
        wanted.min(n_items.div_ceil(wg) * wg)
    }

    /// Dispatches `kernel` over the `n_items` items of `args` until every one is counted, each
    /// dispatch's step budget (`args.chunks`) adapted towards `dispatch_ms`; the dispatches made.
    fn dispatch_until_counted(
        &mut self,
        kernel: Kernel,
        args: &mut backend::Args,
        lanes: usize,
        n_items: usize,
    ) -> Result<usize, GpuError> {
        let wg = self.options.work_group;
        let fault = self.options.fault;
        let dispatch = Duration::from_millis(self.options.dispatch_ms.max(1));
        let max_chunks = self.options.max_chunks.max(1);
        args.chunks = self.chunks.clamp(1, max_chunks);
        let device = self.device.as_mut();
        let mut dispatches = 0usize;
        loop {
            let t = Instant::now();
            device.dispatch(kernel, args, lanes, wg)?;
            let mut state = [0u32; 2];
            device.read(args.counters, 0, &mut state, "the progress counters")?;
            dispatches += 1;
            if fault == Some(Fault::MidBatch) && dispatches == 1 {
                // A read past the end of a buffer: refused with the API's own error.
                let mut beyond = [0u32; 4];
                device.read(args.counters, 2, &mut beyond, "the progress counters")?;
            }
            let [next, pending] = state;
            self.stats.resumed += pending as u64;
            if next as usize >= n_items && pending == 0 {
                break;
            }
            // Longer or shorter dispatches, towards the wanted length (at most x4 per step).
            let took = t.elapsed().as_secs_f64().max(1e-4);
            let factor = (dispatch.as_secs_f64() / took).clamp(0.25, 4.0);
            args.chunks = ((args.chunks as f64 * factor) as u32).clamp(1, max_chunks);
            // Lanes that found the list empty pushed `next` past the end; bring it back so it
            // cannot wrap over many dispatches.
            let counters = args.counters;
            device.write(counters, &[next.min(n_items as u32), 0], "the progress counters")?;
        }
        self.chunks = args.chunks;
        Ok(dispatches)
    }
}

/// The buffers of one batch on `device`: its job table and items, the progress counters at 0,
/// every count at `u64::MAX` (never a count), room for `lanes` saved stacks of `maxl` rows.
fn upload_batch(
    device: &mut dyn Backend,
    batch: &Batch,
    lanes: usize,
    maxl: usize,
) -> Result<backend::Args, GpuError> {
    let n_items = batch.items;
    let save_words = 6 + 4 * maxl;
    let table = backend::upload(device, &batch.table, "the job table")?;
    let items = backend::upload(device, &batch.item_words, "the work items")?;
    let counters = backend::upload(device, &[0, 0], "the counters")?;
    // Two words per 64-bit count.
    let counts = device.alloc(2 * n_items, u32::MAX, "the item counts")?;
    let nodes = device.alloc(2 * n_items, 0, "the node counts")?;
    let saved = device.alloc(lanes * save_words, 0, "the saved stacks")?;
    let n_items = n_items as u32;
    Ok(backend::Args { table, items, n_items, counters, counts, nodes, saved, chunks: 1 })
}

/// Opens the selected device: `Auto` and `GpuOnly` look for an OpenCL GPU first, then a CUDA
/// device (ordinal 0); `Auto` then takes any OpenCL device (such as pocl's CPU device). When
/// nothing fits, the OpenCL error is returned with why CUDA did not serve either.
fn open_device(selector: DeviceSelector) -> Result<Box<dyn Backend>, GpuError> {
    match selector {
        DeviceSelector::Cuda(ordinal) => Ok(Box::new(cuda::CudaDevice::open(ordinal)?)),
        DeviceSelector::Index(i) => Ok(Box::new(opencl::Opened::open_index(i)?)),
        DeviceSelector::Auto | DeviceSelector::GpuOnly => {
            let opencl_error = match opencl::Opened::open_gpu() {
                Ok(opened) => return Ok(Box::new(opened)),
                Err(e) => e,
            };
            let cuda_error = match cuda::CudaDevice::open(0) {
                Ok(device) => return Ok(Box::new(device)),
                Err(e) => e,
            };
            if selector == DeviceSelector::Auto {
                if let Ok(opened) = opencl::Opened::open_first() {
                    return Ok(Box::new(opened));
                }
            }
            Err(opencl_error.with_note(&format!("no CUDA device either: {cuda_error}")))
        }
    }
}
