//! Kernel adapters: thin, typed wrappers over the syscalls and kernel files the node needs
//! (mounts, loop devices, module loading, the kernel command line).
//!
//! This is the only place in the crate allowed to hold `unsafe`, each block with a `// SAFETY:`
//! line. Parsing and decisions stay pure and table-tested here; the code that touches the kernel
//! stays thin. Nothing here shells out to `mount`, `losetup` or `modprobe`, and nothing here may
//! panic on a runtime path: PID 1 calls into it.

pub mod cmdline;
pub mod console;
pub mod input;
pub mod loopdev;
pub mod modules;
pub mod mount;
pub mod power;
