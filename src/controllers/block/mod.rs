//! Block controllers: the node's devices and disks, what is on them, and the volumes made and
//! mounted from them — Talos's `controllers/block`, one controller per file. The decisions of
//! the volume manager are pure ([`volumes`]); the controllers gather facts and carry them out.

pub mod volumes;
