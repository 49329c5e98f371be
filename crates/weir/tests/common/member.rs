//! One member of a test cluster, started as its own `weir run` process: the node name, a free
//! listener and admin port, etcd and the origin given as the `${WEIR_*}` variables the cluster
//! configs use (`examples/cluster/node.yaml` and the tests' own).
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::process::Command;

use super::process::{free_port, spawn_serving, Running};

/// Starts `cmd` (a `weir run -c CONFIG` command) as member `name`; the process, its listener's
/// address and its admin address.
pub fn start_member(
    mut cmd: Command,
    name: &str,
    etcd: SocketAddr,
    origin: SocketAddr,
) -> (Running, SocketAddr, SocketAddr) {
    let (port, admin_port) = (free_port(), free_port());
    cmd.env("WEIR_NODE", name)
        .env("WEIR_LISTEN", format!("127.0.0.1:{port}"))
        .env("WEIR_ADMIN", format!("127.0.0.1:{admin_port}"))
        .env("WEIR_ETCD", etcd.to_string())
        .env("WEIR_ORIGIN", origin.to_string());
    let (proc, addr) = spawn_serving(cmd);
    let admin = format!("127.0.0.1:{admin_port}").parse().unwrap();
    (proc, addr, admin)
}
