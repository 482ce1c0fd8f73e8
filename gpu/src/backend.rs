//! What the solver needs of a device API, OpenCL ([`crate::opencl`]) or CUDA ([`crate::cuda`]):
//! compile the kernel, hold buffers of 32-bit words, run one dispatch and wait for it. Every call
//! that fails returns a [`GpuError`] saying what the host was doing.

use crate::{DeviceInfo, GpuError};

/// A buffer of a backend (valid until [`Backend::release_buffers`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Buffer(pub usize);

/// A compiled kernel of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kernel(pub usize);

/// The kernel's arguments, in order (see the host contract in kernel.cl). The 64-bit arrays
/// (`counts`, `nodes`) are buffers of twice as many words.
pub(crate) struct Args {
    pub table: Buffer,
    pub items: Buffer,
    pub n_items: u32,
    pub counters: Buffer,
    pub counts: Buffer,
    pub nodes: Buffer,
    pub saved: Buffer,
    pub chunks: u32,
}

/// One open device.
pub(crate) trait Backend: Send {
    /// The device.
    fn info(&self) -> &DeviceInfo;

    /// Compiles `source` with these macro definitions (`NAME=VALUE` or `NAME`).
    fn build(&mut self, source: &str, defines: &[String]) -> Result<Kernel, GpuError>;

    /// A buffer of `words` 32-bit words, each `fill`.
    fn alloc(&mut self, words: usize, fill: u32, what: &str) -> Result<Buffer, GpuError>;

    /// Blocking write of `data` to the start of `buffer`.
    fn write(&mut self, buffer: Buffer, data: &[u32], what: &str) -> Result<(), GpuError>;

    /// Blocking read of `out.len()` words from word `offset` of `buffer`.
    fn read(
        &mut self,
        buffer: Buffer,
        offset: usize,
        out: &mut [u32],
        what: &str,
    ) -> Result<(), GpuError>;

    /// One dispatch of `lanes` lanes in groups of `group`, waited for.
    fn dispatch(
        &mut self,
        kernel: Kernel,
        args: &Args,
        lanes: usize,
        group: usize,
    ) -> Result<(), GpuError>;

    /// Frees every buffer (at the end of a batch).
    fn release_buffers(&mut self);

    /// How many groups of `group` lanes of `kernel`, each using `local_bytes` of local memory,
    /// one compute unit runs at once, where that can be known (CUDA's occupancy calculator; an
    /// NVIDIA card's compute capability under OpenCL); `None` where it cannot.
    fn resident_groups(&self, kernel: Kernel, group: usize, local_bytes: usize) -> Option<usize>;
}

/// A buffer holding `data`.
pub(crate) fn upload(
    backend: &mut dyn Backend,
    data: &[u32],
    what: &str,
) -> Result<Buffer, GpuError> {
    let buffer = backend.alloc(data.len(), 0, what)?;
    if !data.is_empty() {
        backend.write(buffer, data, what)?;
    }
    Ok(buffer)
}

/// Blocking read of a whole array of `len` 64-bit values.
pub(crate) fn read_u64(
    backend: &mut dyn Backend,
    buffer: Buffer,
    len: usize,
    what: &str,
) -> Result<Vec<u64>, GpuError> {
    let mut words = vec![0u32; 2 * len];
    backend.read(buffer, 0, &mut words, what)?;
    // Both sides are little-endian: the low word first.
    Ok(words.chunks_exact(2).map(|w| w[0] as u64 | (w[1] as u64) << 32).collect())
}
