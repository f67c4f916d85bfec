//! # rverbs-provider
//!
//! The data path of the devices rverbs drives: rxe (soft-RoCE) and mlx5 (ConnectX).
//! Providers are chosen from a static table keyed by the kernel's driver id.

#![deny(unsafe_code)]

pub mod mlx5;
pub mod rxe;
