//! Memory objects over file descriptors (issue 29, item 4): only a memfd sealed against
//! shrinking is mapped; any other file is read with `pread` and written with `pwrite`,
//! so another thread or process truncating it makes computes fail cleanly, never SIGBUS.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nnc_formats::container::{WriteOptions, write};
use nnc_formats::crypto::{Algorithm, Key, Mode};
use nnc_formats::nn::{IoInfo, Model, Operand, OperandType, OperationType};
use nnc_formats::tensor::{DataType, HostTensor};
use nnc_runtime::{Execution, LoadOptions, Memory, PreparedModel, RuntimeError, SimulatedNpu};

const N: u32 = 32;
const BYTES: usize = N as usize * 4;

/// `y = relu(FC(x))`, x and y `f32[1, 32]`.
fn load_model() -> Arc<PreparedModel> {
    let mut m = Model::default();
    let f32_op = |dims: Vec<u32>| Operand::new(OperandType::TensorFloat32, dims);
    let x = m.main.add_input(f32_op(vec![1, N]));
    let weights: Vec<f32> = (0..N * N).map(|k| (k % 17) as f32 / 170.0 - 0.02).collect();
    let w = m.add_f32_tensor(vec![N, N], &weights);
    let b = m.add_f32_tensor(vec![N], &vec![0.01; N as usize]);
    let act = m.add_i32(1);
    let y = m.main.add_output(f32_op(vec![1, N]));
    m.add_operation(
        OperationType::FullyConnected,
        vec![x, w, b, act],
        vec![y],
        "fc",
    );
    let io = |name: &str| IoInfo {
        name: name.into(),
        dtype: DataType::F32,
        dims: vec![1, N],
    };
    m.input_info = vec![io("x")];
    m.output_info = vec![io("y")];
    let key = Key::generate(Algorithm::Aes128).unwrap();
    let bytes = write(
        &m,
        &WriteOptions {
            envelope: Default::default(),
            key: Some(&key),
            mode: Mode::Ctr,
            authenticate_only: false,
            reproducible: false,
            producer: "nnc test".into(),
            arena: None,
            extra_sections: Vec::new(),
        },
    )
    .unwrap();
    let npu = SimulatedNpu::new("npu0");
    npu.install_key(key.as_bytes());
    Arc::new(PreparedModel::load_bytes(bytes, &npu, &LoadOptions::default()).unwrap())
}

fn input() -> Vec<u8> {
    let x: Vec<f32> = (0..N).map(|k| (k % 7) as f32 / 7.0 - 0.2).collect();
    bytemuck::cast_slice(&x).to_vec()
}

fn plain(model: &PreparedModel) -> Vec<u8> {
    let t = HostTensor::new(DataType::F32, vec![1, N as usize], input()).unwrap();
    let y = model.run(&[t]).unwrap()[0].to_f32_vec().unwrap();
    bytemuck::cast_slice(&y).to_vec()
}

fn memfd(name: &str, size: u64, seal: bool) -> File {
    let name = std::ffi::CString::new(name).unwrap();
    // SAFETY: a valid NUL-terminated name and flags; the result is checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0);
    // SAFETY: just created, owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(size).unwrap();
    if seal {
        // SAFETY: `fd` is the memfd just created (owned by `file`, still open), and
        // F_ADD_SEALS takes an int argument.
        let sealed = unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) };
        assert_eq!(sealed, 0);
    }
    file
}

fn dup(file: &File) -> OwnedFd {
    OwnedFd::from(file.try_clone().unwrap())
}

/// Whether this process maps a memfd of that name.
fn mapped(name: &str) -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .unwrap()
        .contains(&format!("memfd:{name} "))
}

