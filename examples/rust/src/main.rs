//! A Rust user of libtgrad, the twin of examples/c/matmul.c: build two matrices, multiply them
//! through views (a transpose and a strided slice), check the result against values known in
//! advance, print a checksum. Exits non-zero on a failed call, a wrong value or a leaked tensor.
//! Build and run against an installed tgrad (build.rs asks pkg-config for the link flags):
//!     PKG_CONFIG_PATH=$(python -m tgrad config --pkgconfig-dir) cargo run --offline --release
use std::ffi::{c_char, CStr};
use std::process::ExitCode;

// ---- the part of tgrad.h this program uses ------------------------------------------------------
// Kept in step with libtgrad/include/tgrad.h by tests/python/test_rust_example.py: every `fn
// tgrad_...` below must have the header's parameter and return types, every `const TGRAD_...` the
// header's value. Types as tgrad.h defines them: tgrad_status and tgrad_tensor_t are these aliases.
#[allow(non_camel_case_types)]
type tgrad_status = i32;
#[allow(non_camel_case_types)]
type tgrad_tensor_t = u64;

/// The header version these declarations were written against (TGRAD_VERSION_NUMBER of tgrad.h
/// 0.1.0): the library must have the same major version and be at least this new.
const TGRAD_VERSION_NUMBER: u32 = 100;
const TGRAD_OK: tgrad_status = 0;
const TGRAD_SLICE_START_NONE: u32 = 1;
const TGRAD_SLICE_STOP_NONE: u32 = 2;

extern "C" {
    fn tgrad_check_version(header_version: u32) -> tgrad_status;
    fn tgrad_version_string() -> *const c_char;
    fn tgrad_status_name(status: tgrad_status) -> *const c_char;
    fn tgrad_last_error() -> *const c_char;
    fn tgrad_cpu_isa() -> *const c_char;
    fn tgrad_live_tensors() -> i64;
    fn tgrad_tensor_from_f32(data: *const f32, ndim: i32, shape: *const i64, out: *mut tgrad_tensor_t) -> tgrad_status;
    fn tgrad_tensor_release(tensor: tgrad_tensor_t) -> tgrad_status;
    fn tgrad_tensor_transpose(tensor: tgrad_tensor_t, axis0: i32, axis1: i32, out: *mut tgrad_tensor_t)
        -> tgrad_status;
    fn tgrad_tensor_slice(
        tensor: tgrad_tensor_t,
        axis: i32,
        start: i64,
        stop: i64,
        step: i64,
        flags: u32,
        out: *mut tgrad_tensor_t,
    ) -> tgrad_status;
    fn tgrad_matmul(a: tgrad_tensor_t, b: tgrad_tensor_t, out: *mut tgrad_tensor_t) -> tgrad_status;
    fn tgrad_tensor_read_f32(tensor: tgrad_tensor_t, dst: *mut f32, capacity: usize) -> tgrad_status;
}

// ---- a safe face on the calls ------------------------------------------------------------------
fn text(ptr: *const c_char) -> String {
    // tgrad's strings are static or thread-local and never NULL (tgrad.h).
    unsafe { CStr::from_ptr(ptr) }.to_string_lossy().into_owned()
}

/// Ok for TGRAD_OK, else the call's name, the status's registry name and the thread's last error.
fn check(status: tgrad_status, call: &str) -> Result<(), String> {
    if status == TGRAD_OK {
        return Ok(());
    }
    Err(format!(
        "{call} failed: {}: {}",
        text(unsafe { tgrad_status_name(status) }),
        text(unsafe { tgrad_last_error() })
    ))
}

/// An owned handle, released when dropped (release of a live handle cannot fail).
struct Tensor(tgrad_tensor_t);

impl Drop for Tensor {
    fn drop(&mut self) {
        unsafe { tgrad_tensor_release(self.0) };
    }
}

/// Runs a tgrad call that writes one new handle and takes ownership of it.
fn make(call: &str, f: impl FnOnce(*mut tgrad_tensor_t) -> tgrad_status) -> Result<Tensor, String> {
    let mut handle: tgrad_tensor_t = 0;
    check(f(&mut handle), call)?;
    Ok(Tensor(handle))
}

fn from_f32(data: &[f32], shape: &[i64]) -> Result<Tensor, String> {
    assert_eq!(data.len() as i64, shape.iter().product::<i64>());
    make("tgrad_tensor_from_f32", |out| unsafe {
        tgrad_tensor_from_f32(data.as_ptr(), shape.len() as i32, shape.as_ptr(), out)
    })
}

fn read_f32(t: &Tensor, n: usize) -> Result<Vec<f32>, String> {
    let mut out = vec![0.0f32; n];
    check(unsafe { tgrad_tensor_read_f32(t.0, out.as_mut_ptr(), out.len()) }, "tgrad_tensor_read_f32")?;
    Ok(out)
}

// ---- the example --------------------------------------------------------------------------------
const M: usize = 64;
const K: usize = 48;
const N: usize = 80;

/// The number of wrong values and the checksum; every tensor is released on return.
fn multiply_through_views() -> Result<(usize, f64), String> {
    // A is stored transposed ([K, M]) and viewed back with a transpose; B is stored with every
    // second row dropped by a slice of a [2K, N] buffer. Small integers keep every sum exact.
    let at: Vec<f32> = (0..K * M).map(|i| (((i % M) + 2 * (i / M)) % 5) as f32 - 2.0).collect();
    let b2: Vec<f32> = (0..2 * K * N)
        .map(|i| {
            let (k, n) = (i / N, i % N);
            if k % 2 == 1 {
                99.0
            } else {
                ((3 * n + k / 2) % 7) as f32 - 3.0
            }
        })
        .collect();

    let ta = from_f32(&at, &[K as i64, M as i64])?;
    let tb = from_f32(&b2, &[2 * K as i64, N as i64])?;
    let a = make("tgrad_tensor_transpose", |out| unsafe { tgrad_tensor_transpose(ta.0, 0, 1, out) })?; // [M, K]
    let b = make("tgrad_tensor_slice", |out| unsafe {
        tgrad_tensor_slice(tb.0, 0, 0, 0, 2, TGRAD_SLICE_START_NONE | TGRAD_SLICE_STOP_NONE, out)
    })?; // [K, N]
    let c = make("tgrad_matmul", |out| unsafe { tgrad_matmul(a.0, b.0, out) })?;

    let out = read_f32(&c, M * N)?;
    let (mut wrong, mut checksum) = (0usize, 0f64);
    for m in 0..M {
        for n in 0..N {
            let want: f32 = (0..K).map(|k| at[k * M + m] * b2[2 * k * N + n]).sum();
            let got = out[m * N + n];
            wrong += (got != want) as usize;
            checksum += got as f64 * (1 + (m * N + n) % 13) as f64;
        }
    }
    Ok((wrong, checksum))
}

fn main() -> ExitCode {
    let run = check(unsafe { tgrad_check_version(TGRAD_VERSION_NUMBER) }, "tgrad_check_version")
        .and_then(|()| multiply_through_views());
    let (wrong, checksum) = match run {
        Ok(result) => result,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::FAILURE;
        }
    };
    let live = unsafe { tgrad_live_tensors() };
    println!(
        "tgrad {}, cpu {}, from Rust: {M}x{K}x{N} through views, {wrong} wrong, checksum {checksum:.1}, live tensors {live}",
        text(unsafe { tgrad_version_string() }),
        text(unsafe { tgrad_cpu_isa() }),
    );
    if wrong != 0 || live != 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