/// An execution with x at byte 0 and y at byte 128 of `file` (which holds the input).
fn bound_to(model: &Arc<PreparedModel>, file: &File) -> (Execution, Arc<Memory>) {
    file.write_all_at(&input(), 0).unwrap();
    let memory = Memory::from_fd(dup(file), 0, 2 * BYTES).unwrap();
    let mut e = Execution::new(model);
    e.set_input(0, &memory, 0, BYTES, None).unwrap();
    e.set_output(0, &memory, BYTES, BYTES).unwrap();
    (e, memory)
}

fn is_truncation(err: &RuntimeError) -> bool {
    matches!(err, RuntimeError::Memory { message, .. } if message.contains("truncated"))
}

/// The audit's SIGBUS, between computes, for a file and an unsealed memfd: neither is
/// mapped; a truncated input, then a truncated output, fail their compute naming the
/// truncation; a refused write does not grow the file; restored, it computes again.
#[test]
fn a_file_truncated_between_computes_fails_them_cleanly() {
    let model = load_model();
    let expected = plain(&model);
    let temp = tempfile::tempfile().unwrap();
    let unsealed = memfd("nnc-rust-unsealed", 2 * BYTES as u64, false);
    temp.set_len(2 * BYTES as u64).unwrap();
    for file in [&temp, &unsealed] {
        let (e, memory) = bound_to(&model, file);
        assert!(
            !mapped("nnc-rust-unsealed"),
            "an unsealed memfd is never mapped"
        );
        e.compute().unwrap();
        let mut got = vec![0u8; BYTES];
        file.read_exact_at(&mut got, BYTES as u64).unwrap();
        assert_eq!(got, expected, "the output went through pwrite");
        assert_eq!(
            memory.with_bytes(|b| b[BYTES..].to_vec()).unwrap(),
            expected
        );

        file.set_len(0).unwrap();
        let err = e.compute().unwrap_err();
        assert!(is_truncation(&err), "input truncated away: {err}");
        assert!(memory.with_bytes(|_| ()).is_err());
        file.write_all_at(&input(), 0).unwrap();
        let err = e.compute().unwrap_err();
        assert!(is_truncation(&err), "output truncated away: {err}");
        assert_eq!(
            file.metadata().unwrap().len(),
            BYTES as u64,
            "a refused write does not grow the file"
        );
        file.set_len(2 * BYTES as u64).unwrap();
        e.compute().unwrap();
        file.read_exact_at(&mut got, BYTES as u64).unwrap();
        assert_eq!(got, expected);
    }
}

/// The audit's SIGBUS, during computes: another thread truncates and restores the
/// file as fast as it can. Every compute succeeds or fails naming the truncation; the
/// process never receives a signal (with the old mapping of any fd, it did).
#[test]
fn a_file_truncated_during_computes_never_raises_a_signal() {
    let model = load_model();
    let size = 2 * BYTES as u64;
    let temp = tempfile::tempfile().unwrap();
    temp.set_len(size).unwrap();
    let unsealed = memfd("nnc-rust-racing", size, false);
    for file in [temp, unsealed] {
        let (e, memory) = bound_to(&model, &file);
        let stop = Arc::new(AtomicBool::new(false));
        let truncator = {
            let file = file.try_clone().unwrap();
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut flips = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    file.set_len(0).unwrap();
                    file.set_len(size).unwrap();
                    file.write_all_at(&input(), 0).unwrap();
                    flips += 1;
                }
                flips
            })
        };
        let (mut ok, mut refused) = (0, 0);
        let until = Instant::now() + Duration::from_millis(400);
        while Instant::now() < until {
            match e.compute() {
                Ok(_) => ok += 1,
                Err(err) if is_truncation(&err) => refused += 1,
                Err(err) => panic!("{err}"),
            }
            // The other accessors are no more fragile.
            let _ = memory.with_bytes(|b| b.len());
            let _ = memory.read_region(BYTES, BYTES);
        }
        stop.store(true, Ordering::Relaxed);
        let flips = truncator.join().unwrap();
        assert!(flips > 0 && ok + refused > 0, "{flips} {ok} {refused}");
    }
}

/// A memfd sealed against shrinking is mapped (zero-copy: the mapping and the
/// descriptor show the same bytes), and `create_shared` seals its own memfd so that
/// whoever holds the descriptor cannot shrink or grow it.
#[test]
fn sealed_memfds_are_mapped_and_shared_memory_cannot_shrink() {
    let model = load_model();
    let sealed = memfd("nnc-rust-sealed", 2 * BYTES as u64, true);
    let (e, memory) = bound_to(&model, &sealed);
    assert!(mapped("nnc-rust-sealed"), "a sealed memfd is mapped");
    e.compute().unwrap();
    let mut got = vec![0u8; BYTES];
    sealed.read_exact_at(&mut got, BYTES as u64).unwrap();
    assert_eq!(got, plain(&model));
    assert!(sealed.set_len(0).is_err(), "the seal forbids shrinking");
    drop((e, memory));

    let shared = Memory::create_shared(4096).unwrap();
    let fd = shared.raw_fd().unwrap();
    // SAFETY: the memory's live descriptor, with valid commands.
    let seals = unsafe { libc::fcntl(fd, libc::F_GET_SEALS) };
    assert_eq!(
        seals & (libc::F_SEAL_SHRINK | libc::F_SEAL_GROW),
        libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
        "seals {seals:#x}"
    );
    // SAFETY: `fd` is the memory's live descriptor; the call must fail (sealed).
    let shrunk = unsafe { libc::ftruncate(fd, 0) };
    assert_ne!(shrunk, 0, "cannot shrink");
    // SAFETY: as for the shrink.
    let grown = unsafe { libc::ftruncate(fd, 8192) };
    assert_ne!(grown, 0, "cannot grow");
    assert!(Memory::create_shared(0).is_err());
}

/// What `Memory::from_fd` refuses, with a message saying why: a pipe, a device, a
/// read-only file, bytes beyond the file, zero bytes.
#[test]
fn descriptors_that_are_not_read_write_regular_files_are_refused() {
    let mut fds = [0i32; 2];
    // SAFETY: a valid array for two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just made and are owned here.
    let (r, w) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    let zero = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/zero")
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("read-only");
    std::fs::write(&path, [0u8; 64]).unwrap();
    let read_only = File::open(&path).unwrap();
    let small = memfd("nnc-rust-small", 64, false);
    for (file, size, what) in [
        (&r, 16, "not a regular file"),
        (&w, 16, "not a regular file"),
        (&zero, 16, "not a regular file"),
        (&read_only, 16, "O_RDWR"),
        (&small, 65, "beyond the file's 64 bytes"),
        (&small, 0, "at least one byte"),
    ] {
        let err = Memory::from_fd(dup(file), 0, size).unwrap_err();
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
    assert!(small.as_raw_fd() >= 0);
}

/// Copies between a file pool and a heap pool go through pread/pwrite.
#[test]
fn memory_copy_reads_and_writes_file_pools() {
    let file = tempfile::tempfile().unwrap();
    file.set_len(64).unwrap();
    let pool = Memory::from_fd(dup(&file), 0, 64).unwrap();
    let heap = Memory::from_bytes(&[7u8; 64]).unwrap();
    Memory::copy(&heap, &pool).unwrap();
    let mut got = [0u8; 64];
    file.read_exact_at(&mut got, 0).unwrap();
    assert_eq!(got, [7u8; 64]);
    pool.with_bytes_mut(|b| b[0] = 9).unwrap();
    let back = Memory::new(64).unwrap();
    Memory::copy(&pool, &back).unwrap();
    assert_eq!(back.read_region(0, 2).unwrap(), vec![9, 7]);
    file.set_len(10).unwrap();
    let err = Memory::copy(&heap, &pool).unwrap_err();
    assert!(is_truncation(&err), "{err}");
    assert_eq!(file.metadata().unwrap().len(), 10, "not grown back");
}
